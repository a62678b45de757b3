#include "common/heartbeat_schedule.h"

#include <algorithm>

namespace kolo {

HeartbeatSchedule::Clock::duration HeartbeatSchedule::intervalFor(
    std::chrono::milliseconds timeout) {
  return std::clamp<Clock::duration>(timeout / 4, std::chrono::milliseconds(50),
                                     std::chrono::milliseconds(1000));
}

HeartbeatSchedule::HeartbeatSchedule(std::chrono::milliseconds timeout, int peers,
                                     Clock::time_point now)
    : timeout_(timeout),
      interval_(intervalFor(timeout)),
      lastRound_(now),
      lastHeard_(static_cast<size_t>(std::max(peers, 0)), now) {}

void HeartbeatSchedule::restart(Clock::time_point now) {
  lastRound_ = now;
  std::fill(lastHeard_.begin(), lastHeard_.end(), now);
}

bool HeartbeatSchedule::takeRound(Clock::time_point now) {
  if (now - lastRound_ < interval_) return false;
  lastRound_ = now;
  return true;
}

}  // namespace kolo
