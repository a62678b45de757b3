#include "api/op_queue.h"

namespace kolo::api {

class OpQueue::Task : public Work {
 public:
  explicit Task(std::function<void()> op) : op_(std::move(op)) {}

  void run() {
    std::exception_ptr error;
    try {
      op_();
    } catch (...) {
      error = std::current_exception();
    }
    op_ = nullptr;  // release captured buffers/state
    std::lock_guard<std::mutex> lock(mu_);
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }

  void wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }

  bool test() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::function<void()> op_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

OpQueue::~OpQueue() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    changed_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void OpQueue::runBlocking(const std::function<void()>& op) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (holder_ == std::this_thread::get_id()) {
      lock.unlock();
      op();  // the holder's: the queue is reserved for it
      return;
    }
    changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
  }
  struct Release {
    OpQueue* q;
    ~Release() {
      std::lock_guard<std::mutex> lock(q->mu_);
      q->busy_ = false;
      q->changed_.notify_all();
    }
  } release{this};
  op();
}

bool OpQueue::tryRunBlocking(const std::function<void()>& op) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (holder_ != std::this_thread::get_id()) {
      if (!queue_.empty() || busy_) return false;
      busy_ = true;
    } else {
      lock.unlock();
      op();
      return true;
    }
  }
  struct Release {
    OpQueue* q;
    ~Release() {
      std::lock_guard<std::mutex> lock(q->mu_);
      q->busy_ = false;
      q->changed_.notify_all();
    }
  } release{this};
  op();
  return true;
}

void OpQueue::hold() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
  busy_ = true;
  holder_ = std::this_thread::get_id();
}

void OpQueue::release() {
  std::lock_guard<std::mutex> lock(mu_);
  holder_ = std::thread::id();
  busy_ = false;
  changed_.notify_all();
}

std::shared_ptr<Work> OpQueue::submit(std::function<void()> op) {
  auto task = std::make_shared<Task>(std::move(op));
  std::lock_guard<std::mutex> lock(mu_);
  if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  queue_.push_back(task);
  changed_.notify_all();
  return task;
}

void OpQueue::workerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] {
      return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty());
    });
    if (queue_.empty()) return;  // stopping
    auto task = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    task->run();
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace kolo::api
