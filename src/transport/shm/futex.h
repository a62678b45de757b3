// Futex waits on words in shared memory, between processes: the sleeping
// phase of the shared-memory waits (ShmTransport::idle, ShmGroup::waitOn).
//
// Contract
// - futexWait(word, expected, max): sleeps while *word == expected, at most
//   `max`; returns at once when the word already differs, on a wake, on a
//   signal, or after `max`. Callers re-check their condition in a loop.
// - futexWake(word): wakes every thread sleeping on `word` in any process
//   that maps it (FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word lives in
//   a MAP_SHARED segment).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace kolo::shm {

inline void futexWait(std::atomic<uint32_t>* word, uint32_t expected,
                      std::chrono::microseconds max) {
  timespec ts;
  ts.tv_sec = max.count() / 1000000;
  ts.tv_nsec = (max.count() % 1000000) * 1000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts,
          nullptr, 0);
}

inline void futexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace kolo::shm
