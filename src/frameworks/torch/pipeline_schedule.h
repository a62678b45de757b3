// The order in which one pipeline stage runs its micro-batches' forward and
// backward passes (kolo::torch::pipeline::Pipeline, docs/pipeline.md);
// pure functions, the same schedules as kolo.torch.pipeline's.
//
// With P stages and M micro-batches, stage s (0-based):
// - "gpipe": every forward, then every backward, both in micro-batch order.
//   Peak activations held: M micro-batches.
// - "1f1b" (PipeDream-flush): w = min(P - s - 1, M) warm-up forwards, then
//   one forward and one backward alternately, then the remaining backwards.
//   Peak activations held: w + 1.
// Both run a stage's backwards in micro-batch order, so its parameters'
// gradients accumulate in the same order under either schedule (and as an
// unpipelined loop over the same micro-batches): the schedules give the
// same gradients bit for bit. Both idle a stage for P - 1 of M + P - 1
// slots: the bubble fraction (P - 1) / (M + P - 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::torch::pipeline {

// One slot of a stage's schedule: the forward or backward of a micro-batch.
struct Slot {
  bool forward = true;
  int64_t microBatch = 0;
};

// The schedules' names, "gpipe" and "1f1b".
const std::vector<std::string>& scheduleNames();

// Stage `stage`'s slots, in order. Throws kolo::Error(kInvalidArgument)
// for a schedule not in scheduleNames() or arguments out of range.
std::vector<Slot> scheduleOrder(const std::string& schedule, int stage, int stages,
                                int64_t chunks);

// (P - 1) / (M + P - 1).
double bubbleFraction(int stages, int64_t chunks);

}  // namespace kolo::torch::pipeline
