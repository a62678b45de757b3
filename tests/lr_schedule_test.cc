// Learning-rate rules (src/train/lr_schedule.h): scaling by world size,
// warm-up and each decay rule, checked against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <kolo/error.h>

#include "train/lr_schedule.h"

namespace kolo::train {
namespace {

TEST(LrScaling, LinearSqrtNone) {
  EXPECT_DOUBLE_EQ(scaleLearningRate(0.01, 8, ScalingRule::kLinear), 0.08);
  EXPECT_DOUBLE_EQ(scaleLearningRate(0.01, 4, ScalingRule::kSqrt), 0.02);
  EXPECT_DOUBLE_EQ(scaleLearningRate(0.01, 2, ScalingRule::kSqrt), 0.01 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(scaleLearningRate(0.01, 8, ScalingRule::kNone), 0.01);
  EXPECT_DOUBLE_EQ(scaleLearningRate(0.01, 1, ScalingRule::kLinear), 0.01);
  EXPECT_THROW(scaleLearningRate(0.01, 0, ScalingRule::kLinear), Error);
}

TEST(LrScaling, ParseNames) {
  EXPECT_EQ(parseScalingRule("linear"), ScalingRule::kLinear);
  EXPECT_EQ(parseScalingRule("sqrt"), ScalingRule::kSqrt);
  EXPECT_EQ(parseScalingRule("none"), ScalingRule::kNone);
  EXPECT_STREQ(toString(parseScalingRule("sqrt")), "sqrt");
  try {
    parseScalingRule("quadratic");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quadratic"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parseDecayRule("cosine"), DecayRule::kCosine);
  EXPECT_EQ(parseDecayRule("exp"), DecayRule::kExponential);
  EXPECT_EQ(parseDecayRule("step"), DecayRule::kStep);
  EXPECT_EQ(parseDecayRule("none"), DecayRule::kConstant);
  EXPECT_THROW(parseDecayRule("linear"), Error);
}

// Goyal et al.: 8 ranks, base 0.1 -> 0.8 over 5 epochs, linear in between.
TEST(LrSchedule, WarmupIsLinearFromBaseToPeak) {
  LrSchedule s;
  s.warmupStartLr = 0.1;
  s.peakLr = scaleLearningRate(0.1, 8, ScalingRule::kLinear);
  s.warmup = 5;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 1), 0.1 + 0.7 / 5);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 2.5), 0.45);
  EXPECT_NEAR(learningRateAt(s, 4.999), 0.8, 1e-3);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 5), 0.8);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 50), 0.8);  // constant afterwards
  EXPECT_DOUBLE_EQ(learningRateAt(s, -1), 0.1);  // clamped to t = 0
}

TEST(LrSchedule, NoWarmupStartsAtPeak) {
  LrSchedule s;
  s.peakLr = 0.3;
  s.warmupStartLr = 0.01;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 0), 0.3);
}

TEST(LrSchedule, StepDecayAfterWarmup) {
  LrSchedule s;
  s.warmupStartLr = 0.1;
  s.peakLr = 0.4;
  s.warmup = 2;
  s.decay = DecayRule::kStep;
  s.decayRate = 0.1;
  s.decayInterval = 30;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 1), 0.25);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 2), 0.4);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 31.9), 0.4);
  EXPECT_NEAR(learningRateAt(s, 32), 0.04, 1e-15);
  EXPECT_NEAR(learningRateAt(s, 62), 0.004, 1e-15);
}

TEST(LrSchedule, ExponentialDecay) {
  LrSchedule s;
  s.peakLr = 1.0;
  s.decay = DecayRule::kExponential;
  s.decayRate = 0.5;
  s.decayInterval = 10;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 0), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 10), 0.5);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 5), std::sqrt(0.5));
  EXPECT_DOUBLE_EQ(learningRateAt(s, 30), 0.125);
}

TEST(LrSchedule, CosineDecayFromPeakToMin) {
  LrSchedule s;
  s.warmupStartLr = 0.0;
  s.peakLr = 1.0;
  s.warmup = 10;
  s.decay = DecayRule::kCosine;
  s.total = 110;
  s.minLr = 0.1;
  EXPECT_DOUBLE_EQ(learningRateAt(s, 5), 0.5);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 10), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 60), 0.1 + 0.9 * 0.5);  // half way: cos = 0
  EXPECT_DOUBLE_EQ(learningRateAt(s, 35),
                   0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)));
  EXPECT_DOUBLE_EQ(learningRateAt(s, 110), 0.1);
  EXPECT_DOUBLE_EQ(learningRateAt(s, 500), 0.1);
}

TEST(LrSchedule, ContinuousAtEndOfWarmupForEveryRule) {
  for (DecayRule rule : {DecayRule::kConstant, DecayRule::kStep, DecayRule::kExponential,
                         DecayRule::kCosine}) {
    LrSchedule s;
    s.warmupStartLr = 0.05;
    s.peakLr = 0.2;
    s.warmup = 3;
    s.decay = rule;
    s.decayRate = 0.9;
    s.decayInterval = 1;
    s.total = 20;
    EXPECT_NEAR(learningRateAt(s, 3 - 1e-9), learningRateAt(s, 3), 1e-8)
        << toString(rule);
  }
}

TEST(LrSchedule, RejectsInconsistentFields) {
  LrSchedule s;
  s.warmup = -1;
  EXPECT_THROW(learningRateAt(s, 0), Error);
  s.warmup = 5;
  s.decay = DecayRule::kCosine;
  s.total = 5;
  EXPECT_THROW(learningRateAt(s, 0), Error);
  s.decay = DecayRule::kStep;
  s.decayInterval = 0;
  EXPECT_THROW(learningRateAt(s, 0), Error);
}

TEST(LrSchedule, EpochProgress) {
  EXPECT_DOUBLE_EQ(epochProgress(2, 50, 200), 2.25);
  EXPECT_DOUBLE_EQ(epochProgress(0, 0, 1), 0.0);
  EXPECT_THROW(epochProgress(0, 0, 0), Error);
}

}  // namespace
}  // namespace kolo::train
