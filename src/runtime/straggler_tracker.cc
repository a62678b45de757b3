// Per-rank lag statistics and the named-straggler rule over a sliding
// window of the most recent operations.
#include "runtime/straggler_tracker.h"

#include <iomanip>
#include <sstream>

#include "common/check.h"

namespace kolo::runtime {

StragglerTracker::StragglerTracker(int size, double marginSeconds, int window)
    : size_(size),
      marginSeconds_(marginSeconds),
      window_(window),
      totals_(size),
      lagSums_(size, 0.0),
      namedAt_(size, -1) {
  KOLO_CHECK(size >= 1);
  KOLO_CHECK(window >= 1);
}

void StragglerTracker::record(std::span<const Clock::time_point> arrivals) {
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
  ++recorded_;
  Recent recent{-1, 0.0};
  if (live >= 2 && !tie) {
    const double lag = std::chrono::duration<double>(arrivals[latest] - earliest).count();
    RankLag& l = totals_[latest];
    ++l.timesLast;
    lagSums_[latest] += lag;
    l.meanLagSeconds = lagSums_[latest] / static_cast<double>(l.timesLast);
    if (lag > l.maxLagSeconds) l.maxLagSeconds = lag;
    if (lag > marginSeconds_) recent = {latest, lag};
  }
  recent_.push_back(recent);
  while (recent_.size() > static_cast<size_t>(window_)) recent_.pop_front();
}

StragglerReport StragglerTracker::report() const {
  return StragglerReport{totals_};
}

std::string StragglerTracker::namedStraggler() {
  if (recent_.size() < static_cast<size_t>(window_)) return "";
  std::vector<int> count(size_, 0);
  std::vector<double> lagSum(size_, 0.0);
  for (const Recent& r : recent_) {
    if (r.last < 0) continue;
    ++count[r.last];
    lagSum[r.last] += r.lag;
  }
  for (int r = 0; r < size_; ++r) {
    if (2 * count[r] <= window_) continue;
    if (namedAt_[r] >= 0 && recorded_ - namedAt_[r] < window_) continue;
    namedAt_[r] = recorded_;
    std::ostringstream os;
    os << "straggler: rank " << r << " arrived last by " << std::fixed
       << std::setprecision(1) << lagSum[r] / count[r] * 1000.0 << " ms on average in "
       << count[r] << " of the last " << window_ << " operations";
    return os.str();
  }
  return "";
}

}  // namespace kolo::runtime
