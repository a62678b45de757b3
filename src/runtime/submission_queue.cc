#include "runtime/submission_queue.h"

#include <algorithm>

namespace kolo::runtime {

// Only a consumer blocked in waitUntil(.., wakeOnItem = true) is notified:
// the others wake on their deadline, wake() or close() anyway.
bool SubmissionQueue::push(Submission item) {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    items_.push_back(std::move(item));
    ++pushed_;
    notify = waitingForItem_;
    if (notify) openWindowLocked();
  }
  if (notify) cv_.notify_all();
  return true;
}

bool SubmissionQueue::pushAll(std::vector<Submission> items) {
  bool notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    for (auto& item : items) items_.push_back(std::move(item));
    pushed_ += items.size();
    notify = waitingForItem_;
    if (notify) openWindowLocked();
  }
  if (notify) cv_.notify_all();
  return true;
}

std::vector<Submission> SubmissionQueue::drain() {
  std::vector<Submission> out;
  drainInto(out);
  return out;
}

void SubmissionQueue::drainInto(std::vector<Submission>& out) {
  out.clear();
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(items_);
  closeWindowLocked();
}

bool SubmissionQueue::waitUntil(Clock::time_point deadline, bool wakeOnItem) {
  std::unique_lock<std::mutex> lock(mu_);
  waitingForItem_ = wakeOnItem;
  cv_.wait_until(lock, deadline,
                 [&] { return woken_ || closed_ || (wakeOnItem && !items_.empty()); });
  waitingForItem_ = false;
  const bool items = !woken_ && !closed_ && !items_.empty();
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
  return items_.size();
}

}  // namespace kolo::runtime
