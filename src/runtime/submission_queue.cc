#include "runtime/submission_queue.h"

#include <algorithm>

namespace kolo::runtime {

Submission& SubmissionQueue::slotLocked() {
  if (count_ == items_.size()) items_.emplace_back();
  return items_[count_++];
}

// Only a consumer blocked in waitUntil(.., wakeOnItem = true) is notified
// (the others wake on their deadline, wake() or close() anyway), and only
// by the first push: the pushes of a burst that come before the consumer
// runs again find nobody left to wake.
bool SubmissionQueue::pushedLocked(size_t n) {
  pushed_ += n;
  if (!waitingForItem_) return false;
  waitingForItem_ = false;
  openWindowLocked();
  return true;
}

bool SubmissionQueue::push(Submission item) {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    slotLocked() = std::move(item);
    notify = pushedLocked(1);
  }
  if (notify) cv_.notify_all();
  return true;
}

bool SubmissionQueue::push(const OpRequest& request, HandlePtr handle, uint32_t nameId) {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    Submission& s = slotLocked();
    // Assignments into the old element's strings and vectors.
    s.request.spec = request.spec;
    s.request.input = request.input;
    s.request.output = request.output;
    s.request.splits = request.splits;
    s.handle = std::move(handle);
    s.join = false;
    s.nameId = nameId;
    notify = pushedLocked(1);
  }
  if (notify) cv_.notify_all();
  return true;
}

bool SubmissionQueue::pushAll(std::vector<Submission> items) {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    for (auto& item : items) slotLocked() = std::move(item);
    notify = pushedLocked(items.size());
  }
  if (notify) cv_.notify_all();
  return true;
}

std::vector<Submission> SubmissionQueue::drain() {
  std::vector<Submission> out;
  out.resize(drainInto(out));
  return out;
}

size_t SubmissionQueue::drainInto(std::vector<Submission>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(items_);
  const size_t n = count_;
  count_ = 0;
  closeWindowLocked();
  return n;
}

bool SubmissionQueue::waitUntil(Clock::time_point deadline, bool wakeOnItem) {
  std::unique_lock<std::mutex> lock(mu_);
  waitingForItem_ = wakeOnItem;
  cv_.wait_until(lock, deadline,
                 [&] { return woken_ || closed_ || (wakeOnItem && count_ > 0); });
  waitingForItem_ = false;
  const bool items = !woken_ && !closed_ && count_ > 0;
  woken_ = false;
  if (items && wakeOnItem) openWindowLocked();
  return items;
}

void SubmissionQueue::waitQuiet(Clock::duration quiet, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!woken_ && !closed_) {
    const uint64_t before = pushed_;
    const auto until = std::min(Clock::now() + quiet, deadline);
    cv_.wait_until(lock, until, [&] { return woken_ || closed_ || rung_; });
    if (rung_ || pushed_ == before || Clock::now() >= deadline) break;
  }
  woken_ = false;
  closeWindowLocked();
}

void SubmissionQueue::openWindowLocked() {
  gathering_.store(true, std::memory_order_release);
}

void SubmissionQueue::closeWindowLocked() {
  gathering_.store(false, std::memory_order_relaxed);
  rung_ = false;
}

void SubmissionQueue::ring() {
  if (!gathering_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gathering_.load(std::memory_order_relaxed)) return;
    rung_ = true;
  }
  cv_.notify_all();
}

void SubmissionQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void SubmissionQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool SubmissionQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

size_t SubmissionQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

}  // namespace kolo::runtime
