// When a transport sends heartbeats and when a peer counts as silent.
//
// A rank that waits (a transport's idle()) sends a heartbeat round, one
// empty message to every linked peer, every interval(): its timeout / 4,
// kept within [50 ms, 1 s], so a peer blocked on it hears from it several
// times per timeout. A peer is silent when neither data nor a heartbeat
// came from it for a given time; a wait on a peer times out only when the
// peer has been silent for the timeout (deadline()).
//
// Used by the tcp and mpi transports, and by the shm transport for its
// pulses (a peer's pulse that moved counts as heard; no rounds are sent).
// Not thread-safe: the owner calls it
// under its own lock (or from its one progress thread). Time is passed in,
// so tests drive it without sleeping.
#pragma once

#include <chrono>
#include <vector>

namespace kolo {

class HeartbeatSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  // The interval for a transport timeout: timeout / 4 within [50 ms, 1 s].
  static Clock::duration intervalFor(std::chrono::milliseconds timeout);

  // `peers` ranks (0..peers-1), each heard at `now`; the first round is
  // due one interval after `now`.
  HeartbeatSchedule(std::chrono::milliseconds timeout, int peers,
                    Clock::time_point now = Clock::now());

  // Every peer heard at `now`, the next round one interval later (a
  // transport whose links are set up after construction).
  void restart(Clock::time_point now);

  Clock::duration interval() const { return interval_; }
  // When the next heartbeat round is due.
  Clock::time_point nextDue() const { return lastRound_ + interval_; }
  // True when a round is due at `now`; the caller sends it, and the next
  // one is due one interval after `now`.
  bool takeRound(Clock::time_point now);

  // Data or a heartbeat came from `peer` (in [0, peers)) at `now`.
  void heard(int peer, Clock::time_point now) { lastHeard_[peer] = now; }
  Clock::time_point lastHeard(int peer) const { return lastHeard_[peer]; }
  // Whether nothing came from `peer` for at least `d` before `now`.
  bool silentFor(int peer, Clock::duration d, Clock::time_point now) const {
    return now - lastHeard_[peer] >= d;
  }
  // When `peer` has been silent for the whole timeout unless it is heard
  // from before.
  Clock::time_point deadline(int peer) const { return lastHeard_[peer] + timeout_; }

 private:
  Clock::duration timeout_;
  Clock::duration interval_;
  Clock::time_point lastRound_;
  std::vector<Clock::time_point> lastHeard_;
};

}  // namespace kolo
