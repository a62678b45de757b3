// StragglerTracker alone, with made-up arrival times: statistics, ties,
// absent ranks; and the named-straggler line on simulated jobs (steps of
// named operations, an injected clock): a balanced job logs nothing, a
// persistent straggler is named, a burst is not, the rate limit holds.
#include "runtime/straggler_tracker.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kolo::runtime {
namespace {

using Clock = StragglerTracker::Clock;
using Options = StragglerTracker::Options;
using std::chrono::microseconds;

const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

Clock::duration ms(double m) {
  return microseconds(static_cast<int64_t>(m * 1000));
}

// Arrivals at t0 + the given milliseconds; a negative value: absent.
std::vector<Clock::time_point> at(std::vector<double> m) {
  std::vector<Clock::time_point> out;
  for (double v : m) out.push_back(v < 0 ? StragglerTracker::kAbsent : t0 + ms(v));
  return out;
}

Options withMargin(double seconds) {
  Options o;
  o.marginSeconds = seconds;
  return o;
}

TEST(StragglerTracker, Statistics) {
  StragglerTracker s(3, withMargin(0.005));
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
  StragglerTracker s(3, withMargin(0.0));
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
  StragglerTracker s(3, withMargin(0.0));
  s.record(at({-1, 0, 9}));   // rank 0 joined; rank 2 last by 9 ms
  s.record(at({-1, -1, 4}));  // one participant: nobody last
  const StragglerReport r = s.report();
  EXPECT_EQ(r.ranks[0].operations, 0);
  EXPECT_EQ(r.ranks[1].operations, 1);
  EXPECT_EQ(r.ranks[2].operations, 2);
  EXPECT_EQ(r.ranks[2].timesLast, 1);
  EXPECT_NEAR(r.ranks[2].maxLagSeconds, 0.009, 1e-9);
}

// A simulated training job. Each step starts `stepMs` after the previous
// one (for the earliest rank); its `ops` operations, named g0, g1, ...
// (the same every step), are submitted evenly over the step's first half
// (the backward pass; spreadOver() changes the share), each rank
// `delays[r]` ms after the earliest; after the step's operations,
// namedStraggler() is asked at the last readiness.
class Job {
 public:
  explicit Job(int size, Options options = {}) : tracker_(size, options), size_(size) {}

  void step(double stepMs, const std::vector<double>& delays, int ops = 20) {
    ASSERT_EQ(delays.size(), static_cast<size_t>(size_));
    Clock::time_point latest = start_;
    for (int k = 0; k < ops; ++k) {
      const Clock::time_point submitted = start_ + ms(stepMs * spread_ * k / ops);
      std::vector<Clock::time_point> arrivals;
      for (double d : delays) arrivals.push_back(submitted + ms(d));
      tracker_.record(arrivals, "g" + std::to_string(k));
      for (const auto& a : arrivals) latest = std::max(latest, a);
    }
    start_ += ms(stepMs);
    const std::string line = tracker_.namedStraggler(latest);
    if (!line.empty()) lines_.push_back({seconds(latest), line});
  }

  // `n` steps; delays(i) gives step i's delays.
  void run(int n, double stepMs, const std::function<std::vector<double>(int)>& delays) {
    for (int i = 0; i < n; ++i) step(stepMs, delays(i));
  }

  void spreadOver(double share) { spread_ = share; }
  void startAt(double seconds) { start_ = t0 + ms(seconds * 1000); }
  StragglerTracker& tracker() { return tracker_; }
  double now() const { return seconds(start_); }
  // Each line logged, with the seconds since the job began.
  const std::vector<std::pair<double, std::string>>& lines() const { return lines_; }

 private:
  static double seconds(Clock::time_point t) {
    return std::chrono::duration<double>(t - t0).count();
  }

  StragglerTracker tracker_;
  int size_;
  double spread_ = 0.5;
  Clock::time_point start_ = t0;
  std::vector<std::pair<double, std::string>> lines_;
};

// The complaint of issue 15: in a balanced 2-rank job one rank is last in
// every operation by a few ms (the cycle, its compute's jitter). Against a
// 200 ms step that is noise: nothing is logged, though the report still
// shows who was last.
TEST(StragglerTracker, BalancedJobWithOneRankAlwaysLastLogsNothing) {
  Job job(2);
  job.run(1000, 200, [](int i) { return std::vector<double>{0, 5.0 + (i % 7)}; });
  EXPECT_GE(job.now(), 200.0);
  EXPECT_TRUE(job.lines().empty()) << job.lines().front().second;
  const StragglerReport r = job.tracker().report();
  EXPECT_EQ(r.ranks[1].timesLast, 20 * 1000);
  EXPECT_GT(r.ranks[1].meanLagSeconds, 0.005);
}

// Many ranks, each last in turn by much of the step (jitter that is large
// but not one rank's): no rank is the straggler of most steps.
TEST(StragglerTracker, RotatingLastRankLogsNothing) {
  Job job(4);
  job.run(1000, 100, [](int i) {
    std::vector<double> d(4, 0.0);
    d[i % 4] = 50;
    return d;
  });
  EXPECT_TRUE(job.lines().empty()) << job.lines().front().second;
}

// A rank 60 ms late in every 160 ms step (the others idle 37% of the
// time): named once the window holds 20 s of steps, with its figures.
TEST(StragglerTracker, PersistentStragglerIsNamed) {
  Job job(4);
  job.run(200, 160, [](int) { return std::vector<double>{0, 1, 0, 60}; });
  ASSERT_EQ(job.lines().size(), 1u);
  // The first step starts at the first readiness (60 ms); 125 steps of
  // 160 ms make the 20 s window.
  EXPECT_NEAR(job.lines()[0].first, 0.060 + 125 * 0.160, 0.1);
  EXPECT_EQ(job.lines()[0].second,
            "straggler: rank 3 arrived last in 125 of the last 125 steps (20.0 s), by "
            "60.0 ms on average, 37% of a 160.0 ms step");
}

// The same lag in a fast job: 3 ms of a 4 ms step is most of the step, but
// within the margin (a cycle or two): nobody is named.
TEST(StragglerTracker, WithinTheMarginIsNotStraggling) {
  Job job(2);
  job.run(20000, 4, [](int) { return std::vector<double>{0, 3}; });
  EXPECT_GE(job.now(), 80.0);
  EXPECT_TRUE(job.lines().empty()) << job.lines().front().second;
  EXPECT_EQ(job.tracker().report().ranks[1].timesLast, 20 * 20000);
}

// Bursts: rank 1 is 400 ms late for 8 s (a checkpoint, another process
// on its cores), then balanced again; twice, a minute apart. Each burst
// is a minority of the window's steps: nothing is logged.
TEST(StragglerTracker, ShortBurstIsNotNamed) {
  Job job(2);
  auto balanced = [](int) { return std::vector<double>{0, 2}; };
  auto late = [](int) { return std::vector<double>{0, 400}; };
  for (int round = 0; round < 2; ++round) {
    job.run(300, 100, balanced);  // 30 s
    job.run(16, 500, late);       // 8 s
  }
  job.run(300, 100, balanced);
  EXPECT_TRUE(job.lines().empty()) << job.lines().front().second;
}

// Half the steps is not most: two ranks straggle in alternate steps.
TEST(StragglerTracker, HalfIsNotMost) {
  Job job(3);
  job.run(400, 100, [](int i) {
    return i % 2 ? std::vector<double>{0, 60, 0} : std::vector<double>{60, 0, 0};
  });
  EXPECT_TRUE(job.lines().empty()) << job.lines().front().second;
}

// A persistent straggler for 200 s: one line per minute at most, measured
// with the clock passed in (no sleeping).
TEST(StragglerTracker, RateLimitHolds) {
  Job job(2);
  job.run(2001, 100, [](int) { return std::vector<double>{0, 40}; });
  ASSERT_EQ(job.lines().size(), 4u);  // at about 20, 80, 140 and 200 s
  EXPECT_NEAR(job.lines()[0].first, 20.0, 0.2);
  for (size_t i = 1; i < job.lines().size(); ++i) {
    const double gap = job.lines()[i].first - job.lines()[i - 1].first;
    EXPECT_GE(gap, 60.0 - 1e-6);
    EXPECT_LT(gap, 60.2);  // the next step after the minute
  }
  // The interval is an option.
  Options o;
  o.intervalSeconds = 30;
  Job fast(2, o);
  fast.run(2001, 100, [](int) { return std::vector<double>{0, 40}; });
  EXPECT_EQ(fast.lines().size(), 7u);  // 20, 50, ..., 200 s
}

// The first named operation never recurs (a broadcast at start-up): after
// the patience (the window) it is given up and the gradients make the
// steps.
TEST(StragglerTracker, OneOffFirstOperationIsReplaced) {
  Job job(2);
  job.tracker().record(at({0, 0}), "broadcast.parameters");
  job.run(450, 100, [](int) { return std::vector<double>{0, 40}; });
  ASSERT_EQ(job.lines().size(), 1u);
  EXPECT_NEAR(job.lines()[0].first, 40.0, 0.2);  // 20 s patience + 20 s window
  EXPECT_NE(job.lines()[0].second.find("rank 1 arrived last in 200 of the last 200 "),
            std::string::npos)
      << job.lines()[0].second;
}

// Steps longer than the window, their operations spread over the whole
// step: the sentinel (g0) is given up within the first step (20 s), its
// successor (g14, 21 s later) is given twice as long and recurs, and the
// window then holds at least 10 steps: 10 of 30 s.
TEST(StragglerTracker, StepsLongerThanTheWindow) {
  Job job(2);
  job.spreadOver(1.0);
  job.run(12, 30000, [](int) { return std::vector<double>{0, 9000}; });
  ASSERT_EQ(job.lines().size(), 1u);
  EXPECT_NE(job.lines()[0].second.find("rank 1 arrived last in 10 of the last 10 steps "
                                       "(300.0 s), by 9000.0 ms on average, 30% of a "
                                       "30000.0 ms step"),
            std::string::npos)
      << job.lines()[0].second;
}

// An hour of names that never recur (automatic names) doubles the
// patience up to 16 windows, not more: a straggler in the training that
// follows is named within 16 windows (320 s) and one more window.
TEST(StragglerTracker, PatienceIsCapped) {
  Job job(2);
  for (int i = 0; i < 3600; ++i) {
    const double m = i * 1000.0;
    job.tracker().record(at({m, m + 1}), "allreduce.noname." + std::to_string(i));
  }
  job.startAt(3601);
  job.run(4000, 100, [](int) { return std::vector<double>{0, 40}; });
  ASSERT_FALSE(job.lines().empty());
  EXPECT_LT(job.lines()[0].first, 3601 + 16 * 20 + 20 + 1);
}

// Operations without a name never make a step: no line, whatever the lag.
TEST(StragglerTracker, UnnamedOperationsMakeNoSteps) {
  StragglerTracker s(2, Options{});
  for (int i = 0; i < 10000; ++i) {
    s.record(at({i * 100.0, i * 100.0 + 90}));
    EXPECT_EQ(s.namedStraggler(t0 + ms(i * 100.0 + 90)), "") << i;
  }
  EXPECT_EQ(s.report().ranks[1].timesLast, 10000);
}

}  // namespace
}  // namespace kolo::runtime
