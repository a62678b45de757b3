// One question to the training-step model, as `kolo-predict train` and
// kolo.predict.train ask it (docs/scale.md, "kolo-predict train").
//
// Contract
// - predictTrain answers for one mode and rank count: the step, and in
//   allreduce mode the fusion threshold that minimises the step.
// - efficiencyCurve answers for each mode and each rank count (ranks per
//   host: min(ranksPerHost, ranks)).
// - The allreduce time comes from an AllreduceModelFn (the allreduce model
//   of kolo's constants, or ringAllreduceModel).
// - Errors: std::invalid_argument naming the value (checkTrainSpec,
//   train_allreduce.h, train_ps.h; an unknown mode lists the known ones).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "predict/train_allreduce.h"
#include "predict/train_ps.h"
#include "predict/train_spec.h"

namespace kolo::predict {

enum class TrainMode { kAllreduce, kSyncPs, kDownpour };

// "allreduce", "sync-ps", "downpour".
TrainMode parseTrainMode(const std::string& text);
const char* toString(TrainMode mode);

// Seconds of one allreduce of `bytes` on `ranks` ranks, `ranksPerHost` to
// a host.
using AllreduceModelFn = std::function<double(int ranks, int ranksPerHost, size_t bytes)>;

// A ring over all ranks placed host by host, so each host link carries one
// ring edge each way: 2 (p - 1) steps of `latencySeconds`, 2 (p - 1) / p of
// the bytes over the link and (p - 1) / p of them reduced at
// `reduceSecondsPerByte`. Ranks on one host (ranks <= ranksPerHost) use
// `localBytesPerSecond` instead of the link.
AllreduceModelFn ringAllreduceModel(double linkBytesPerSecond, double latencySeconds,
                                    double reduceSecondsPerByte,
                                    double localBytesPerSecond);

struct TrainRequest {
  std::string modelName;          // for the report
  std::vector<LayerGrad> layers;  // backward order
  double stepComputeSeconds = 0;
  double backwardFraction = 2.0 / 3.0;
  int ranks = 1;  // training ranks (workers in the PS modes)
  int ranksPerHost = 1;
  double linkBytesPerSecond = 0;  // each host's link, each way
  double latencySeconds = 0;
  TrainMode mode = TrainMode::kAllreduce;
  RuntimeKnobs runtime;  // allreduce mode
  // PS modes: servers, periods, server costs, and ps.latencySeconds, the
  // transport's own latency of a message (added to latencySeconds, the
  // link's); ps.linkBytesPerSecond is linkBytesPerSecond.
  PsKnobs ps;

  TrainSpec spec(int ranks) const;  // at another rank count
};

struct TrainAnswer {
  StepPrediction step;
  bool hasFusion = false;  // allreduce mode
  FusionSuggestion fusion;
};

TrainAnswer predictTrain(const TrainRequest& request, const AllreduceModelFn& allreduce);

struct CurvePoint {
  TrainMode mode = TrainMode::kAllreduce;
  int ranks = 1;
  StepPrediction step;
};

std::vector<CurvePoint> efficiencyCurve(const TrainRequest& request,
                                        const std::vector<TrainMode>& modes,
                                        const std::vector<int>& ranks,
                                        const AllreduceModelFn& allreduce);

// 1, 2, 4, ..., up to `max` (and `max` itself when not a power of two).
std::vector<int> rankSeries(int max);

// A model known by its parameter count only: `tensors` float32 tensors of
// nearly equal size and equal compute shares.
std::vector<LayerGrad> uniformModel(uint64_t parameters, int tensors = 50);

// One JSON object: the request's inputs, the step, the overlap, the
// suggested fusion threshold (allreduce mode).
std::string trainAnswerJson(const TrainRequest& request, const TrainAnswer& answer);

}  // namespace kolo::predict
