// Runs a communicator's operations one at a time, in submission order.
//
// Async submissions go to a worker thread (started on first use) and return
// a Work. A blocking call waits until everything submitted before it has run
// and then runs on the caller's thread (no thread hand-off on the latency
// path). Errors cross threads as std::exception_ptr: Work::wait() rethrows.
//
// hold() reserves the queue for the calling thread (runtime/
// agreed_scope.h): it waits like a blocking call, then, until release(),
// that thread's blocking calls run at once and every other thread's calls
// and the submitted work wait. A thread that holds must not wait for work
// it submits meanwhile (it would run only after release()).
//
// Thread safety: all methods may be called from any thread. Destruction
// waits for queued operations to finish.
#pragma once

#include <kolo/communicator.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace kolo::api {

class OpQueue {
 public:
  OpQueue() = default;
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  void runBlocking(const std::function<void()>& op);
  // runBlocking when the queue is free now (nothing queued or running, or
  // the calling thread holds it); false, without running op, otherwise.
  bool tryRunBlocking(const std::function<void()>& op);
  std::shared_ptr<Work> submit(std::function<void()> op);
  void hold();
  void release();  // by the holding thread

 private:
  class Task;
  void workerLoop();

  std::mutex mu_;  // guards everything below
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool busy_ = false;  // an operation is executing (on any thread)
  bool stopping_ = false;
  std::thread::id holder_;  // the thread that holds (then busy_ too); none: {}
  std::thread worker_;
};

}  // namespace kolo::api
