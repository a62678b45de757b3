// The device operations the CUDA IPC protocol (ipc_group.h) is written
// against: exporting and mapping memory between processes, interprocess
// events, copies and the fan-in / fan-out reduction, all stream-ordered.
// Plain C++ (no CUDA header): streams and events are opaque pointers.
//
// Two implementations:
// - the CUDA one (collectives/cuda/ipc_device_cuda.cc, makeCudaIpcDevice):
//   cudaIpcGetMemHandle / cudaIpcOpenMemHandle, cudaEventInterprocess
//   events, cudaMemcpyAsync and the reduceToMany kernel on one device;
// - the host double of the tests (tests/support/ipc_host_device.h):
//   "device memory" in POSIX shared memory, events as counters in shared
//   memory, a stream as a worker thread, so that the real protocol runs
//   between real processes on a machine without a GPU.
//
// Contract
// - Every call throws kolo::Error (kInternal, naming the operation and the
//   device error) on failure, except where a bool answers "cannot".
// - Stream order as CUDA's: copy/reduce/record/streamWait enqueue work on
//   `stream` and return; streamWait makes later work on `stream` wait for
//   the event's latest record enqueued before the call (cudaStreamWaitEvent
//   semantics); query answers whether that latest record has run.
// - An object serves one device of this process and is used by one thread
//   at a time.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kolo::cuda_ipc {

// An exported memory or event handle (cudaIpcMemHandle_t and
// cudaIpcEventHandle_t are 64 bytes), copied between processes as bytes.
struct Handle {
  static constexpr size_t kBytes = 64;
  uint8_t bytes[kBytes];
};

// Where a pointer lies: its allocation's base and size, and the id the
// device gives the allocation (unique within the process's lifetime, never
// reused: CU_POINTER_ATTRIBUTE_BUFFER_ID).
struct Allocation {
  const void* base = nullptr;
  size_t bytes = 0;
  uint64_t id = 0;
};

class IpcDevice {
 public:
  using Event = void*;

  virtual ~IpcDevice() = default;

  // The device ordinal in this process.
  virtual int device() const = 0;

  // The allocation containing p; false (with `why`) when p is not memory of
  // this device.
  virtual bool locate(const void* p, Allocation* out, std::string* why) = 0;
  // The handle of the allocation at `base`; false (with `why`) when it
  // cannot be exported (e.g. virtual memory management allocations).
  virtual bool exportMemory(const void* base, Handle* out, std::string* why) = 0;
  // Maps a peer's exported allocation; returns its base in this process.
  virtual void* openMemory(const Handle& handle) = 0;
  // Unmaps what openMemory returned; never throws.
  virtual void closeMemory(void* base) noexcept = 0;
  // Device memory this process owns, always exportable; release frees it.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;

  // An interprocess event (no timing), its handle, a peer's event opened
  // from its handle; destroyEvent releases either kind.
  virtual Event createEvent() = 0;
  virtual Handle exportEvent(Event event) = 0;
  virtual Event openEvent(const Handle& handle) = 0;
  virtual void destroyEvent(Event event) noexcept = 0;
  virtual void record(Event event, void* stream) = 0;
  virtual void streamWait(void* stream, Event event) = 0;
  // True once the latest record has run.
  virtual bool query(Event event) = 0;

  // Stream-ordered work. copy: `bytes` from src to dst (either may be a
  // peer's mapping). reduce: dsts[j][i] = srcs[0][i] op ... op srcs[n-1][i]
  // for every j, kAverage divided by n (collectives/cuda/device_reduce.h,
  // reduceToMany).
  virtual void copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void reduce(void* const* dsts, int m, const void* const* srcs, int n,
                      size_t count, DataType dtype, ReduceOp op, void* stream) = 0;
};

}  // namespace kolo::cuda_ipc
