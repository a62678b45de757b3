// The training step under kolo's allreduce runtime (docs/scale.md, "The
// training-step model"; the runtime it imitates: src/runtime/, docs/runtime.md).
//
// Contract
// - predictAllreduceStep is a pure function: the step of one rank when
//   every rank computes alike (ranks in lockstep), given the time of one
//   fused allreduce of b bytes on the job's ranks (AllreduceTimeFn; the
//   allreduce model of allreduce_model.h, or any measured curve).
// - At one rank nothing is communicated: the step is the compute and the
//   efficiency exactly 1.
// - suggestFusionThreshold tries kFusionCandidates and returns the
//   threshold of the shortest predicted step (the smallest on a tie).
// - Bad inputs throw std::invalid_argument (checkTrainSpec, and a
//   negative cycle time or negotiation time, or an AllreduceTimeFn that
//   returns a negative or non-finite time, naming the bytes).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "predict/train_spec.h"

namespace kolo::predict {

// Seconds of one allreduce of `bytes` (a fused buffer) on the job's ranks.
using AllreduceTimeFn = std::function<double(size_t bytes)>;

// The runtime's knobs (KOLO_FUSION_THRESHOLD, KOLO_CYCLE_TIME) and its
// fixed behaviour.
struct RuntimeKnobs {
  size_t fusionThresholdBytes = size_t{64} << 20;  // 0: no fusion
  double cycleSeconds = 1e-3;
  // kolo: a cycle starts once submissions stopped arriving for
  // gatherQuietSeconds (at most one cycle after the first), and at once
  // when operations wait after a cycle (runtime_loop.cc, pace()).
  // periodic: Horovod's loop, one cycle every cycleSeconds (the papers'
  // runtime).
  bool periodic = false;
  double gatherQuietSeconds = 50e-6;
  // Single-host jobs run an allreduce above this alone, in place
  // (fusion_planner.h, kFusionAloneBytes); jobs across hosts fuse all.
  size_t aloneBytes = size_t{256} << 10;
  // The negotiation's exchange per cycle (an allgather of a few dozen
  // bytes per rank); < 0: the AllreduceTimeFn of 64 bytes.
  double negotiationSeconds = -1;
};

StepPrediction predictAllreduceStep(const TrainSpec& spec, const RuntimeKnobs& knobs,
                                    const AllreduceTimeFn& allreduce);

// Thresholds tried by suggestFusionThreshold: 0 (no fusion), then 64 KiB to
// 1 GiB by powers of two.
std::vector<size_t> fusionCandidates();

struct FusionSuggestion {
  size_t thresholdBytes = 0;
  StepPrediction step;
};

FusionSuggestion suggestFusionThreshold(const TrainSpec& spec, const RuntimeKnobs& knobs,
                                        const AllreduceTimeFn& allreduce);

}  // namespace kolo::predict
