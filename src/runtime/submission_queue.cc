#include "runtime/submission_queue.h"

namespace kolo::runtime {

bool SubmissionQueue::push(Submission item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    items_.push_back(std::move(item));
  }
  cv_.notify_all();
  return true;
}

bool SubmissionQueue::pushAll(std::vector<Submission> items) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    for (auto& item : items) items_.push_back(std::move(item));
  }
  cv_.notify_all();
  return true;
}

std::vector<Submission> SubmissionQueue::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Submission> out;
  out.swap(items_);
  return out;
}

void SubmissionQueue::waitUntil(Clock::time_point deadline, bool wakeOnItem) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline,
                 [&] { return woken_ || closed_ || (wakeOnItem && !items_.empty()); });
  woken_ = false;
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
