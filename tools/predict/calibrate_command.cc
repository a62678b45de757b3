// kolo-predict calibrate: measure (short kolo-bench sweeps under kolorun)
// and fit the constants (predict/fit.h), or fit a measurement file.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "predict/fit.h"
#include "predict/json.h"
#include "predict/units.h"
#include "predict_cli.h"

namespace kolo::predict::cli {
namespace {

constexpr const char* kUsage =
    R"(usage: kolo-predict calibrate [--transport shm|tcp|mpi] [-H HOSTS ...] [--out FILE]
                              [--from CSV] [options]

Runs short kolo-bench sweeps of each allreduce algorithm under kolorun (one
run per rank count or -H host list), writes the measurements (CSV), fits the
constants of the paths they use by least squares and writes them (JSON).
With --from CSV, only fits (a file of the same columns, e.g. from bench/scale/).

  --transport T      KOLO_TRANSPORT of the runs: shm (shm inside a host, tcp
                     between hosts; default), tcp or mpi
  -H HOSTS           kolorun's host list, e.g. a:2,b:2 (repeatable: one run
                     each); without: one host, --np ranks
  --np LIST          rank counts on one host (2,4)
  --sizes LIST       allreduce sizes (4K,64K,1M,8M)
  --iters N          timed iterations per size (20; 2 warm-up)
  --repeats R        runs of each sweep; each size's median is kept (3)
  --out FILE         the constants file to write (kolo-constants.json)
  --csv FILE         the measurements to write (FILE of --out with .csv)
  --from CSV         fit these measurements instead of running anything
  --constants FILE   starting constants (default: KOLO_PREDICT_CONSTANTS, else
                     built in); paths the data do not touch keep them
  --cores C          cores per host of the measured machine (0: not limited)
  --one-machine      the measured hosts shared one machine's cores
  --link-burst SIZE  token bucket of the measured links (tc tbf burst; 0)
  --spin TIME        KOLO_SPIN_US of the measured runs (100us)
  --launcher-arg A   one more argument for kolorun (repeatable, e.g.
                     --launcher-arg=--ssh-command=kolo-local-rsh)
  --bin-dir DIR      where kolorun and kolo-bench are (beside kolo-predict)
)";

std::string selfDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// One kolorun job's settings.
struct Run {
  int hosts = 1;
  int ranksPerHost = 1;
  std::string hostList;  // -H value, empty: one host
};

// "a:2,b:2" -> 2 hosts of 2 ranks; hosts must have the same slot count.
Run runOfHosts(const std::string& list) {
  Run r;
  r.hostList = list;
  r.hosts = 0;
  int slots = -1;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) throw UsageError("-H '" + list + "': an empty host name");
    int s = 1;
    if (const size_t colon = item.find(':'); colon != std::string::npos) {
      s = static_cast<int>(parseWhole("-H " + list, item.substr(colon + 1), 1, 1 << 16));
    }
    if (slots >= 0 && s != slots) {
      throw UsageError("-H '" + list +
                       "': every host needs the same number of slots (the model places "
                       "ranks in equal blocks)");
    }
    slots = s;
    ++r.hosts;
  }
  if (r.hosts == 0) throw UsageError("-H: no hosts given");
  r.ranksPerHost = slots;
  return r;
}

// The number after "key": in a kolo-bench JSON line.
std::optional<double> jsonField(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(line.c_str() + at + k.size(), nullptr);
}

// Runs kolo-bench for one algorithm; appends a measurement per size (the
// time of one call: kolo-bench's mean over `iters` calls, max over ranks).
void measureOnce(const Run& run, const std::string& transport, Algorithm a,
                 const std::string& sizes, long iters, const std::string& binDir,
                 const std::vector<std::string>& launcherArgs,
                 std::vector<Measurement>& out, std::ostream& log) {
  std::ostringstream cmd;
  cmd << "KOLO_TRANSPORT=" << shellQuote(transport) << " "
      << shellQuote(binDir + "/kolorun") << " -np " << run.hosts * run.ranksPerHost;
  if (!run.hostList.empty()) cmd << " -H " << shellQuote(run.hostList);
  for (const auto& arg : launcherArgs) cmd << " " << shellQuote(arg);
  cmd << " " << shellQuote(binDir + "/kolo-bench") << " -a " << toString(a) << " --sizes "
      << shellQuote(sizes) << " -n " << iters << " -w 2 --json --no-check 2>&1";
  log << "# " << cmd.str() << "\n" << std::flush;
  FILE* pipe = ::popen(cmd.str().c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot start: " + cmd.str());
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) text += buf;
  const int status = ::pclose(pipe);
  std::istringstream lines(text);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("\"tool\":\"kolo-bench\"") == std::string::npos) continue;
    const auto bytes = jsonField(line, "bytes");
    const auto us = jsonField(line, "time_us");
    if (!bytes || !us || *us <= 0) continue;
    Measurement m;
    m.transport = transport;
    m.hosts = run.hosts;
    m.ranksPerHost = run.ranksPerHost;
    m.algorithm = a;
    m.bytes = static_cast<size_t>(*bytes);
    m.seconds = *us * 1e-6;
    out.push_back(m);
    ++rows;
  }
  if (status != 0 || rows == 0) {
    throw std::runtime_error("kolo-bench failed (" + cmd.str() + "):\n" + text);
  }
}

// measureOnce `repeats` times; each size's median time.
void measure(const Run& run, const std::string& transport, Algorithm a,
             const std::string& sizes, long iters, int repeats, const std::string& binDir,
             const std::vector<std::string>& launcherArgs, std::vector<Measurement>& out,
             std::ostream& log) {
  std::vector<Measurement> all;
  for (int i = 0; i < repeats; ++i) {
    measureOnce(run, transport, a, sizes, iters, binDir, launcherArgs, all, log);
  }
  std::vector<size_t> order;
  for (const auto& m : all) {
    if (std::find(order.begin(), order.end(), m.bytes) == order.end()) {
      order.push_back(m.bytes);
    }
  }
  for (size_t bytes : order) {
    std::vector<double> times;
    Measurement median;
    for (const auto& m : all) {
      if (m.bytes != bytes) continue;
      times.push_back(m.seconds);
      median = m;
    }
    std::sort(times.begin(), times.end());
    median.seconds = times[times.size() / 2];
    out.push_back(median);
  }
}

void report(const std::vector<Measurement>& data, const FitResult& fit,
            std::ostream& out) {
  out << "# fit: " << data.size() << " measurements, " << fit.iterations
      << " iterations; median error " << std::fixed << std::setprecision(1)
      << 100 * fit.medianRelativeError << "%, max " << 100 * fit.maxRelativeError
      << "%\n";
  out << "# transport hosts x k  algo      bytes     measured    predicted   error\n";
  for (size_t i = 0; i < data.size(); ++i) {
    const auto& m = data[i];
    out << "  " << std::setw(9) << m.transport << std::setw(6) << m.hosts << " x "
        << m.ranksPerHost << std::setw(6) << toString(m.algorithm) << std::setw(11)
        << m.bytes << std::setw(13) << formatSeconds(m.seconds) << std::setw(13)
        << formatSeconds(fit.predicted[i]) << std::setw(7) << std::setprecision(1)
        << 100 * (fit.predicted[i] - m.seconds) / m.seconds << "%\n";
  }
  out << "# fitted constants (seconds; beta, gamma per byte):\n";
  for (const auto& [p, t] : fit.fitted) {
    out << "  " << std::setw(9) << toString(p) << " " << std::setw(8) << toString(t)
        << " " << std::scientific << std::setprecision(3) << fit.constants.get(p, t)
        << std::fixed << "\n";
  }
}

}  // namespace

int runCalibrate(Args& args, std::ostream& out) {
  if (args.flag("--help")) {
    out << kUsage;
    return 0;
  }
  const std::string transport = args.value("--transport").value_or("shm");
  if (transport != "shm" && transport != "tcp" && transport != "mpi") {
    throw UsageError("--transport '" + transport + "': expected shm, tcp or mpi");
  }
  const std::vector<std::string> hostLists = args.values("-H");
  const std::string npList = args.value("--np").value_or("2,4");
  const std::string sizes = args.value("--sizes").value_or("4K,64K,1M,8M");
  const long iters =
      parseWhole("--iters", args.value("--iters").value_or("20"), 1, 1000000);
  const int repeats = static_cast<int>(
      parseWhole("--repeats", args.value("--repeats").value_or("3"), 1, 1000));
  const std::string outPath = args.value("--out").value_or("kolo-constants.json");
  std::string csvPath = args.value("--csv").value_or("");
  const auto from = args.value("--from");
  FitOptions options;
  options.cores = static_cast<int>(
      parseWhole("--cores", args.value("--cores").value_or("0"), 0, 1 << 20));
  options.hostsShareCores = args.flag("--one-machine");
  readLinkTiming(args, options.linkBurst, options.spinSeconds);
  const std::vector<std::string> launcherArgs = args.values("--launcher-arg");
  const std::string binDir = args.value("--bin-dir").value_or(selfDir());
  const Constants start = constantsFor(args);
  // Checked before anything runs.
  std::stringstream sizeList(sizes);
  for (std::string s; std::getline(sizeList, s, ',');) {
    try {
      parseBytes("--sizes", s);
    } catch (const UnitError& e) {
      throw UsageError(e.what());
    }
  }
  std::vector<Run> runs;
  for (const auto& list : hostLists) runs.push_back(runOfHosts(list));
  if (runs.empty()) {
    std::stringstream in(npList);
    for (std::string np; std::getline(in, np, ',');) {
      Run r;
      r.ranksPerHost = static_cast<int>(parseWhole("--np", np, 2, 1 << 16));
      runs.push_back(r);
    }
  }
  args.finish();

  std::vector<Measurement> data;
  if (from) {
    data = readMeasurements(*from);
  } else {
    for (const Run& run : runs) {
      std::vector<Algorithm> algorithms = {Algorithm::kRing, Algorithm::kRhd,
                                           Algorithm::kTree};
      if (run.hosts == 1 && transport == "shm") algorithms.push_back(Algorithm::kShm);
      if (run.hosts > 1 && run.ranksPerHost > 1) algorithms.push_back(Algorithm::kHier);
      for (Algorithm a : algorithms) {
        measure(run, transport, a, sizes, iters, repeats, binDir, launcherArgs, data,
                out);
      }
    }
    if (csvPath.empty()) {
      csvPath = outPath;
      if (csvPath.size() > 5 && csvPath.compare(csvPath.size() - 5, 5, ".json") == 0) {
        csvPath.resize(csvPath.size() - 5);
      }
      csvPath += ".csv";
    }
    std::ofstream csv(csvPath);
    csv << kMeasurementHeader << "\n";
    for (const auto& m : data) csv << measurementLine(m) << "\n";
    csv.close();
    if (!csv)
      throw std::runtime_error("cannot write the measurements to '" + csvPath + "'");
    out << "# measurements: " << csvPath << "\n";
  }
  FitResult fit = fitConstants(data, start, options);
  fit.constants.source =
      "kolo-predict calibrate " + (from ? "--from " + *from : "--transport " + transport);
  report(data, fit, out);
  saveConstants(outPath, fit.constants);
  out << "# constants: " << outPath << "\n";
  return 0;
}

}  // namespace kolo::predict::cli
