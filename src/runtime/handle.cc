#include "runtime/handle.h"

namespace kolo::runtime {

bool Handle::poll() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Handle::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void Handle::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
  }
  cv_.notify_all();
}

void Handle::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace kolo::runtime
