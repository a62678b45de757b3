// kolo-predict train: the training step, its scaling efficiency, the
// communication that overlaps backward and the part that does not, a
// suggested fusion threshold, and (--plot) the efficiency curve to 4096
// ranks. docs/scale.md, "kolo-predict train".
//
// Flags -> TrainRequest (predict/train_request.h) -> predictTrain, with a
// fused buffer's allreduce time from the allreduce model under kolo's
// selection (predict/train_cost.h) -> text or one JSON object.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "predict/json.h"
#include "predict/model_zoo.h"
#include "predict/train_cost.h"
#include "predict/train_papers.h"
#include "predict/train_request.h"
#include "predict/units.h"
#include "predict_cli.h"
#include "python_helper.h"

namespace kolo::predict::cli {
namespace {

constexpr const char* kUsage =
    R"(usage: kolo-predict train (--params N | --model NAME | --from-model SCRIPT)
           --step-compute-ms MS --ranks N [options]

The training step of data-parallel training on N ranks: step time, scaling
efficiency (one rank's step / N ranks' step), the communication that overlaps
backward and the part that does not, and the fusion threshold that gives the
shortest step.

  --params N            parameters (25.6M): 50 equal tensors of equal compute
  --model NAME          resnet18 resnet50 resnet101 vgg16 inception_v3
                        inception_v3_aux bert-base
  --from-model SCRIPT   a torch model script: its function model(), else its
                        module-level `model`, else its first torch.nn.Module
                        (run with --python, default /usr/bin/python3)
  --step-compute-ms MS  forward + backward of one rank, milliseconds
  --backward-fraction F the part of the compute that is backward (0.667)
  --ranks N             training ranks (workers; parameter servers are extra)
  --ranks-per-host K    ranks sharing a host and its link (1)
  --link RATE           each host's link, e.g. 25gbit
  --latency TIME        one-way latency a link adds, e.g. 2us (0)
  --mode M[,M...]       allreduce (default), sync-ps, downpour
  --servers S           parameter servers, each on a host of its own (1)
  --push-period P       downpour: steps between pushes (1); --pull-period P (1)
  --fusion-mb M         KOLO_FUSION_THRESHOLD in MiB (64)
  --cycle-ms MS         KOLO_CYCLE_TIME (1)
  --runtime R           kolo (default) or horovod (a cycle every --cycle-ms)
  --transport T         shm (default: shm in a host, tcp between), tcp or mpi
  --cores C             cores per host (0: one per rank at least)
  --constants FILE      constants (default: KOLO_PREDICT_CONSTANTS, else built in)
  --allreduce-model M   kolo (default: the constants and kolo's selection) or
                        nccl-ring (NCCL 2's ring, NCCL's latency table: GPU clusters)
  --plot OUT.png        efficiency against ranks 1..--max-ranks (4096), each mode
  --json                one JSON object ({"results": [...]} for several modes)
)";

std::vector<TrainMode> parseModes(const std::string& text) {
  std::vector<TrainMode> modes;
  std::stringstream s(text);
  std::string one;
  while (std::getline(s, one, ',')) modes.push_back(parseTrainMode(one));
  if (modes.empty()) modes.push_back(parseTrainMode(text));
  return modes;
}

void readModel(Args& args, const std::string& python, TrainRequest& r) {
  const auto params = args.value("--params");
  const auto model = args.value("--model");
  const auto script = args.value("--from-model");
  const int given = !!params + !!model + !!script;
  if (given != 1) {
    throw UsageError("give exactly one of --params, --model and --from-model (got " +
                     std::to_string(given) + ")");
  }
  if (model) {
    ZooModel m = zooModel(*model);
    r.modelName = m.name;
    r.layers = std::move(m.layers);
  } else if (script) {
    r.modelName = *script;
    r.layers = readModelScript(python, *script);
  } else {
    const double p = parseCount("--params", *params);
    if (p < 1) throw UsageError("--params '" + *params + "': expected at least 1");
    r.modelName = *params + " parameters";
    r.layers = uniformModel(static_cast<uint64_t>(p + 0.5));
  }
}

// The job's links and paths, as `kolo-predict allreduce` reads them.
JobShape readShape(Args& args, const TrainRequest& r) {
  JobShape shape;
  shape.ranks = r.ranks;
  shape.ranksPerHost = r.ranksPerHost;
  if (auto v = args.value("--link")) shape.linkBps = parseRate("--link", *v);
  if (auto v = args.value("--latency"))
    shape.linkLatency = parseDuration("--latency", *v);
  if (auto v = args.value("--cores")) {
    shape.coresPerHost = static_cast<int>(parseWhole("--cores", *v, 0, 1 << 20));
  }
  const std::string transport = args.value("--transport").value_or("shm");
  if (transport == "shm" || transport == "auto") {
    shape.shmArena = true;  // used where the ranks fit on one host
  } else if (transport == "tcp") {
    shape.intra = shape.inter = Path::kTcp;
  } else if (transport == "mpi") {
    shape.intra = shape.inter = Path::kMpi;
  } else {
    throw UsageError("--transport '" + transport + "': expected shm, tcp or mpi");
  }
  return shape;
}

std::string mib(size_t bytes) {
  return bytes == 0 ? std::string("0 (no fusion)")
                    : formatBytes(static_cast<double>(bytes));
}

void printHuman(std::ostream& out, const TrainRequest& r, const TrainAnswer& a) {
  const StepPrediction& s = a.step;
  char line[512];
  out << "mode " << toString(r.mode);
  if (r.mode == TrainMode::kAllreduce) {
    out << " (fusion " << mib(r.runtime.fusionThresholdBytes) << ", cycle "
        << formatSeconds(r.runtime.cycleSeconds) << ", "
        << (r.runtime.periodic ? "horovod" : "kolo") << " runtime)";
  } else {
    out << " (" << r.ps.servers << " servers)";
  }
  std::snprintf(line, sizeof line,
                ":\n  step %.4g ms (compute %.4g ms): scaling efficiency %.1f%%\n"
                "  communication %.4g ms a step: %.4g ms overlaps backward, %.4g ms "
                "exposed\n",
                s.stepSeconds * 1e3, s.computeSeconds * 1e3, 100 * s.efficiency,
                s.commSeconds * 1e3, s.overlappedSeconds * 1e3, s.exposedSeconds * 1e3);
  out << line;
  if (r.mode == TrainMode::kAllreduce) {
    out << "  " << s.collectives << " collectives in " << s.cycles << " cycles\n";
  }
  if (a.hasFusion) {
    std::snprintf(line, sizeof line, " (step %.4g ms, efficiency %.1f%%)\n",
                  a.fusion.step.stepSeconds * 1e3, 100 * a.fusion.step.efficiency);
    out << "  suggested fusion threshold: " << mib(a.fusion.thresholdBytes) << line;
  }
}

void plotCurve(const TrainRequest& r, const std::vector<TrainMode>& modes, int maxRanks,
               const std::string& python, const std::string& png,
               const AllreduceModelFn& allreduce) {
  const auto curve = efficiencyCurve(r, modes, rankSeries(maxRanks), allreduce);
  char title[256];
  std::snprintf(title, sizeof title, "%s: %.4g ms compute, %d ranks/host, %s links",
                r.modelName.c_str(), r.stepComputeSeconds * 1e3, r.ranksPerHost,
                formatRate(r.linkBytesPerSecond * 8).c_str());
  std::ostringstream j;
  j << "{\"title\": " << jsonQuote(title) << ", \"series\": [";
  for (size_t m = 0; m < modes.size(); ++m) {
    std::string label = toString(modes[m]);
    if (modes[m] != TrainMode::kAllreduce)
      label += ", " + std::to_string(r.ps.servers) + " servers";
    std::string ranks, effs;
    for (const auto& p : curve) {
      if (p.mode != modes[m]) continue;
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(p.ranks);
      effs += (effs.empty() ? "" : ", ") + jsonNumber(p.step.efficiency);
    }
    j << (m ? ", " : "") << "{\"label\": " << jsonQuote(label) << ", \"ranks\": ["
      << ranks << "], \"efficiency\": [" << effs << "]}";
  }
  j << "]}";
  char path[] = "/tmp/kolo-predict-curve-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error("cannot create a temporary file for --plot");
  std::ofstream(path) << j.str();
  try {
    runHelper(python, helperPath("plot.py"), {path, png});
  } catch (...) {
    std::remove(path);
    throw;
  }
  std::remove(path);
}

// Everything the flags say, read and checked (UsageError on a bad one).
struct TrainOptions {
  TrainRequest request;
  std::vector<TrainMode> modes;
  JobShape shape;
  std::optional<std::string> plot;
  int maxRanks = 4096;
  std::string python;
  std::string allreduceModel;
  bool json = false;
};

void readRuntimeAndServers(Args& args, TrainRequest& r) {
  if (auto v = args.value("--fusion-mb")) {
    r.runtime.fusionThresholdBytes =
        static_cast<size_t>(parseCount("--fusion-mb", *v) * (1 << 20) + 0.5);
  }
  if (auto v = args.value("--cycle-ms")) {
    r.runtime.cycleSeconds = parseDuration("--cycle-ms", *v + "ms");
  }
  const std::string runtime = args.value("--runtime").value_or("kolo");
  if (runtime != "kolo" && runtime != "horovod") {
    throw UsageError("--runtime '" + runtime + "': expected kolo or horovod");
  }
  r.runtime.periodic = runtime == "horovod";
  if (auto v = args.value("--servers")) {
    r.ps.servers = static_cast<int>(parseWhole("--servers", *v, 1, 1 << 20));
  }
  if (auto v = args.value("--push-period")) {
    r.ps.pushPeriod = static_cast<int>(parseWhole("--push-period", *v, 1, 1 << 20));
  }
  if (auto v = args.value("--pull-period")) {
    r.ps.pullPeriod = static_cast<int>(parseWhole("--pull-period", *v, 1, 1 << 20));
  }
}

TrainOptions readOptions(Args& args) {
  TrainOptions o;
  TrainRequest& r = o.request;
  o.python = args.value("--python").value_or("/usr/bin/python3");
  try {
    readModel(args, o.python, r);
    r.stepComputeSeconds =
        parseDuration("--step-compute-ms", args.required("--step-compute-ms") + "ms");
    if (auto v = args.value("--backward-fraction")) r.backwardFraction = std::stod(*v);
    r.ranks =
        static_cast<int>(parseWhole("--ranks", args.required("--ranks"), 1, 1 << 24));
    if (auto v = args.value("--ranks-per-host")) {
      r.ranksPerHost = static_cast<int>(parseWhole("--ranks-per-host", *v, 1, 1 << 20));
    }
    o.modes = parseModes(args.value("--mode").value_or("allreduce"));
    o.shape = readShape(args, r);
    r.linkBytesPerSecond = o.shape.linkBps / 8;
    r.latencySeconds = o.shape.linkLatency;
    readRuntimeAndServers(args, r);
    checkTrainSpec(r.spec(r.ranks));  // before anything is printed
    o.plot = args.value("--plot");
    if (auto v = args.value("--max-ranks")) {
      o.maxRanks = static_cast<int>(parseWhole("--max-ranks", *v, 1, 1 << 20));
    }
  } catch (const UnitError& e) {
    throw UsageError(e.what());
  } catch (const std::invalid_argument& e) {  // a mode, a model name, std::stod
    throw UsageError(e.what());
  }
  for (TrainMode m : o.modes) {
    if (m != TrainMode::kAllreduce && !(o.shape.linkBps > 0)) {
      throw UsageError(std::string("--mode ") + toString(m) +
                       " needs --link (the servers' links carry every push)");
    }
  }
  o.json = args.flag("--json");
  o.allreduceModel = args.value("--allreduce-model").value_or("kolo");
  if (o.allreduceModel != "kolo" && o.allreduceModel != "nccl-ring") {
    throw UsageError("--allreduce-model '" + o.allreduceModel +
                     "': expected kolo or nccl-ring");
  }
  return o;
}

void printJson(std::ostream& out, const std::vector<std::string>& answers) {
  if (answers.size() == 1) {
    out << answers[0] << "\n";
    return;
  }
  out << "{\"results\": [";
  for (size_t i = 0; i < answers.size(); ++i) out << (i ? ", " : "") << answers[i];
  out << "]}\n";
}

}  // namespace

int runTrain(Args& args, std::ostream& out) {
  if (args.flag("--help")) {
    out << kUsage;
    return 0;
  }
  TrainOptions o = readOptions(args);
  const Constants constants = constantsFor(args);
  args.finish();
  TrainRequest& r = o.request;
  fillPsCosts(o.shape, constants, r);
  const AllreduceModelFn allreduce = o.allreduceModel == "kolo"
                                         ? selectedAllreduceModel(o.shape, constants)
                                         : ncclRingModel(o.shape.linkBps, NcclRing{});
  if (!o.json) {
    out << "model " << r.modelName << ": " << totalBytes(r.layers) / 4
        << " parameters in " << r.layers.size() << " tensors; " << r.ranks << " ranks, "
        << std::min(r.ranksPerHost, r.ranks) << " per host, link "
        << (o.shape.linkBps > 0 ? formatRate(o.shape.linkBps)
                                : std::string("not limited"))
        << ", latency " << formatSeconds(o.shape.linkLatency) << "\n";
  }
  std::vector<std::string> answers;
  try {
    for (TrainMode m : o.modes) {
      r.mode = m;
      const TrainAnswer a = predictTrain(r, allreduce);
      if (o.json) {
        answers.push_back(trainAnswerJson(r, a));
      } else {
        printHuman(out, r, a);
      }
    }
  } catch (const std::invalid_argument& e) {  // the model's checks of the inputs
    throw UsageError(e.what());
  }
  if (o.json) printJson(out, answers);
  if (o.plot) {
    plotCurve(r, o.modes, o.maxRanks, o.python, *o.plot, allreduce);
    if (!o.json) out << "plot: " << *o.plot << "\n";
  }
  return 0;
}

}  // namespace kolo::predict::cli
