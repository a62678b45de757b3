// kolo._predict: the scale model's training side for Python (kolo.predict,
// python/kolo/predict/__init__.py; docs/scale.md). It binds kolo_predict
// only (no runtime, no C API); kolo.predict parses units and names the
// arguments, this module takes plain numbers.
//
// Errors: the model's std::invalid_argument arrives as ValueError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "predict/allreduce_model.h"
#include "predict/constants.h"
#include "predict/model_zoo.h"
#include "predict/train_cost.h"
#include "predict/train_papers.h"
#include "predict/train_request.h"

namespace py = pybind11;
using namespace kolo::predict;

namespace {

using Layer = std::tuple<std::string, size_t, double>;  // name, elements, share

struct RequestArgs {
  std::vector<Layer> layers;
  std::string modelName;
  double stepComputeSeconds;
  double backwardFraction;
  int ranks;
  int ranksPerHost;
  double linkBitsPerSecond;
  double latencySeconds;
  std::string transport;  // shm, tcp or mpi
  std::string constants;  // a constants file; empty: the built-in ones
  std::string allreduce;  // "kolo" (constants, selection) or "nccl-ring"
  size_t fusionThresholdBytes;
  double cycleSeconds;
  bool periodic;
  int servers;
  int pushPeriod;
  int pullPeriod;
};

TrainRequest requestOf(const RequestArgs& a) {
  TrainRequest r;
  r.modelName = a.modelName;
  for (const auto& [name, elements, share] : a.layers) {
    r.layers.push_back({name, elements * 4, share});
  }
  r.stepComputeSeconds = a.stepComputeSeconds;
  r.backwardFraction = a.backwardFraction;
  r.ranks = a.ranks;
  r.ranksPerHost = a.ranksPerHost;
  r.linkBytesPerSecond = a.linkBitsPerSecond / 8;
  r.latencySeconds = a.latencySeconds;
  r.runtime.fusionThresholdBytes = a.fusionThresholdBytes;
  r.runtime.cycleSeconds = a.cycleSeconds;
  r.runtime.periodic = a.periodic;
  r.ps.servers = a.servers;
  r.ps.pushPeriod = a.pushPeriod;
  r.ps.pullPeriod = a.pullPeriod;
  return r;
}

Constants constantsOf(const std::string& path) {
  return path.empty() ? builtInConstants() : loadConstants(path);
}

// As `kolo-predict allreduce` and `train` read --transport.
JobShape shapeOf(int ranks, int ranksPerHost, double linkBps, double latency,
                 const std::string& transport) {
  JobShape shape;
  shape.ranks = ranks;
  shape.ranksPerHost = std::min(ranksPerHost, ranks);
  shape.linkBps = linkBps;
  shape.linkLatency = latency;
  if (transport == "shm" || transport == "auto") {
    shape.shmArena = shape.hosts() == 1;
  } else if (transport == "tcp") {
    shape.intra = shape.inter = Path::kTcp;
  } else if (transport == "mpi") {
    shape.intra = shape.inter = Path::kMpi;
  } else {
    throw std::invalid_argument("transport '" + transport +
                                "': expected shm, tcp or mpi");
  }
  return shape;
}

// The allreduce time under kolo's selection, and the PS costs, from the
// constants: what kolo-predict train uses.
AllreduceModelFn prepare(const RequestArgs& a, TrainRequest& r) {
  JobShape shape = shapeOf(a.ranks, a.ranksPerHost, a.linkBitsPerSecond, a.latencySeconds,
                           a.transport);
  shape.shmArena = a.transport == "shm" || a.transport == "auto";
  const Constants c = constantsOf(a.constants);
  fillPsCosts(shape, c, r);
  if (a.allreduce == "nccl-ring") return ncclRingModel(a.linkBitsPerSecond, NcclRing{});
  if (a.allreduce != "kolo") {
    throw std::invalid_argument("allreduce model '" + a.allreduce +
                                "': expected kolo or nccl-ring");
  }
  return selectedAllreduceModel(shape, c);
}

py::dict stepDict(const StepPrediction& s) {
  py::dict d;
  d["step_s"] = s.stepSeconds;
  d["compute_s"] = s.computeSeconds;
  d["efficiency"] = s.efficiency;
  d["comm_s"] = s.commSeconds;
  d["overlapped_comm_s"] = s.overlappedSeconds;
  d["exposed_comm_s"] = s.exposedSeconds;
  d["collectives"] = s.collectives;
  d["cycles"] = s.cycles;
  return d;
}

RequestArgs argsOf(const py::dict& k) {
  RequestArgs a;
  a.layers = k["layers"].cast<std::vector<Layer>>();
  a.modelName = k["model_name"].cast<std::string>();
  a.stepComputeSeconds = k["step_compute_s"].cast<double>();
  a.backwardFraction = k["backward_fraction"].cast<double>();
  a.ranks = k["ranks"].cast<int>();
  a.ranksPerHost = k["ranks_per_host"].cast<int>();
  a.linkBitsPerSecond = k["link_bps"].cast<double>();
  a.latencySeconds = k["latency_s"].cast<double>();
  a.transport = k["transport"].cast<std::string>();
  a.constants = k["constants"].cast<std::string>();
  a.allreduce = k["allreduce"].cast<std::string>();
  a.fusionThresholdBytes = k["fusion_threshold_bytes"].cast<size_t>();
  a.cycleSeconds = k["cycle_s"].cast<double>();
  a.periodic = k["periodic"].cast<bool>();
  a.servers = k["servers"].cast<int>();
  a.pushPeriod = k["push_period"].cast<int>();
  a.pullPeriod = k["pull_period"].cast<int>();
  return a;
}

}  // namespace

PYBIND11_MODULE(_predict, m) {
  m.doc() = "kolo's scale model, training side (use kolo.predict)";
  m.def("zoo_names", &zooNames, "The models the zoo knows.");
  m.def(
      "zoo_model",
      [](const std::string& name) {
        std::vector<Layer> out;
        for (const auto& l : zooModel(name).layers) {
          out.emplace_back(l.name, l.bytes / 4, l.computeShare);
        }
        return out;
      },
      py::arg("name"), "[(name, elements, share)] in backward order.");
  m.def(
      "train",
      [](const py::dict& k, const std::string& mode) {
        const RequestArgs a = argsOf(k);
        TrainRequest r = requestOf(a);
        r.mode = parseTrainMode(mode);
        const AllreduceModelFn allreduce = prepare(a, r);
        const TrainAnswer answer = predictTrain(r, allreduce);
        py::dict d = stepDict(answer.step);
        d["mode"] = toString(r.mode);
        if (answer.hasFusion) {
          d["suggested_fusion_threshold_bytes"] = answer.fusion.thresholdBytes;
          d["suggested_step_s"] = answer.fusion.step.stepSeconds;
          d["suggested_efficiency"] = answer.fusion.step.efficiency;
        }
        return d;
      },
      py::arg("request"), py::arg("mode"));
  m.def(
      "curve",
      [](const py::dict& k, const std::vector<std::string>& modes,
         const std::vector<int>& ranks) {
        const RequestArgs a = argsOf(k);
        std::vector<TrainMode> ms;
        for (const auto& s : modes) ms.push_back(parseTrainMode(s));
        py::list out;
        TrainRequest r = requestOf(a);
        const AllreduceModelFn allreduce = prepare(a, r);
        for (const auto& p : efficiencyCurve(r, ms, ranks, allreduce)) {
          py::dict d = stepDict(p.step);
          d["mode"] = toString(p.mode);
          d["ranks"] = p.ranks;
          out.append(d);
        }
        return out;
      },
      py::arg("request"), py::arg("modes"), py::arg("ranks"));
  m.def("rank_series", &rankSeries, py::arg("max_ranks"));
  m.def("papers", [] {
    py::list out;
    for (const PaperCase& c : paperCases()) {
      const PaperResult r = predictPaperCase(c);
      py::dict d = stepDict(r.step);
      d["paper"] = c.paper;
      d["model"] = c.model;
      d["gpus"] = c.gpus;
      d["gpus_per_host"] = c.gpusPerHost;
      d["link_bps"] = c.linkBitsPerSecond;
      d["images_per_second"] = c.imagesPerSecond;
      d["batch"] = c.batch;
      d["published_efficiency"] = c.publishedEfficiency;
      out.append(d);
    }
    return out;
  });
  m.def(
      "allreduce",
      [](int ranks, int ranksPerHost, double linkBps, double latency, size_t bytes,
         const std::string& transport, const std::string& constants, bool agreement) {
        if (ranks < 1 || ranksPerHost < 1) {
          throw std::invalid_argument(
              "ranks " + std::to_string(ranks) + " and ranks_per_host " +
              std::to_string(ranksPerHost) + ": expected both >= 1");
        }
        const JobShape shape = shapeOf(ranks, ranksPerHost, linkBps, latency, transport);
        const Constants c = constantsOf(constants);
        CostOptions options;
        options.agreement = agreement;
        py::dict seconds;
        for (int i = 0; i < kAlgorithms; ++i) {
          const auto alg = static_cast<Algorithm>(i);
          if (!usable(alg, shape)) continue;
          seconds[py::str(std::string(toString(alg)))] =
              allreduceSeconds(alg, bytes, shape, c, options);
        }
        py::dict d;
        d["seconds"] = seconds;
        d["selected"] = std::string(toString(selectAllreduce(bytes, shape, c)));
        return d;
      },
      py::arg("ranks"), py::arg("ranks_per_host"), py::arg("link_bps"),
      py::arg("latency_s"), py::arg("bytes"), py::arg("transport"), py::arg("constants"),
      py::arg("agreement"));
}
