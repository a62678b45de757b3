// kolo-predict allreduce: the predicted time of one allreduce per algorithm
// for a job shape, and the algorithm kolo's selection would run.
#include <iomanip>
#include <sstream>

#include "predict/allreduce_model.h"
#include "predict/json.h"
#include "predict/units.h"
#include "predict_cli.h"

namespace kolo::predict::cli {
namespace {

constexpr const char* kUsage =
    R"(usage: kolo-predict allreduce --ranks N --bytes SIZE[,SIZE...] [options]

Predicted time of one allreduce (float32 sum) per algorithm, and the one
kolo's selection would run (marked *).

  --ranks N             ranks in the job
  --ranks-per-host K    ranks on each host (1); hosts = ceil(N / K)
  --link RATE           each host's link, e.g. 25gbit, 100mbit (0: not limited)
  --latency TIME        one-way latency a link adds, e.g. 2us (0)
  --bytes SIZES         e.g. 64M or 4K,64K,1M (K = 1024)
  --algorithm A         only this one: ring, rhd, tree, hier or shm
  --transport T         KOLO_TRANSPORT of the job: shm (default: shm inside a
                        host, tcp between), tcp or mpi
  --cores C             cores per host (0: one per rank at least)
  --one-machine         all hosts share one machine's cores (network namespaces)
  --link-burst SIZE     token bucket of each link (tc tbf burst, e.g. 256K; 0)
  --spin TIME           KOLO_SPIN_US of the job (100us): with more ranks than
                        cores, what a woken rank waits for a polling one's core
  --no-agreement        leave out Communicator::allreduce's descriptor exchange
                        (the runtime's negotiated calls skip it; kolo-bench pays it)
  --constants FILE      constants (default: KOLO_PREDICT_CONSTANTS, else built in)
  --json                one JSON object instead of the table
)";

std::vector<size_t> parseSizes(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(parseBytes("--bytes", item));
  if (out.empty()) throw UnitError("--bytes '" + text + "': no size given");
  return out;
}

}  // namespace

int runAllreduce(Args& args, std::ostream& out) {
  if (args.flag("--help")) {
    out << kUsage;
    return 0;
  }
  JobShape shape;
  std::vector<size_t> sizes;
  std::optional<Algorithm> only;
  std::string transport = "shm";
  try {
    shape.ranks =
        static_cast<int>(parseWhole("--ranks", args.required("--ranks"), 1, 1 << 24));
    if (auto k = args.value("--ranks-per-host")) {
      shape.ranksPerHost =
          static_cast<int>(parseWhole("--ranks-per-host", *k, 1, 1 << 20));
    }
    if (auto v = args.value("--link")) shape.linkBps = parseRate("--link", *v);
    if (auto v = args.value("--latency"))
      shape.linkLatency = parseDuration("--latency", *v);
    sizes = parseSizes(args.required("--bytes"));
    if (auto v = args.value("--cores")) {
      shape.coresPerHost = static_cast<int>(parseWhole("--cores", *v, 0, 1 << 20));
    }
  } catch (const UnitError& e) {
    throw UsageError(e.what());
  }
  readLinkTiming(args, shape.linkBurst, shape.spinSeconds);
  shape.hostsShareCores = args.flag("--one-machine");
  if (auto v = args.value("--transport")) transport = *v;
  if (transport == "shm" || transport == "auto") {
    shape.intra = Path::kShm;
    shape.inter = Path::kTcp;
  } else if (transport == "tcp") {
    shape.intra = shape.inter = Path::kTcp;
  } else if (transport == "mpi") {
    shape.intra = shape.inter = Path::kMpi;
  } else {
    throw UsageError("--transport '" + transport + "': expected shm, tcp or mpi");
  }
  shape.shmArena = (transport == "shm" || transport == "auto") && shape.hosts() == 1;
  if (shape.ranksPerHost > shape.ranks) {
    throw UsageError("--ranks-per-host " + std::to_string(shape.ranksPerHost) +
                     " is more than --ranks " + std::to_string(shape.ranks));
  }
  if (auto a = args.value("--algorithm")) {
    only = algorithmFromName(*a);
    if (!only) {
      throw UsageError("--algorithm '" + *a + "': expected ring, rhd, tree, hier or shm");
    }
    if (!usable(*only, shape)) {
      throw UsageError(
          "--algorithm " + *a + " cannot run with " + std::to_string(shape.ranks) +
          " ranks, " + std::to_string(shape.ranksPerHost) + " per host" +
          (*only == Algorithm::kShm ? " (shm: one host, --transport shm)"
                                    : " (hier: several hosts, several ranks each)"));
    }
  }
  CostOptions options;
  options.agreement = !args.flag("--no-agreement");
  const bool json = args.flag("--json");
  const Constants constants = constantsFor(args);
  args.finish();

  std::vector<Algorithm> shown;
  for (int i = 0; i < kAlgorithms; ++i) {
    const auto a = static_cast<Algorithm>(i);
    if ((!only || *only == a) && usable(a, shape)) shown.push_back(a);
  }
  if (json) {
    out << "{\"tool\":\"kolo-predict\",\"command\":\"allreduce\",\"ranks\":"
        << shape.ranks << ",\"ranks_per_host\":" << shape.ranksPerHost
        << ",\"hosts\":" << shape.hosts() << ",\"link_bps\":" << jsonNumber(shape.linkBps)
        << ",\"latency_s\":" << jsonNumber(shape.linkLatency)
        << ",\"transport\":" << jsonQuote(transport)
        << ",\"agreement\":" << (options.agreement ? "true" : "false")
        << ",\"constants\":" << jsonQuote(constants.source) << ",\"results\":[";
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Algorithm selected = selectAllreduce(sizes[i], shape, constants);
      out << (i > 0 ? "," : "") << "{\"bytes\":" << sizes[i]
          << ",\"selected\":" << jsonQuote(toString(selected)) << ",\"seconds\":{";
      for (size_t j = 0; j < shown.size(); ++j) {
        out << (j > 0 ? "," : "") << jsonQuote(toString(shown[j])) << ":"
            << jsonNumber(
                   allreduceSeconds(shown[j], sizes[i], shape, constants, options));
      }
      out << "}}";
    }
    out << "]}\n";
    return 0;
  }
  out << "# " << shape.ranks << " ranks, " << shape.ranksPerHost << " per host ("
      << shape.hosts() << " host" << (shape.hosts() > 1 ? "s" : "") << "), link "
      << formatRate(shape.linkBps) << ", latency " << formatSeconds(shape.linkLatency)
      << ", transport " << transport << "; constants: " << constants.source << "\n";
  out << "# " << std::setw(10) << "bytes" << std::setw(8) << "algo" << std::setw(14)
      << "time" << std::setw(14) << "busbw(GB/s)"
      << "\n";
  for (size_t size : sizes) {
    const Algorithm selected = selectAllreduce(size, shape, constants);
    for (Algorithm a : shown) {
      const double s = allreduceSeconds(a, size, shape, constants, options);
      const double busbw =
          s > 0 ? size / s / 1e9 * 2.0 * (shape.ranks - 1) / shape.ranks : 0;
      std::ostringstream bw;
      bw << std::fixed << std::setprecision(3) << busbw;
      out << "  " << std::setw(10) << size << std::setw(8) << toString(a) << std::setw(14)
          << formatSeconds(s) << std::setw(14) << bw.str() << (a == selected ? "  *" : "")
          << "\n";
    }
  }
  out << "# * kolo's selection\n";
  return 0;
}

}  // namespace kolo::predict::cli
