// kolo-predict train: flags -> TrainRequest -> predictTrain (and the
// curve for --plot) -> text or JSON.
#include "train_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <kolo/error.h>

#include "predict/model_zoo.h"
#include "predict/train_request.h"
#include "python_helper.h"
#include "train_flags.h"

namespace kolo::predict::cli {

namespace {

constexpr const char* kUsage =
    R"(usage: kolo-predict train (--params N | --model NAME | --from-model SCRIPT)
         --step-compute-ms MS --ranks N [--ranks-per-host K] [--link RATE] [--latency T]
         [--mode allreduce|sync-ps|downpour[,...]] [--servers S] [--fusion-mb M]
         [--cycle-ms MS] [--runtime kolo|horovod] [--push-period P] [--pull-period P]
         [--backward-fraction F] [--host-link RATE] [--plot out.png] [--max-ranks N]
         [--python PATH] [--json]
  --params N           parameters (25.6M), as 50 equal tensors of equal compute
  --model NAME         resnet18 resnet50 resnet101 vgg16 inception_v3 inception_v3_aux bert-base
  --from-model SCRIPT  a torch model: model(), a module-level `model`, or the first
                       nn.Module of the script (docs/scale.md, "Your own model")
  --step-compute-ms    forward + backward of one rank, milliseconds
  --ranks N            training ranks (workers in the PS modes; servers are extra)
  --link RATE          each host's link (25gbit); --latency T (default 2us)
  --mode a,b           several modes: each answered, all plotted
  --fusion-mb M        KOLO_FUSION_THRESHOLD in MiB (default 64); --cycle-ms (default 1)
  --runtime horovod    cycles every --cycle-ms (Horovod's loop) instead of kolo's
  --plot out.png       efficiency against ranks 1..--max-ranks (4096) for the modes
)";

struct Flags {
  std::map<std::string, std::string> values;
  bool json = false;
};

Flags parseFlags(int argc, char** argv) {
  static const std::vector<std::string> known = {
      "--params",    "--model",          "--from-model",  "--step-compute-ms",
      "--ranks",     "--ranks-per-host", "--link",        "--latency",
      "--mode",      "--servers",        "--fusion-mb",   "--cycle-ms",
      "--runtime",   "--push-period",    "--pull-period", "--backward-fraction",
      "--host-link", "--plot",           "--max-ranks",   "--python"};
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      f.json = true;
      continue;
    }
    bool ok = false;
    for (const auto& k : known) ok = ok || a == k;
    if (!ok)
      throw Error(ErrorCode::kInvalidArgument, "kolo-predict train: unknown flag " + a);
    if (i + 1 >= argc) {
      throw Error(ErrorCode::kInvalidArgument,
                  "kolo-predict train: " + a + " needs a value");
    }
    f.values[a] = argv[++i];
  }
  return f;
}

std::string get(const Flags& f, const std::string& k, const std::string& fallback = "") {
  auto it = f.values.find(k);
  return it == f.values.end() ? fallback : it->second;
}

std::vector<TrainMode> parseModes(const std::string& text) {
  std::vector<TrainMode> modes;
  std::stringstream s(text);
  std::string one;
  while (std::getline(s, one, ',')) modes.push_back(parseTrainMode(one));
  if (modes.empty()) modes.push_back(parseTrainMode(text));
  return modes;
}

TrainRequest buildRequest(const Flags& f, const std::string& python) {
  TrainRequest r;
  const int sources = f.values.count("--params") + f.values.count("--model") +
                      f.values.count("--from-model");
  if (sources != 1) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "kolo-predict train: give exactly one of --params, --model and --from-model "
        "(got " +
            std::to_string(sources) + ")");
  }
  if (f.values.count("--model")) {
    ZooModel m = zooModel(get(f, "--model"));
    r.modelName = m.name;
    r.layers = std::move(m.layers);
  } else if (f.values.count("--from-model")) {
    r.modelName = get(f, "--from-model");
    r.layers = readModelScript(python, r.modelName);
  } else {
    const double p = parseCount("--params", get(f, "--params"));
    r.modelName = get(f, "--params") + " parameters";
    r.layers = uniformModel(static_cast<uint64_t>(p + 0.5));
  }
  for (const char* required : {"--step-compute-ms", "--ranks"}) {
    if (!f.values.count(required)) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("kolo-predict train: ") + required + " is required");
    }
  }
  r.stepComputeSeconds =
      parseSeconds("--step-compute-ms", get(f, "--step-compute-ms") + "ms");
  r.ranks = parseInt("--ranks", get(f, "--ranks"), 1);
  r.ranksPerHost = parseInt("--ranks-per-host", get(f, "--ranks-per-host", "1"), 1);
  if (f.values.count("--backward-fraction")) {
    r.backwardFraction = std::stod(get(f, "--backward-fraction"));
  }
  const bool needsLink =
      r.ranks > r.ranksPerHost || get(f, "--mode", "allreduce") != "allreduce";
  if (needsLink && !f.values.count("--link")) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "kolo-predict train: --link is required (ranks span hosts, or a PS mode)");
  }
  r.linkBytesPerSecond = parseBitsPerSecond("--link", get(f, "--link", "10gbit")) / 8;
  r.latencySeconds = parseSeconds("--latency", get(f, "--latency", "2us"));
  r.runtime.fusionThresholdBytes = static_cast<size_t>(
      parseCount("--fusion-mb", get(f, "--fusion-mb", "64")) * (1 << 20) + 0.5);
  const std::string runtime = get(f, "--runtime", "kolo");
  if (runtime != "kolo" && runtime != "horovod") {
    throw Error(ErrorCode::kInvalidArgument, "kolo-predict train: --runtime '" + runtime +
                                                 "': expected kolo or horovod");
  }
  r.runtime.periodic = runtime == "horovod";
  r.runtime.cycleSeconds = parseSeconds("--cycle-ms", get(f, "--cycle-ms", "1") + "ms");
  r.ps.servers = parseInt("--servers", get(f, "--servers", "1"), 1);
  r.ps.pushPeriod = parseInt("--push-period", get(f, "--push-period", "1"), 1);
  r.ps.pullPeriod = parseInt("--pull-period", get(f, "--pull-period", "1"), 1);
  return r;
}

std::string mib(size_t bytes) {
  char buf[32];
  if (bytes == 0) return "0 (no fusion)";
  std::snprintf(buf, sizeof buf, "%g MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void printHuman(const TrainRequest& r, const TrainAnswer& a) {
  const StepPrediction& s = a.step;
  std::printf("mode %s", toString(r.mode));
  if (r.mode == TrainMode::kAllreduce) {
    std::printf(" (fusion %s, cycle %g ms, %s runtime)",
                mib(r.runtime.fusionThresholdBytes).c_str(), r.runtime.cycleSeconds * 1e3,
                r.runtime.periodic ? "horovod" : "kolo");
  } else {
    std::printf(" (%d servers)", r.ps.servers);
  }
  std::printf(":\n  step %.4g ms (compute %.4g ms): scaling efficiency %.1f%%\n",
              s.stepSeconds * 1e3, s.computeSeconds * 1e3, 100 * s.efficiency);
  std::printf(
      "  communication %.4g ms a step: %.4g ms overlaps backward, %.4g ms exposed\n",
      s.commSeconds * 1e3, s.overlappedSeconds * 1e3, s.exposedSeconds * 1e3);
  if (r.mode == TrainMode::kAllreduce) {
    std::printf("  %d collectives in %d cycles\n", s.collectives, s.cycles);
  }
  if (a.hasFusion) {
    std::printf("  suggested fusion threshold: %s (step %.4g ms, efficiency %.1f%%)\n",
                mib(a.fusion.thresholdBytes).c_str(), a.fusion.step.stepSeconds * 1e3,
                100 * a.fusion.step.efficiency);
  }
}

void plotCurve(const TrainRequest& r, const std::vector<TrainMode>& modes, int maxRanks,
               const std::string& python, const std::string& out,
               const AllreduceModelFn& allreduce) {
  const auto curve = efficiencyCurve(r, modes, rankSeries(maxRanks), allreduce);
  std::ostringstream j;
  char title[256];
  std::snprintf(title, sizeof title, "%s, %.4g ms compute, %d ranks/host, %.4g Gbit/s",
                r.modelName.c_str(), r.stepComputeSeconds * 1e3, r.ranksPerHost,
                r.linkBytesPerSecond * 8e-9);
  std::string t = title;
  for (char& c : t) c = c == '"' || c == '\\' ? '\'' : c;
  j << "{\"title\": \"" << t << "\", \"series\": [";
  for (size_t m = 0; m < modes.size(); ++m) {
    std::string label = toString(modes[m]);
    if (modes[m] != TrainMode::kAllreduce) label += " S=" + std::to_string(r.ps.servers);
    j << (m ? ", " : "") << "{\"label\": \"" << label << "\", \"ranks\": [";
    bool first = true;
    for (const auto& p : curve) {
      if (p.mode != modes[m]) continue;
      j << (first ? "" : ", ") << p.ranks;
      first = false;
    }
    j << "], \"efficiency\": [";
    first = true;
    for (const auto& p : curve) {
      if (p.mode != modes[m]) continue;
      char v[32];
      std::snprintf(v, sizeof v, "%.6g", p.step.efficiency);
      j << (first ? "" : ", ") << v;
      first = false;
    }
    j << "]}";
  }
  j << "]}";
  char path[] = "/tmp/kolo-predict-curve-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw Error(ErrorCode::kIo, "kolo-predict: cannot create a temporary file");
  { std::ofstream(path) << j.str(); }
  try {
    runHelper(python, helperPath("plot.py"), {path, out});
  } catch (...) {
    std::remove(path);
    throw;
  }
  std::remove(path);
}

}  // namespace

int runTrain(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      }
    }
    const Flags f = parseFlags(argc, argv);
    const std::string python = get(f, "--python", "/usr/bin/python3");
    TrainRequest r = buildRequest(f, python);
    const auto modes = parseModes(get(f, "--mode", "allreduce"));
    // Until the allreduce model of kolo's constants is wired in: a ring.
    const AllreduceModelFn allreduce = ringAllreduceModel(
        r.linkBytesPerSecond, r.latencySeconds, 0.0,
        parseBitsPerSecond("--host-link", get(f, "--host-link", "40gbit")) / 8);
    std::vector<std::string> json;
    if (!f.json) {
      std::printf(
          "model %s: %zu parameters in %zu tensors; %d ranks, %d per host, link %g "
          "Gbit/s, latency %g us\n",
          r.modelName.c_str(), totalBytes(r.layers) / 4, r.layers.size(), r.ranks,
          std::min(r.ranksPerHost, r.ranks), r.linkBytesPerSecond * 8e-9,
          r.latencySeconds * 1e6);
    }
    for (TrainMode m : modes) {
      r.mode = m;
      const TrainAnswer a = predictTrain(r, allreduce);
      if (f.json) {
        json.push_back(trainAnswerJson(r, a));
      } else {
        printHuman(r, a);
      }
    }
    if (f.json) {
      if (json.size() == 1) {
        std::printf("%s\n", json[0].c_str());
      } else {
        std::printf("{\"results\": [");
        for (size_t i = 0; i < json.size(); ++i)
          std::printf("%s%s", i ? ", " : "", json[i].c_str());
        std::printf("]}\n");
      }
    }
    if (f.values.count("--plot")) {
      const int maxRanks = parseInt("--max-ranks", get(f, "--max-ranks", "4096"), 1);
      plotCurve(r, modes, maxRanks, python, get(f, "--plot"), allreduce);
      if (!f.json) std::printf("plot: %s\n", get(f, "--plot").c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

}  // namespace kolo::predict::cli
