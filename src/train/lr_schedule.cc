#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/check.h"

namespace kolo::train {

ScalingRule parseScalingRule(std::string_view name) {
  if (name == "none") return ScalingRule::kNone;
  if (name == "linear") return ScalingRule::kLinear;
  if (name == "sqrt") return ScalingRule::kSqrt;
  KOLO_THROW(ErrorCode::kInvalidArgument, "unknown learning-rate scaling rule '"
                                              << name
                                              << "' (expected none, linear or sqrt)");
}

const char* toString(ScalingRule rule) {
  switch (rule) {
    case ScalingRule::kNone: return "none";
    case ScalingRule::kLinear: return "linear";
    case ScalingRule::kSqrt: return "sqrt";
  }
  return "?";
}

double scaleLearningRate(double base, int worldSize, ScalingRule rule) {
  if (worldSize < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "scaleLearningRate: world size " << worldSize << " < 1");
  }
  switch (rule) {
    case ScalingRule::kNone: return base;
    case ScalingRule::kLinear: return base * worldSize;
    case ScalingRule::kSqrt: return base * std::sqrt(static_cast<double>(worldSize));
  }
  return base;
}

DecayRule parseDecayRule(std::string_view name) {
  if (name == "constant" || name == "none") return DecayRule::kConstant;
  if (name == "step") return DecayRule::kStep;
  if (name == "exp" || name == "exponential") return DecayRule::kExponential;
  if (name == "cosine") return DecayRule::kCosine;
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "unknown learning-rate decay rule '"
                 << name << "' (expected constant, step, exp or cosine)");
}

const char* toString(DecayRule rule) {
  switch (rule) {
    case DecayRule::kConstant: return "constant";
    case DecayRule::kStep: return "step";
    case DecayRule::kExponential: return "exp";
    case DecayRule::kCosine: return "cosine";
  }
  return "?";
}

void LrSchedule::validate() const {
  if (!(warmup >= 0)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "LrSchedule: warm-up length " << warmup << " < 0");
  }
  if ((decay == DecayRule::kStep || decay == DecayRule::kExponential) &&
      !(decayInterval > 0)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "LrSchedule: decay interval " << decayInterval << " must be > 0");
  }
  if (decay == DecayRule::kCosine && !(total > warmup)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "LrSchedule: cosine decay needs total ("
                                                << total << ") > warm-up (" << warmup
                                                << ")");
  }
}

// Piecewise: a linear ramp on [0, warmup), then the decay rule on the time
// since the end of warm-up. The ramp ends exactly at peakLr, so the
// schedule is continuous at t = warmup for every rule.
double learningRateAt(const LrSchedule& s, double t) {
  s.validate();
  t = std::max(t, 0.0);
  if (t < s.warmup) {
    return s.warmupStartLr + (s.peakLr - s.warmupStartLr) * (t / s.warmup);
  }
  const double since = t - s.warmup;
  switch (s.decay) {
    case DecayRule::kConstant: return s.peakLr;
    case DecayRule::kStep:
      return s.peakLr * std::pow(s.decayRate, std::floor(since / s.decayInterval));
    case DecayRule::kExponential:
      return s.peakLr * std::pow(s.decayRate, since / s.decayInterval);
    case DecayRule::kCosine: {
      const double p = std::clamp(since / (s.total - s.warmup), 0.0, 1.0);
      return s.minLr + (s.peakLr - s.minLr) * 0.5 * (1 + std::cos(std::numbers::pi * p));
    }
  }
  return s.peakLr;
}

double epochProgress(int64_t epoch, int64_t batch, int64_t batchesPerEpoch) {
  if (batchesPerEpoch < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "epochProgress: batches per epoch " << batchesPerEpoch << " < 1");
  }
  return static_cast<double>(epoch) +
         static_cast<double>(batch) / static_cast<double>(batchesPerEpoch);
}

}  // namespace kolo::train
