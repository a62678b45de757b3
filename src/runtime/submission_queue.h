// The queue from callers' threads to the runtime's background thread.
//
// Contract
// - push()/pushAll() are thread-safe and never block on other ranks;
//   pushAll() queues its items atomically (a group arrives in one drain).
//   They return false, queuing nothing, once the queue is closed.
//   push(request, handle, nameId) copies the request into storage that a
//   drained submission left behind, reusing its strings' and vectors'
//   memory, so a steady stream of submissions under the same names and
//   shapes allocates nothing here.
// - drain() takes everything queued, in push order. drainInto(out) does the
//   same without allocating: it swaps the queue's storage with `out` and
//   returns how many of out's first elements are the drained items; the
//   elements after them are storage for later pushes (consumed items are
//   left in place for the same reason: move the handle out, leave the
//   request).
// - waitUntil(deadline, wakeOnItem): blocks until the deadline, wake() or
//   close(), or, with wakeOnItem, until something is queued (at once when
//   something already is). A wake() before the call makes it return at
//   once; the wake-up is consumed. Returns true when items are queued and
//   neither wake() nor close() ended the wait.
// - waitQuiet(quiet, deadline): the gathering window. Blocks while items
//   keep arriving: returns once nothing was pushed for `quiet`, at the
//   deadline, on ring(), or on wake() (consumed) or close(). Pushes do not
//   wake it (it sleeps `quiet` at a time), so a burst of pushes costs no
//   wake-ups.
// - ring(): a caller is about to block on a handle. The window is open from
//   the push that ends an idle waitUntil(.., true) until waitQuiet returns
//   or the next drain; a ring inside it ends waitQuiet at once (or makes the
//   next waitQuiet return at once); outside it a ring does nothing. A ring
//   takes no lock while no window is open.
// - close(): later pushes fail; waiters return.
// - All methods are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/handle.h"
#include "runtime/op_spec.h"

namespace kolo::runtime {

// One operation as a caller submits it.
struct OpRequest {
  OpSpec spec;
  const void* input = nullptr;  // spec.bytes() bytes (barrier: none)
  void* output = nullptr;       // allreduce/broadcast/reducescatter: caller's
                                // buffer (may equal input); allgather and
                                // alltoall: null, the handle holds the result
  // alltoall: elements of the first dimension sent to each rank (empty:
  // equal split); the handle's outputShape gives what arrived.
  std::vector<int64_t> splits;
  // CUDA device memory: input and output are device pointers, spec.onDevice
  // is set, and this entry (collectives/cuda/device_staging.h) holds the
  // ready event recorded on the caller's stream. Null for host memory. Not
  // copied into the queue: Runtime::enqueue hands it to the handle.
  std::shared_ptr<collectives::cuda::DeviceEntry> device;
};

struct Submission {
  OpRequest request;
  HandlePtr handle;
  bool join = false;    // the join() marker (request unused)
  uint32_t nameId = 0;  // the runtime's interned id of request.spec.name
};

// Cache-line aligned: made by make_shared, its reference counts (which
// every handle's creation and destruction updates, on the caller's thread)
// then sit on a line of their own, not on the line of the lock and
// counters that the background thread keeps taking.
class alignas(64) SubmissionQueue {
 public:
  using Clock = std::chrono::steady_clock;

  bool push(Submission item);
  bool push(const OpRequest& request, HandlePtr handle, uint32_t nameId);
  bool pushAll(std::vector<Submission> items);
  std::vector<Submission> drain();
  size_t drainInto(std::vector<Submission>& out);
  bool waitUntil(Clock::time_point deadline, bool wakeOnItem);
  void waitQuiet(Clock::duration quiet, Clock::time_point deadline);
  void wake();
  void ring();
  void close();
  bool closed() const;
  size_t size() const;

 private:
  // The gathering window (see ring()); both need mu_ held.
  void openWindowLocked();
  void closeWindowLocked();
  // The next free element of items_ (count_ grows by one); mu_ held.
  Submission& slotLocked();
  // After a push of `n` items: notifies a consumer waiting for one; mu_ held
  // (returns whether to notify after unlocking).
  bool pushedLocked(size_t n);

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  // Items [0, count_) are queued; the rest is storage left by drained ones.
  std::vector<Submission> items_;
  size_t count_ = 0;
  uint64_t pushed_ = 0;  // items ever pushed (waitQuiet)
  // A waitUntil(.., true) is blocked and no push has notified it yet (the
  // first push clears it and notifies).
  bool waitingForItem_ = false;
  // The gathering window is open (written under mu_; ring() reads it first
  // without the lock).
  std::atomic<bool> gathering_{false};
  bool rung_ = false;  // a ring() inside the open window
  bool woken_ = false;
  bool closed_ = false;
};

}  // namespace kolo::runtime
