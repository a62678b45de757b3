// The heartbeat schedule of the tcp and mpi transports
// (src/common/heartbeat_schedule.h), driven by explicit times.
#include "common/heartbeat_schedule.h"

#include <gtest/gtest.h>

namespace kolo {
namespace {

using std::chrono::milliseconds;
using Clock = HeartbeatSchedule::Clock;

TEST(HeartbeatSchedule, IntervalIsAQuarterOfTheTimeoutWithinBounds) {
  EXPECT_EQ(HeartbeatSchedule::intervalFor(milliseconds(2000)), milliseconds(500));
  EXPECT_EQ(HeartbeatSchedule::intervalFor(milliseconds(100)), milliseconds(50));
  EXPECT_EQ(HeartbeatSchedule::intervalFor(milliseconds(30000)), milliseconds(1000));
}

TEST(HeartbeatSchedule, OneRoundPerInterval) {
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  HeartbeatSchedule s(milliseconds(2000), 3, t0);
  EXPECT_EQ(s.nextDue(), t0 + milliseconds(500));
  EXPECT_FALSE(s.takeRound(t0 + milliseconds(499)));
  EXPECT_TRUE(s.takeRound(t0 + milliseconds(600)));
  // Counted from when the round went out, not from when it was due.
  EXPECT_EQ(s.nextDue(), t0 + milliseconds(1100));
  EXPECT_FALSE(s.takeRound(t0 + milliseconds(1000)));
  EXPECT_TRUE(s.takeRound(t0 + milliseconds(1100)));
}

TEST(HeartbeatSchedule, APeerIsSilentUntilHeardFrom) {
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  HeartbeatSchedule s(milliseconds(2000), 3, t0);
  EXPECT_EQ(s.deadline(1), t0 + milliseconds(2000));
  EXPECT_FALSE(s.silentFor(1, milliseconds(2000), t0 + milliseconds(1999)));
  EXPECT_TRUE(s.silentFor(1, milliseconds(2000), t0 + milliseconds(2000)));
  s.heard(1, t0 + milliseconds(1500));
  EXPECT_FALSE(s.silentFor(1, milliseconds(2000), t0 + milliseconds(3000)));
  EXPECT_EQ(s.deadline(1), t0 + milliseconds(3500));
  EXPECT_EQ(s.lastHeard(1), t0 + milliseconds(1500));
  // Others are not affected.
  EXPECT_TRUE(s.silentFor(2, milliseconds(2000), t0 + milliseconds(3000)));
}

TEST(HeartbeatSchedule, RestartCountsEveryPeerAsHeard) {
  const auto t0 = Clock::time_point{} + std::chrono::hours(1);
  HeartbeatSchedule s(milliseconds(400), 2, t0);
  const auto t1 = t0 + milliseconds(5000);
  EXPECT_TRUE(s.silentFor(0, milliseconds(400), t1));
  s.restart(t1);
  EXPECT_FALSE(s.silentFor(0, milliseconds(400), t1 + milliseconds(399)));
  EXPECT_EQ(s.nextDue(), t1 + milliseconds(100));
  EXPECT_FALSE(s.takeRound(t1 + milliseconds(99)));
}

}  // namespace
}  // namespace kolo
