#include "runtime/handle.h"

#include "common/check.h"
#include "runtime/submission_queue.h"

namespace kolo::runtime {

bool Handle::poll() const {
  return state_.load(std::memory_order_acquire) == kDone;
}

void Handle::wait() const {
  uint32_t s = state_.load(std::memory_order_acquire);
  if (s != kDone && queue_) queue_->ring();
  while (s != kDone) {
    if (!(s & kWaiter)) {
      // Announce the waiter; on failure `s` is the newer state: look again.
      if (!state_.compare_exchange_weak(s, s | kWaiter, std::memory_order_acquire)) {
        continue;
      }
      s |= kWaiter;
    }
    state_.wait(s, std::memory_order_acquire);
    s = state_.load(std::memory_order_acquire);
  }
  if (error_) std::rethrow_exception(error_);
}

void Handle::onDone(std::function<void()> fn) {
  uint32_t s = state_.load(std::memory_order_acquire);
  if (s & kCallback) {
    throw Error(ErrorCode::kInvalidArgument,
                "operation '" + name() + "' already has a completion callback");
  }
  callback_ = std::move(fn);
  while (s != kDone) {
    // Publish the callback (release) with the bit; on failure `s` is the
    // newer state: look again.
    if (state_.compare_exchange_weak(s, s | kCallback, std::memory_order_acq_rel)) return;
  }
  auto run = std::move(callback_);
  run();  // completed before the bit could be set
}

void Handle::complete() {
  finish(nullptr);
}

void Handle::fail(std::exception_ptr error) {
  finish(std::move(error));
}

void Handle::finish(std::exception_ptr error) {
  // Claim: pending (with or without a waiter) -> claimed, keeping the bit.
  uint32_t s = state_.load(std::memory_order_acquire);
  do {
    if ((s & ~kFlags) != kPending) return;  // completed before
  } while (!state_.compare_exchange_weak(s, (s & kFlags) | kClaimed,
                                         std::memory_order_acq_rel));
  error_ = std::move(error);
  const uint32_t before = state_.exchange(kDone, std::memory_order_acq_rel);
  if (before & kWaiter) state_.notify_all();
  if (before & kCallback) {
    // The callback may release the last reference to this handle.
    auto run = std::move(callback_);
    run();
  }
}

}  // namespace kolo::runtime
