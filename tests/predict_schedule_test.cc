// The eager-send replay (src/predict/eager_schedule.h) on schedules with no
// fold: what it does and does not charge. docs/scale.md ("Error") uses
// these properties to rule out eager sends as the cause of the measured
// slowdown of rhd on 4 hosts of one rank at 16 MiB.
#include <gtest/gtest.h>

#include <vector>

#include "predict/eager_schedule.h"

namespace kolo::predict {
namespace {

constexpr double kRate = 1e9 * 1448 / 1514 / 8;  // 1 Gbit/s of payload, bytes/s

// `calls` consecutive rhd calls of `b` bytes on 4 ranks, one per host
// (halving masks 2, 1, doubling masks 1, 2: b/2, b/4, b/4, b/2), after
// ranks 2 and 3 first exchange `skew` bytes with each other (step 0), so
// that they start the first call behind ranks 0 and 1.
double extraOfRhd4(double b, int calls, double skew) {
  const int steps = 1 + 4 * calls;
  EagerProgram program(4);
  for (int r = 2; r < 4; ++r) program[r].push_back({0, r ^ 1, skew, r ^ 1, skew});
  const int masks[4] = {2, 1, 1, 2};
  const double bytes[4] = {b / 2, b / 4, b / 4, b / 2};
  for (int c = 0; c < calls; ++c) {
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < 4; ++j) {
        program[r].push_back(
            {1 + 4 * c + j, r ^ masks[j], bytes[j], r ^ masks[j], bytes[j]});
      }
    }
  }
  double sum = 0;
  for (double e : eagerStepExtra(program, steps, {0, 1, 2, 3}, kRate)) sum += e;
  return sum;
}

TEST(EagerScheduleTest, SymmetricScheduleHasNoExtra) {
  EXPECT_NEAR(extraOfRhd4(16 << 20, 4, 0), 0.0, 1e-12);
}

// A skew between the two halves of a power-of-two schedule is paid once:
// the eager sends of the ranks ahead keep every link busy, so the calls
// after it take their wire time (1.5 b / rate each) and the delay is the
// skew's own wire time (here b / 16), whatever the number of calls.
TEST(EagerScheduleTest, SkewIsPaidOnceNotPerCall) {
  for (double b : {1.0 * (1 << 20), 16.0 * (1 << 20), 64.0 * (1 << 20)}) {
    const double skew = b / 16;
    const double once = skew / kRate;
    for (int calls : {2, 8}) {
      EXPECT_NEAR(extraOfRhd4(b, calls, skew), once, 0.01 * once)
          << "bytes " << b << ", calls " << calls;
    }
  }
}

}  // namespace
}  // namespace kolo::predict
