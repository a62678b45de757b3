// The caller's side of one operation submitted to the runtime.
//
// Contract
// - Created by Runtime::enqueue; completed exactly once by the background
//   thread, with success or an error (kolo::Error).
// - poll() never blocks; wait() blocks until completion and rethrows the
//   error; both may be called from any thread, any number of times.
// - A handle made with the runtime's queue rings it (SubmissionQueue::ring)
//   when wait() is about to block: a caller that waits has nothing more to
//   submit until the wait ends, so an open gathering window may close.
// - onDone(fn) runs fn exactly once when the handle completes: on the
//   completing (runtime) thread right after completion, or at once on the
//   caller's thread when it had completed already. One callback per handle.
//   It must be quick and must not wait on another handle (it runs on the
//   thread that completes them); it may drop the last reference to the
//   handle.
// - For operations whose output size is only known after negotiation
//   (allgather, alltoall with varying splits), the result bytes live in the
//   handle (output()); otherwise the caller's output buffer holds the result
//   once wait() returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kolo::collectives::cuda {
class DeviceEntry;
}

namespace kolo::runtime {

class SubmissionQueue;

class Handle {
 public:
  explicit Handle(std::string name, std::shared_ptr<SubmissionQueue> queue = nullptr)
      : name_(std::make_shared<const std::string>(std::move(name))),
        queue_(std::move(queue)) {}
  // Shares the name (the runtime's interned copy: no allocation per
  // operation).
  Handle(std::shared_ptr<const std::string> name, std::shared_ptr<SubmissionQueue> queue)
      : name_(std::move(name)), queue_(std::move(queue)) {}

  const std::string& name() const { return *name_; }

  bool poll() const;
  // Throws the operation's error.
  void wait() const;

  // Throws kolo::Error (invalid argument) when a callback was set before.
  void onDone(std::function<void()> fn);

  // Set by the runtime before complete(): result bytes and shape owned by
  // the handle (allgather, alltoall).
  const std::vector<uint8_t>& output() const { return output_; }
  const std::vector<int64_t>& outputShape() const { return outputShape_; }
  std::vector<uint8_t>& mutableOutput() { return output_; }
  void setOutputShape(std::vector<int64_t> shape) { outputShape_ = std::move(shape); }

  // CUDA device memory (OpSpec::onDevice): the entry holding the events of
  // the caller's stream (inputs ready) and kolo's (outputs written); set by
  // Runtime::enqueue, null for host memory.
  const std::shared_ptr<collectives::cuda::DeviceEntry>& deviceEntry() const {
    return device_;
  }
  void setDeviceEntry(std::shared_ptr<collectives::cuda::DeviceEntry> entry) {
    device_ = std::move(entry);
  }

  // Completion (background thread). The first call wins; later calls are
  // ignored.
  void complete();
  void fail(std::exception_ptr error);

 private:
  void finish(std::exception_ptr error);

  const std::shared_ptr<const std::string> name_;  // never null
  const std::shared_ptr<SubmissionQueue> queue_;   // rung by wait(); may be null
  // kPending -> kClaimed (one completer won) -> kDone (error_ is set; the
  // release store publishes it). A waiter adds kWaiter to a pending or
  // claimed state before it blocks on the atomic itself (a futex); the
  // completer wakes waiters only when that bit was set, so completing a
  // handle nobody waits on costs no system call, and there is no lock or
  // condition variable per operation. onDone stores the callback first and
  // then adds kCallback the same way; the completer that finds the bit runs
  // it, and a registration that finds kDone runs it itself.
  static constexpr uint32_t kPending = 0, kClaimed = 1, kDone = 2, kWaiter = 4,
                            kCallback = 8, kFlags = kWaiter | kCallback;
  mutable std::atomic<uint32_t> state_{kPending};
  std::exception_ptr error_;
  std::function<void()> callback_;  // written once, before kCallback is set
  std::vector<uint8_t> output_;
  std::vector<int64_t> outputShape_;
  std::shared_ptr<collectives::cuda::DeviceEntry> device_;
};

using HandlePtr = std::shared_ptr<Handle>;

}  // namespace kolo::runtime
