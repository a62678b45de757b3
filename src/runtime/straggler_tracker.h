// Which rank arrives last for each operation, and by how much; and, rarely,
// a log line naming a rank that holds the job back.
//
// The negotiation sees, in every cycle, which ranks have submitted which
// operation; when an operation becomes ready the runtime passes, per rank,
// the local time of the cycle in which that rank's submission was first
// seen. The last rank's lag is its arrival minus the earliest arrival.
// (All ranks see the same cycles, so the figures agree across ranks up to
// the cycles' own timing.)
//
// Someone is always last, so being last says nothing by itself: the line
// names a rank only when its lag is large against the job's step time and
// persists for many steps. Steps come from the operations' names: a
// training step reduces each gradient once under the same name, so the
// time between two readinesses of one name is a step (docs/runtime.md,
// "Stragglers", gives the reasoning and the numbers).
//
// Contract
// - record(arrivals, name): one ready operation; arrivals.size() == size,
//   and arrivals[r] is rank r's arrival, or kAbsent for a rank that did not
//   take part (joined). The rank with the latest arrival is "last", its
//   lag the latest minus the earliest arrival; a tie at the latest arrival,
//   or fewer than two participants, makes nobody last. The operation's
//   time is its latest arrival (the cycle that made it ready); operations
//   are recorded in the order they became ready. An empty name takes part
//   in everything but the step clock.
// - report(): per rank, operations observed, times last, mean and max lag
//   when last (seconds); every recorded operation counts.
// - Steps: the tracker follows one name, the sentinel (the first named
//   operation recorded); each time the sentinel is recorded again, a step
//   ends and the next begins. A sentinel not seen again for `patience` is
//   given up (the step in progress is dropped) and the next named operation
//   becomes the sentinel; patience is the window (at least 1 s) and doubles
//   at each give-up (up to 16 windows), and is twice the last step (at
//   least the window) once the sentinel recurs, so a one-off name (a
//   broadcast at start-up) is replaced and steps longer than the window are
//   still measured.
// - The step time: the mean duration of the window's steps (below), the
//   step just ended included.
// - A step's straggler: the rank that was last in more than half of the
//   step's operations (with two participants or more) with a mean lag over
//   those that exceeds both options.marginSeconds and options.fraction x
//   the step time; none otherwise.
// - namedStraggler(now): a log line when the window (the most recent steps,
//   as many as cover options.windowSeconds and at least options.minSteps)
//   holds at least minSteps steps spanning at least windowSeconds, and one
//   rank was the straggler of more than half of them, e.g.
//   "straggler: rank 3 arrived last in 17 of the last 20 steps (21.4 s),
//   by 312.5 ms on average, 29% of a 1070.0 ms step"
//   (its mean lag over the steps it straggled, against the step time). At
//   most one line per options.intervalSeconds, measured with `now` (the
//   caller's clock: the runtime passes the cycle's start). Empty otherwise.
// - Cost: record() is O(size) per operation (one comparison of the name
//   with the sentinel's, no allocation once the sentinel is set);
//   namedStraggler() is O(1) unless a step ended since the last verdict,
//   then O(size). Memory: O(size) plus one entry per step of the window.
// - Not thread-safe; report() copies are safe to hand to other threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

  struct Options {
    double marginSeconds = 0.005;  // KOLO_STRAGGLER_MARGIN_MS / 1000
    double fraction = 0.25;        // KOLO_STRAGGLER_FRACTION
    double windowSeconds = 20;     // KOLO_STRAGGLER_WINDOW
    int minSteps = 10;             // steps the window holds at least
    double intervalSeconds = 60;   // KOLO_STRAGGLER_INTERVAL
  };

  StragglerTracker(int size, Options options);

  void record(std::span<const Clock::time_point> arrivals, std::string_view name = {});
  StragglerReport report() const;
  std::string namedStraggler(Clock::time_point now);

 private:
  // One finished step of the window.
  struct Step {
    Clock::time_point start, end;
    int straggler;      // -1: none
    double lagSeconds;  // the straggler's mean lag in this step
  };

  // record()'s parts.
  void addToTotals(int last, double lag);
  void advanceClock(std::string_view name, Clock::time_point t);
  void countInStep(int last, double lag);
  // The step clock.
  Clock::duration minPatience() const;  // the window, at least 1 s
  void adoptSentinel(std::string_view name, Clock::time_point t);
  void endStep(Clock::time_point end);
  void clearStep();
  int stepStraggler(double stepSeconds, double* lag) const;
  void pushStep(const Step& step);
  bool windowCovered() const;
  std::string line(int rank) const;

  int size_;
  Options options_;
  // Statistics of report().
  std::vector<RankLag> totals_;
  std::vector<double> lagSums_;

  // The step clock: the sentinel's name and last readiness (the start of
  // the step in progress); empty name: none.
  std::string sentinel_;
  Clock::time_point sentinelAt_{};
  Clock::duration patience_;

  // The step in progress: operations with two participants or more, and
  // per rank the times it was last and the sum of those lags; `touched_`
  // lists the ranks with a nonzero count, `top_` the one with the most.
  int64_t stepOps_ = 0;
  std::vector<int64_t> stepLast_;
  std::vector<double> stepLag_;
  std::vector<int> touched_;
  int top_ = -1;

  // The window of finished steps, and per rank the steps of the window it
  // straggled and the sum of its mean lags in those.
  std::deque<Step> steps_;
  std::vector<int64_t> windowCount_;
  std::vector<double> windowLag_;
  bool stepEnded_ = false;  // since the last verdict
  std::optional<Clock::time_point> lastLine_;
};

}  // namespace kolo::runtime
