// How a rank waits for something another process will do.
//
// Busy-polling gives the lowest latency when every rank has its own core,
// but starves the peer it waits for when ranks outnumber cores. Backoff
// polls with a pause instruction for `spin` time, then yields the core for
// a while (sched_yield), then sleeps in growing steps up to 1 ms. Call
// idle() each time a poll found nothing and reset() after progress.
#pragma once

#include <chrono>
#include <cstdint>

namespace kolo {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;

  // yield: how long the yield phase lasts; zero for callers whose own wait
  // (poll on sockets) wakes up on the event anyway.
  // Both phases are cut to this thread's WaitCap, if it has one.
  explicit Backoff(std::chrono::microseconds spin = std::chrono::microseconds(100),
                   std::chrono::microseconds yield = std::chrono::microseconds(2000));

  void reset() { started_ = false; }

  // Spins or yields a little and returns false; once past the spin and
  // yield phases, returns true without waiting: the caller should then block
  // in its own event wait (poll, sleep) for up to sleepHint().
  bool idle();
  std::chrono::microseconds sleepHint() const;

  // Time since the first idle() after the last reset().
  Clock::duration idleFor() const {
    return started_ ? Clock::now() - start_ : Clock::duration::zero();
  }

  // The spin budget for a host with `ranksOnHost` ranks: the configured
  // value when ranks fit on the cores, else a short one.
  static std::chrono::microseconds spinFor(int64_t configuredMicros, int ranksOnHost);

  // While it lives, every Backoff made on this thread spins for at most
  // `spin` and yields for at most `yield`, then sleeps (the callers sleep
  // on a futex or in poll, woken by the peer). For a thread that shares
  // its rank's cores with the thread doing the real work, such as the
  // runtime's background thread: what it spins the training thread loses.
  // Not nestable: a second WaitCap on the same thread replaces the first
  // until it ends.
  class WaitCap {
   public:
    WaitCap(std::chrono::microseconds spin, std::chrono::microseconds yield);
    ~WaitCap();
    WaitCap(const WaitCap&) = delete;
    WaitCap& operator=(const WaitCap&) = delete;
  };

 private:
  std::chrono::microseconds spin_;
  std::chrono::microseconds yield_;
  bool started_ = false;
  Clock::time_point start_;
  uint32_t sleeps_ = 0;
};

}  // namespace kolo
