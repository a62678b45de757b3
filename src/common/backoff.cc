#include "common/backoff.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KOLO_PAUSE() _mm_pause()
#else
#define KOLO_PAUSE() std::this_thread::yield()
#endif

namespace kolo {

namespace {

struct ThreadCap {
  bool set = false;
  std::chrono::microseconds spin{0};
  std::chrono::microseconds yield{0};
};
thread_local ThreadCap threadCap;

}  // namespace

Backoff::Backoff(std::chrono::microseconds spin, std::chrono::microseconds yield)
    : spin_(threadCap.set ? std::min(spin, threadCap.spin) : spin),
      yield_(threadCap.set ? std::min(yield, threadCap.yield) : yield) {}

Backoff::WaitCap::WaitCap(std::chrono::microseconds spin,
                          std::chrono::microseconds yield) {
  threadCap = {true, spin, yield};
}

Backoff::WaitCap::~WaitCap() {
  threadCap = {};
}

bool Backoff::idle() {
  if (!started_) {
    started_ = true;
    start_ = Clock::now();
    sleeps_ = 0;
  }
  auto waited = Clock::now() - start_;
  if (waited < spin_) {
    // A few pauses only: on recent cores one pause is ~60 cycles, and the
    // condition should be re-checked soon after the peer's write lands.
    for (int i = 0; i < 2; ++i) KOLO_PAUSE();
    return false;
  }
  if (waited < spin_ + yield_) {
    sched_yield();
    return false;
  }
  sleeps_ = std::min<uint32_t>(sleeps_ + 1, 50);
  return true;
}

// 20 us, 40 us, ... up to 1 ms.
std::chrono::microseconds Backoff::sleepHint() const {
  return std::chrono::microseconds(20 * std::max<uint32_t>(sleeps_, 1));
}

std::chrono::microseconds Backoff::spinFor(int64_t configuredMicros, int ranksOnHost) {
  static const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  if (ranksOnHost > cores) return std::chrono::microseconds(2);
  return std::chrono::microseconds(configuredMicros);
}

}  // namespace kolo
