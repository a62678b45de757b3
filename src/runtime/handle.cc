#include "runtime/handle.h"

namespace kolo::runtime {

bool Handle::poll() const {
  return state_.load(std::memory_order_acquire) == kDone;
}

void Handle::wait() const {
  uint32_t s = state_.load(std::memory_order_acquire);
  while (s != kDone) {
    state_.wait(s, std::memory_order_acquire);
    s = state_.load(std::memory_order_acquire);
  }
  if (error_) std::rethrow_exception(error_);
}

void Handle::complete() {
  finish(nullptr);
}

void Handle::fail(std::exception_ptr error) {
  finish(std::move(error));
}

void Handle::finish(std::exception_ptr error) {
  uint32_t expected = kPending;
  if (!state_.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
    return;  // completed before
  }
  error_ = std::move(error);
  state_.store(kDone, std::memory_order_release);
  state_.notify_all();
}

}  // namespace kolo::runtime
