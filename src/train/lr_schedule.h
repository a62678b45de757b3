// Learning-rate rules for data-parallel training, as pure functions of the
// world size and of the position in training (docs/training.md).
//
// - Scaling: with N ranks each processing a batch of B, the global batch is
//   N*B; the linear rule (Goyal et al., "Accurate, Large Minibatch SGD")
//   multiplies the base (1-rank) learning rate by N, the square-root rule
//   (Krizhevsky, "One weird trick"; Hoffer et al.) by sqrt(N).
// - Warm-up: the learning rate grows linearly from `warmupStartLr` (usually
//   the base rate) to `peakLr` (the scaled rate) over `warmup` units, then
//   a decay rule runs from `peakLr`.
// - Units: the schedule does not care whether t counts steps or epochs; the
//   caller passes both `warmup`, `decay*` and t in the same unit (fractional
//   epochs, e.g. epoch + batch / batchesPerEpoch, give the per-step warm-up
//   of Goyal et al. with the length written in epochs).
//
// Contract: every function is pure and thread-safe; bad arguments (a
// negative length, a world size < 1, an unknown rule name) throw
// kolo::Error(kInvalidArgument) naming the value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kolo::train {

enum class ScalingRule { kNone, kLinear, kSqrt };

// "none", "linear", "sqrt".
ScalingRule parseScalingRule(std::string_view name);
const char* toString(ScalingRule rule);

// base * N (linear), base * sqrt(N) (sqrt), base (none).
double scaleLearningRate(double base, int worldSize, ScalingRule rule);

enum class DecayRule {
  kConstant,     // peakLr after warm-up
  kStep,         // peakLr * decayRate ^ floor((t - warmup) / decayInterval)
  kExponential,  // peakLr * decayRate ^ ((t - warmup) / decayInterval)
  kCosine,       // minLr + (peakLr - minLr) * (1 + cos(pi * p)) / 2, with
                 // p = (t - warmup) / (total - warmup) clamped to [0, 1]
};

// "constant"/"none", "step", "exp"/"exponential", "cosine".
DecayRule parseDecayRule(std::string_view name);
const char* toString(DecayRule rule);

struct LrSchedule {
  double peakLr = 0.1;         // reached at the end of warm-up
  double warmupStartLr = 0.1;  // at t = 0 (Goyal et al.: the 1-rank rate)
  double warmup = 0;           // length of the warm-up (0: none)
  DecayRule decay = DecayRule::kConstant;
  double decayRate = 0.1;    // step and exponential: factor per interval
  double decayInterval = 1;  // step and exponential: units per factor
  double total = 0;          // cosine: the end of training (> warmup)
  double minLr = 0;          // cosine: the final learning rate

  // Throws Error(kInvalidArgument) for inconsistent fields.
  void validate() const;
};

// The learning rate at t (t >= 0; t < 0 is treated as 0).
double learningRateAt(const LrSchedule& schedule, double t);

// A fractional epoch: epoch + batch / batchesPerEpoch.
double epochProgress(int64_t epoch, int64_t batch, int64_t batchesPerEpoch);

}  // namespace kolo::train
