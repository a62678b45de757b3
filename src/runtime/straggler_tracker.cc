// Per-rank lag statistics, and the named-straggler rule over steps.
//
// Why steps. The last rank's lag alone cannot tell a straggler from the
// rank that merely happens to be last: in a balanced job one rank is last
// in every operation, by a cycle or by the jitter of its compute. What the
// others lose is the lag against the step: a rank that arrives L late in
// every step of length T keeps the others idle a share L / T of the time.
// So the rule compares the lag with the step time, and the step time is
// measured, not guessed: a training step reduces each gradient once under
// the same name, so the interval between two readinesses of one name (the
// sentinel) is one step, however many operations and cycles the step has.
// Following one name costs one string comparison per operation; a hash map
// of every name's last readiness would give the same intervals at a lookup
// per operation.
//
// The rule, in three levels:
//   operation  the last rank and its lag (record);
//   step       its straggler: last in most of the step's operations, by a
//              mean lag above the margin and above `fraction` of the step
//              time (stepStraggler). The step time is the window's mean
//              step, this one included, not this step's own: where a step
//              is mostly negotiation (no compute between steps) the
//              sentinel's place among the step's cycles varies, and one
//              interval can be anything from a cycle to two steps. A
//              progressively slower rank's mean lag is about half its lag
//              at the step's end, which the default fraction allows for;
//   window     the straggler of most of the steps of the last windowSeconds
//              (and at least minSteps steps): a burst (a checkpoint, a
//              descheduled process) is a few steps and does not make a
//              majority; the line is then rate-limited.
// The per-rank counts of the window are kept up to date as steps enter and
// leave it, so a verdict is one pass over the ranks, and only after a step
// ended.
#include "runtime/straggler_tracker.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "common/check.h"

namespace kolo::runtime {
namespace {

using Seconds = std::chrono::duration<double>;

// Give-ups double the patience up to this many windows: steps up to 16
// windows long (320 s by default) are found, and after a long stretch of
// names that never recur a recurring one is still adopted within that.
constexpr int kPatienceCapWindows = 16;

StragglerTracker::Clock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<StragglerTracker::Clock::duration>(Seconds(seconds));
}

}  // namespace

StragglerTracker::StragglerTracker(int size, Options options)
    : size_(size),
      options_(options),
      totals_(size),
      lagSums_(size, 0.0),
      patience_(minPatience()),
      stepLast_(size, 0),
      stepLag_(size, 0.0),
      windowCount_(size, 0),
      windowLag_(size, 0.0) {
  KOLO_CHECK(size >= 1);
  KOLO_CHECK(options.minSteps >= 1);
}

void StragglerTracker::record(std::span<const Clock::time_point> arrivals,
                              std::string_view name) {
  KOLO_CHECK_EQ(arrivals.size(), static_cast<size_t>(size_));
  int latest = -1;
  bool tie = false;
  Clock::time_point earliest = Clock::time_point::max();
  int live = 0;
  for (int r = 0; r < size_; ++r) {
    const Clock::time_point t = arrivals[r];
    if (t == kAbsent) continue;
    ++live;
    ++totals_[r].operations;
    if (t < earliest) earliest = t;
    if (latest < 0 || t > arrivals[latest]) {
      latest = r;
      tie = false;
    } else if (t == arrivals[latest]) {
      tie = true;
    }
  }
  if (latest < 0) return;  // nobody took part
  // The operation opens a step when it is the sentinel: the clock first.
  advanceClock(name, arrivals[latest]);
  if (live < 2) return;
  const int last = tie ? -1 : latest;
  const double lag = Seconds(arrivals[latest] - earliest).count();
  if (last >= 0) addToTotals(last, lag);
  countInStep(last, lag);
}

void StragglerTracker::addToTotals(int last, double lag) {
  RankLag& l = totals_[last];
  ++l.timesLast;
  lagSums_[last] += lag;
  l.meanLagSeconds = lagSums_[last] / static_cast<double>(l.timesLast);
  if (lag > l.maxLagSeconds) l.maxLagSeconds = lag;
}

// The sentinel seen again ends a step; one unseen for longer than the
// patience is given up for the next named operation.
void StragglerTracker::advanceClock(std::string_view name, Clock::time_point t) {
  if (!sentinel_.empty() && name == sentinel_) {
    const Clock::duration step = t - sentinelAt_;
    endStep(t);
    patience_ = std::max(2 * step, minPatience());
    sentinelAt_ = t;
    return;
  }
  if (!sentinel_.empty() && t - sentinelAt_ > patience_) {
    patience_ = std::min(2 * patience_, kPatienceCapWindows * minPatience());
    sentinel_.clear();
    clearStep();
  }
  if (sentinel_.empty() && !name.empty()) adoptSentinel(name, t);
}

StragglerTracker::Clock::duration StragglerTracker::minPatience() const {
  return toDuration(std::max(options_.windowSeconds, 1.0));
}

void StragglerTracker::adoptSentinel(std::string_view name, Clock::time_point t) {
  sentinel_.assign(name);
  sentinelAt_ = t;
  clearStep();
}

void StragglerTracker::countInStep(int last, double lag) {
  ++stepOps_;
  if (last < 0) return;
  if (stepLast_[last]++ == 0) touched_.push_back(last);
  stepLag_[last] += lag;
  if (top_ < 0 || stepLast_[last] > stepLast_[top_]) top_ = last;
}

void StragglerTracker::clearStep() {
  for (int r : touched_) {
    stepLast_[r] = 0;
    stepLag_[r] = 0;
  }
  touched_.clear();
  stepOps_ = 0;
  top_ = -1;
}

// The step's straggler (see the header), its mean lag in *lag; -1: none.
int StragglerTracker::stepStraggler(double stepSeconds, double* lag) const {
  if (top_ < 0 || 2 * stepLast_[top_] <= stepOps_) return -1;
  *lag = stepLag_[top_] / static_cast<double>(stepLast_[top_]);
  const bool large =
      *lag > options_.marginSeconds && *lag > options_.fraction * stepSeconds;
  return large ? top_ : -1;
}

void StragglerTracker::endStep(Clock::time_point end) {
  Step step{sentinelAt_, end, -1, 0.0};
  const Clock::time_point first = steps_.empty() ? step.start : steps_.front().start;
  const double meanStep =
      Seconds(end - first).count() / static_cast<double>(steps_.size() + 1);
  step.straggler = stepStraggler(meanStep, &step.lagSeconds);
  clearStep();
  pushStep(step);
}

// Adds a step to the window, then drops the oldest while the rest still
// holds minSteps steps spanning windowSeconds.
void StragglerTracker::pushStep(const Step& step) {
  auto account = [this](const Step& s, int sign) {
    if (s.straggler < 0) return;
    windowCount_[s.straggler] += sign;
    windowLag_[s.straggler] += sign * s.lagSeconds;
  };
  steps_.push_back(step);
  account(step, +1);
  const auto window = toDuration(options_.windowSeconds);
  while (steps_.size() > static_cast<size_t>(options_.minSteps) &&
         steps_.back().end - steps_[1].start >= window) {
    account(steps_.front(), -1);
    steps_.pop_front();
  }
  stepEnded_ = true;
}

bool StragglerTracker::windowCovered() const {
  return steps_.size() >= static_cast<size_t>(options_.minSteps) &&
         steps_.back().end - steps_.front().start >= toDuration(options_.windowSeconds);
}

StragglerReport StragglerTracker::report() const {
  return StragglerReport{totals_};
}

std::string StragglerTracker::namedStraggler(Clock::time_point now) {
  if (lastLine_ && now - *lastLine_ < toDuration(options_.intervalSeconds)) return "";
  if (!stepEnded_) return "";
  stepEnded_ = false;
  if (!windowCovered()) return "";
  const auto most = std::max_element(windowCount_.begin(), windowCount_.end());
  if (2 * static_cast<size_t>(*most) <= steps_.size()) return "";
  lastLine_ = now;
  return line(static_cast<int>(most - windowCount_.begin()));
}

std::string StragglerTracker::line(int rank) const {
  const double lag = windowLag_[rank] / static_cast<double>(windowCount_[rank]);
  const double span = Seconds(steps_.back().end - steps_.front().start).count();
  const double step = span / static_cast<double>(steps_.size());
  std::ostringstream os;
  os << "straggler: rank " << rank << " arrived last in " << windowCount_[rank]
     << " of the last " << steps_.size() << " steps (" << std::fixed
     << std::setprecision(1) << span << " s), by " << lag * 1000.0 << " ms on average, "
     << std::setprecision(0) << std::floor(lag / step * 100.0) << "% of a "
     << std::setprecision(1) << step * 1000.0 << " ms step";
  return os.str();
}

}  // namespace kolo::runtime
