// A background pipeline of ready batches: one thread calls produce(0),
// produce(1), ... produce(count - 1) and keeps at most `depth` results
// waiting in a bounded queue; next() hands them out in order.
//
// Contract
// - next() is called from one consumer thread; it blocks until the next
//   batch is ready and returns std::nullopt after the last one. An
//   exception thrown by produce(i) is rethrown by the next() that would
//   have returned batch i (the batches before it are delivered first), and
//   the pipeline ends there.
// - The producer never runs more than `depth` batches ahead, so memory is
//   bounded; produce runs on the background thread only, so it must be
//   safe to call concurrently with whatever the consumer does (e.g. an
//   ImageFolder's const methods).
// - The destructor stops the producer (after the batch it is making) and
//   joins it, whether or not every batch was consumed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace kolo::data {

template <typename Batch>
class Prefetcher {
 public:
  Prefetcher(int64_t count, std::function<Batch(int64_t)> produce, size_t depth = 4)
      : count_(count), produce_(std::move(produce)), depth_(depth == 0 ? 1 : depth) {
    thread_ = std::thread([this] { run(); });
  }

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  std::optional<Batch> next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || error_ || finished_; });
    if (!ready_.empty()) {
      Batch b = std::move(ready_.front());
      ready_.pop_front();
      cv_.notify_all();  // room for the producer
      return b;
    }
    if (error_) {
      std::exception_ptr e = std::exchange(error_, nullptr);
      std::rethrow_exception(e);
    }
    return std::nullopt;  // finished (or the error was already thrown)
  }

 private:
  void run() {
    for (int64_t i = 0; i < count_; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || ready_.size() < depth_; });
        if (stop_) break;
      }
      try {
        Batch b = produce_(i);  // outside the lock: the consumer goes on
        std::lock_guard<std::mutex> lock(mu_);
        ready_.push_back(std::move(b));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        break;
      }
      cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
  }

  const int64_t count_;
  const std::function<Batch(int64_t)> produce_;
  const size_t depth_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool finished_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace kolo::data
