// A host double of cuda_ipc::IpcDevice (src/transport/cuda_ipc/
// ipc_device.h), FOR TESTS ONLY: it lets the real CUDA IPC protocol
// (IpcGroup, IpcCollectives) run between real processes on a machine
// without a GPU.
//
// - "Device memory": POSIX shared-memory segments, one per allocation
//   (named /kolo-ipcdbl-<pid>-<n>); the exported handle is the segment's
//   name, so a peer process maps the same bytes. allocateUnexportable()
//   gives plain heap memory whose export fails, as cudaIpcGetMemHandle
//   fails for a VMM allocation.
// - Events: two counters in a shared-memory segment: `recorded` (bumped
//   when a record is enqueued) and `completed` (set when the stream runs
//   it). streamWait captures `recorded` at the call and makes the stream
//   wait until `completed` reaches it: cudaStreamWaitEvent's "latest
//   record at the time of the call".
// - A stream (HostStream): a worker thread running the enqueued work in
//   order, each item after a small random delay (so that a missing wait in
//   the protocol shows up as wrong data, not as luck).
// - reduce(): element_ops.h's fanInElement, the device kernel's own
//   per-element functions, on the host.
// - release() and destroyEvent() first let the streams this device has
//   seen finish what they hold (as cudaFree synchronises), for at most
//   200 ms; memory still in use then (a stream stuck on a dead peer) is
//   unmapped by the destructor. Streams must outlive these calls.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transport/cuda_ipc/ipc_device.h"

namespace kolo::test {

class HostStream {
 public:
  // `jitterMicros`: each item waits a random 0..jitterMicros first.
  explicit HostStream(int jitterMicros = 200);
  ~HostStream();  // cancels waits still pending, joins the worker

  void enqueue(std::function<void()> work);
  // Blocks until everything enqueued so far has run.
  void drain();
  // The same for at most `limit`; false when work is still pending.
  bool drainFor(std::chrono::milliseconds limit);
  // True once the stream is being destroyed (waits in work items give up).
  bool cancelled() const { return cancelled_.load(); }

 private:
  void run();

  int jitter_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  std::atomic<bool> cancelled_{false};
  std::thread worker_;
};

class IpcHostDevice final : public cuda_ipc::IpcDevice {
 public:
  IpcHostDevice() = default;
  ~IpcHostDevice() override;

  // Heap memory that locate() finds but exportMemory() refuses.
  void* allocateUnexportable(size_t bytes);

  int device() const override { return 0; }
  bool locate(const void* p, cuda_ipc::Allocation* out, std::string* why) override;
  bool exportMemory(const void* base, cuda_ipc::Handle* out, std::string* why) override;
  void* openMemory(const cuda_ipc::Handle& handle) override;
  void closeMemory(void* base) noexcept override;
  void* allocate(size_t bytes) override;
  void release(void* p) noexcept override;

  Event createEvent() override;
  cuda_ipc::Handle exportEvent(Event event) override;
  Event openEvent(const cuda_ipc::Handle& handle) override;
  void destroyEvent(Event event) noexcept override;
  void record(Event event, void* stream) override;
  void streamWait(void* stream, Event event) override;
  bool query(Event event) override;

  void copy(void* dst, const void* src, size_t bytes, void* stream) override;
  void reduce(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
              DataType dtype, ReduceOp op, void* stream) override;

  // Mappings opened and not closed (tests of the cache).
  size_t openMappings() const { return opened_.size(); }

 private:
  struct Block {
    std::string name;  // empty: not exportable
    size_t bytes = 0;
    uint64_t id = 0;
    bool owned = true;  // allocated here (else a peer's mapping)
  };
  void* mapSegment(const std::string& name, bool create, size_t bytes);
  // True when every stream seen finished its work (within 200 ms).
  bool settle();
  HostStream* seen(void* stream);

  std::map<const uint8_t*, Block> blocks_;  // by base: this process's memory
  std::map<void*, size_t> opened_;          // peers' mappings: base -> bytes
  std::map<void*, std::string> events_;     // own events: pointer -> segment name
  std::map<void*, bool> openedEvents_;      // peers' events
  uint64_t nextId_ = 0;
  std::set<HostStream*> streams_;
  std::vector<std::pair<void*, size_t>> deferred_;  // unmapped by the destructor
};

// Removes what processes `pid` left in /dev/shm (a killed rank's segments).
void removeHostDeviceSegments(int pid);

}  // namespace kolo::test
