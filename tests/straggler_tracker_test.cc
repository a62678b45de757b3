// StragglerTracker alone, with made-up arrival times: statistics, ties,
// absent ranks, and the named-straggler line with its once-per-window rule.
#include "runtime/straggler_tracker.h"

#include <gtest/gtest.h>

namespace kolo::runtime {
namespace {

using Clock = StragglerTracker::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

// Arrivals at t0 + the given milliseconds; a negative value: absent.
std::vector<Clock::time_point> at(std::vector<double> ms) {
  std::vector<Clock::time_point> out;
  for (double m : ms) {
    out.push_back(m < 0 ? StragglerTracker::kAbsent
                        : t0 + microseconds(static_cast<int64_t>(m * 1000)));
  }
  return out;
}

TEST(StragglerTracker, Statistics) {
  StragglerTracker s(3, 0.005);
  s.record(at({0, 10, 2}));  // rank 1 last by 10 ms
  s.record(at({1, 31, 0}));  // rank 1 last by 31 ms
  s.record(at({4, 0, 3}));   // rank 0 last by 4 ms
  const StragglerReport r = s.report();
  ASSERT_EQ(r.ranks.size(), 3u);
  EXPECT_EQ(r.ranks[0].operations, 3);
  EXPECT_EQ(r.ranks[0].timesLast, 1);
  EXPECT_NEAR(r.ranks[0].meanLagSeconds, 0.004, 1e-9);
  EXPECT_NEAR(r.ranks[0].maxLagSeconds, 0.004, 1e-9);
  EXPECT_EQ(r.ranks[1].timesLast, 2);
  EXPECT_NEAR(r.ranks[1].meanLagSeconds, 0.0205, 1e-9);
  EXPECT_NEAR(r.ranks[1].maxLagSeconds, 0.031, 1e-9);
  EXPECT_EQ(r.ranks[2].operations, 3);
  EXPECT_EQ(r.ranks[2].timesLast, 0);
  EXPECT_EQ(r.ranks[2].meanLagSeconds, 0);
  EXPECT_EQ(r.ranks[2].maxLagSeconds, 0);
}

TEST(StragglerTracker, TiesAtTheLatestCountForNone) {
  StragglerTracker s(3, 0.0);
  s.record(at({0, 7, 7}));  // ranks 1 and 2 tie: nobody last
  s.record(at({5, 5, 5}));  // all equal
  s.record(at({0, 7, 3}));  // rank 1 last; a tie below the latest is fine
  s.record(at({3, 0, 3}));  // tie again
  const StragglerReport r = s.report();
  EXPECT_EQ(r.ranks[0].timesLast, 0);
  EXPECT_EQ(r.ranks[1].timesLast, 1);
  EXPECT_EQ(r.ranks[2].timesLast, 0);
  for (const RankLag& l : r.ranks) EXPECT_EQ(l.operations, 4);
}

TEST(StragglerTracker, AbsentRanksTakeNoPart) {
  StragglerTracker s(3, 0.0);
  s.record(at({-1, 0, 9}));   // rank 0 joined; rank 2 last by 9 ms
  s.record(at({-1, -1, 4}));  // one participant: nobody last
  const StragglerReport r = s.report();
  EXPECT_EQ(r.ranks[0].operations, 0);
  EXPECT_EQ(r.ranks[1].operations, 1);
  EXPECT_EQ(r.ranks[2].operations, 2);
  EXPECT_EQ(r.ranks[2].timesLast, 1);
  EXPECT_NEAR(r.ranks[2].maxLagSeconds, 0.009, 1e-9);
}

TEST(StragglerTracker, NamedStragglerLine) {
  StragglerTracker s(4, 0.005, 10);
  // 6 of 10 operations rank 3 is last by more than 5 ms (10, 12, ..., 20
  // ms: 15 ms on average); in the other 4 rank 0 is last by only 2 ms.
  for (int i = 0; i < 10; ++i) {
    if (i < 6) {
      s.record(at({0, 1, 0, 10.0 + 2 * i}));
    } else {
      s.record(at({2, 0, 1, 0}));
    }
    if (i < 9) {
      EXPECT_EQ(s.namedStraggler(), "") << "window not full at " << i;
    }
  }
  EXPECT_EQ(s.namedStraggler(),
            "straggler: rank 3 arrived last by 15.0 ms on average in 6 of the last 10 "
            "operations");
  // Named at most once per window, though still the straggler.
  for (int i = 0; i < 9; ++i) {
    s.record(at({0, 0, 0, 30}));
    EXPECT_EQ(s.namedStraggler(), "") << i;
  }
  s.record(at({0, 0, 0, 30}));
  EXPECT_EQ(s.namedStraggler(),
            "straggler: rank 3 arrived last by 30.0 ms on average in 10 of the last 10 "
            "operations");
}

TEST(StragglerTracker, HalfIsNotMost) {
  StragglerTracker s(2, 0.005, 10);
  for (int i = 0; i < 10; ++i) s.record(i % 2 ? at({0, 50}) : at({50, 0}));
  EXPECT_EQ(s.namedStraggler(), "");
  // One more for rank 1 makes 6 of the last 10 (the oldest, rank 0's, left).
  s.record(at({0, 50}));
  EXPECT_EQ(s.namedStraggler(),
            "straggler: rank 1 arrived last by 50.0 ms on average in 6 of the last 10 "
            "operations");
}

TEST(StragglerTracker, WithinTheMarginIsNotStraggling) {
  StragglerTracker s(2, 0.005, 4);
  for (int i = 0; i < 8; ++i) s.record(at({0, 4.9}));
  EXPECT_EQ(s.namedStraggler(), "");
  EXPECT_EQ(s.report().ranks[1].timesLast, 8);  // still last, just not by much
}

}  // namespace
}  // namespace kolo::runtime
