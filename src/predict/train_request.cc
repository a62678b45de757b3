#include "predict/train_request.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <stdexcept>

namespace kolo::predict {

TrainMode parseTrainMode(const std::string& text) {
  if (text == "allreduce") return TrainMode::kAllreduce;
  if (text == "sync-ps") return TrainMode::kSyncPs;
  if (text == "downpour") return TrainMode::kDownpour;
  throw std::invalid_argument("unknown mode '" + text +
                              "'; expected allreduce, sync-ps or downpour");
}

const char* toString(TrainMode mode) {
  switch (mode) {
    case TrainMode::kAllreduce: return "allreduce";
    case TrainMode::kSyncPs: return "sync-ps";
    case TrainMode::kDownpour: return "downpour";
  }
  return "?";
}

AllreduceModelFn ringAllreduceModel(double linkBytesPerSecond, double latencySeconds,
                                    double reduceSecondsPerByte,
                                    double localBytesPerSecond) {
  return [=](int ranks, int ranksPerHost, size_t bytes) {
    if (ranks <= 1) return 0.0;
    const double p = ranks;
    const double rate = ranks <= ranksPerHost ? localBytesPerSecond : linkBytesPerSecond;
    const double n = static_cast<double>(bytes);
    return 2 * (p - 1) * latencySeconds + 2 * (p - 1) / p * n / rate +
           (p - 1) / p * n * reduceSecondsPerByte;
  };
}

TrainSpec TrainRequest::spec(int n) const {
  TrainSpec s;
  s.layers = layers;
  s.stepComputeSeconds = stepComputeSeconds;
  s.backwardFraction = backwardFraction;
  s.ranks = n;
  s.ranksPerHost = std::max(1, std::min(ranksPerHost, n));
  return s;
}

namespace {

PsKnobs psKnobs(const TrainRequest& r) {
  PsKnobs k = r.ps;
  k.linkBytesPerSecond = r.linkBytesPerSecond;
  k.latencySeconds =
      r.latencySeconds + r.ps.latencySeconds;  // the link's + the transport's
  return k;
}

StepPrediction stepAt(const TrainRequest& r, TrainMode mode, int n,
                      const AllreduceModelFn& allreduce) {
  const TrainSpec spec = r.spec(n);
  switch (mode) {
    case TrainMode::kAllreduce: {
      const int k = spec.ranksPerHost;
      return predictAllreduceStep(spec, r.runtime,
                                  [&](size_t bytes) { return allreduce(n, k, bytes); });
    }
    case TrainMode::kSyncPs: return predictSyncPsStep(spec, psKnobs(r));
    case TrainMode::kDownpour: return predictDownpourStep(spec, psKnobs(r));
  }
  return {};
}

}  // namespace

TrainAnswer predictTrain(const TrainRequest& r, const AllreduceModelFn& allreduce) {
  TrainAnswer a;
  a.step = stepAt(r, r.mode, r.ranks, allreduce);
  if (r.mode == TrainMode::kAllreduce) {
    const TrainSpec spec = r.spec(r.ranks);
    const int k = spec.ranksPerHost;
    a.hasFusion = true;
    a.fusion = suggestFusionThreshold(
        spec, r.runtime, [&](size_t bytes) { return allreduce(r.ranks, k, bytes); });
  }
  return a;
}

std::vector<CurvePoint> efficiencyCurve(const TrainRequest& r,
                                        const std::vector<TrainMode>& modes,
                                        const std::vector<int>& ranks,
                                        const AllreduceModelFn& allreduce) {
  std::vector<CurvePoint> out;
  for (TrainMode m : modes) {
    for (int n : ranks) out.push_back({m, n, stepAt(r, m, n, allreduce)});
  }
  return out;
}

std::vector<int> rankSeries(int max) {
  std::vector<int> out;
  for (long n = 1; n <= max; n *= 2) out.push_back(static_cast<int>(n));
  if (out.empty() || out.back() != max) out.push_back(max);
  return out;
}

std::vector<LayerGrad> uniformModel(uint64_t parameters, int tensors) {
  if (parameters == 0) {
    throw std::invalid_argument("--params is 0; expected > 0");
  }
  const uint64_t t = std::min<uint64_t>(std::max(1, tensors), parameters);
  std::vector<LayerGrad> layers;
  for (uint64_t i = 0; i < t; ++i) {
    const uint64_t n = parameters / t + (i < parameters % t ? 1 : 0);
    layers.push_back({"tensor" + std::to_string(i), static_cast<size_t>(n) * 4, 1.0});
  }
  return layers;
}

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string trainAnswerJson(const TrainRequest& r, const TrainAnswer& a) {
  const StepPrediction& s = a.step;
  std::ostringstream o;
  o << "{\"model\": " << quoted(r.modelName)
    << ", \"parameters\": " << totalBytes(r.layers) / 4
    << ", \"tensors\": " << r.layers.size() << ", \"mode\": " << quoted(toString(r.mode))
    << ", \"ranks\": " << r.ranks
    << ", \"ranks_per_host\": " << std::min(r.ranksPerHost, r.ranks)
    << ", \"link_bps\": " << num(r.linkBytesPerSecond * 8)
    << ", \"latency_s\": " << num(r.latencySeconds);
  if (r.mode == TrainMode::kAllreduce) {
    o << ", \"fusion_threshold_bytes\": " << r.runtime.fusionThresholdBytes
      << ", \"cycle_time_s\": " << num(r.runtime.cycleSeconds);
  } else {
    o << ", \"servers\": " << r.ps.servers;
  }
  o << ", \"compute_s\": " << num(s.computeSeconds)
    << ", \"step_s\": " << num(s.stepSeconds) << ", \"efficiency\": " << num(s.efficiency)
    << ", \"comm_s\": " << num(s.commSeconds)
    << ", \"overlapped_comm_s\": " << num(s.overlappedSeconds)
    << ", \"exposed_comm_s\": " << num(s.exposedSeconds);
  if (r.mode == TrainMode::kAllreduce) {
    o << ", \"collectives\": " << s.collectives << ", \"cycles\": " << s.cycles;
  }
  if (a.hasFusion) {
    o << ", \"suggested_fusion_threshold_bytes\": " << a.fusion.thresholdBytes
      << ", \"suggested_step_s\": " << num(a.fusion.step.stepSeconds)
      << ", \"suggested_efficiency\": " << num(a.fusion.step.efficiency);
  }
  o << "}";
  return o.str();
}

}  // namespace kolo::predict
