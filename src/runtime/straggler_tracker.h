// Which rank arrives last for each operation, and by how much.
//
// The negotiation sees, in every cycle, which ranks have submitted which
// operation; when an operation becomes ready the runtime passes, per rank,
// the local time of the cycle in which that rank's submission was first
// seen. The last rank's lag is its arrival minus the earliest arrival.
// (All ranks see the same cycles, so the figures agree across ranks up to
// the cycles' own timing.)
//
// Contract
// - record(arrivals): one ready operation; arrivals.size() == size, and
//   arrivals[r] is rank r's arrival, or kAbsent for a rank that did not
//   take part (joined). The rank with the latest arrival is "last", its
//   lag the latest minus the earliest arrival; a tie at the latest arrival,
//   or fewer than two participants, makes nobody last.
// - report(): per rank, operations observed, times last, mean and max lag
//   when last (seconds).
// - namedStraggler(): once `window` operations have been recorded, a log
//   line when, among the last `window` of them, one rank was last by more
//   than `marginSeconds` in more than half, e.g. "straggler: rank 3 arrived
//   last by 12.5 ms on average in 87 of the last 100 operations" (the
//   average over those operations); a rank named is not named again before
//   `window` more operations are recorded. Empty otherwise.
// - Not thread-safe; report() copies are safe to hand to other threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

namespace kolo::runtime {

struct RankLag {
  int64_t operations = 0;  // recorded operations this rank took part in
  int64_t timesLast = 0;
  double meanLagSeconds = 0;  // over the times it was last
  double maxLagSeconds = 0;
};

struct StragglerReport {
  std::vector<RankLag> ranks;  // index = rank in the team
};

class StragglerTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // An arrival for a rank that did not take part in the operation.
  static constexpr Clock::time_point kAbsent = Clock::time_point::min();

  StragglerTracker(int size, double marginSeconds, int window = 100);

  void record(std::span<const Clock::time_point> arrivals);
  StragglerReport report() const;
  std::string namedStraggler();

 private:
  int size_;
  double marginSeconds_;
  int window_;
  std::vector<RankLag> totals_;
  std::vector<double> lagSums_;
  struct Recent {
    int last;  // -1: no single last rank beyond the margin
    double lag;
  };
  std::deque<Recent> recent_;
  std::vector<int64_t> namedAt_;  // recorded_ when each rank was last named; -1: never
  int64_t recorded_ = 0;
};

}  // namespace kolo::runtime
