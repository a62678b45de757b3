// Host staging of CUDA device memory (docs/gpu.md, "The host-staged path"):
// device tensors are copied into pinned host memory, the CPU collective
// runs there, and the results are copied back. Plain C++ (no CUDA header):
// events and streams are cudaEvent_t / cudaStream_t passed as void*.
//
// Contract
// - checkDevice(operation, device): returns when `device` is a CUDA device
//   this process can use; else throws Error(kInvalidArgument)
//   "<operation> on CUDA device memory: <cause>", the cause being a build
//   without CUDA ("this kolo build has no CUDA support ..."), no device
//   ("no CUDA device: <the runtime's reason>"), a negative ordinal or a
//   device that does not exist ("CUDA device 3 does not exist (1 devices)").
// - DeviceEntry::record(operation, device, stream), on the caller's thread at
//   submission: checkDevice, then records the entry's `ready` event on
//   `stream` (nullptr: the legacy default stream): the inputs are ready
//   when the work enqueued on the stream before the call has run. The entry
//   also owns a `done` event, recorded by the stager once the outputs are
//   written. The events are destroyed with the entry.
// - DeviceStager: kolo's side, used by one thread at a time (the runtime's
//   thread, or a synchronous call under a lock). Per device it keeps a
//   stream of its own (non-blocking) and a device fusion buffer; one pinned
//   host buffer (cudaHostAlloc) serves every device. Buffers grow and are
//   reused; nothing is freed before the stager is destroyed.
//   - hostBuffer(bytes): the pinned buffer, at least `bytes` long (its
//     contents are lost when it grows).
//   - toHost(run, pieces, host): for the run's pieces, makes kolo's stream
//     wait on each piece's ready event (cudaStreamWaitEvent: no host
//     blocking, no device-wide synchronize), gathers them into the device
//     fusion buffer (one device-to-device copy each; none for a run of one)
//     and copies the run in ONE copy to host + run.offset; returns once the
//     bytes are there (cudaStreamSynchronize on kolo's stream only).
//   - fromHost(run, pieces, host): the reverse: ONE copy of host +
//     run.offset to the device, a copy to each piece's output, each piece's
//     done event recorded on kolo's stream; returns once the outputs are
//     written (cudaEventSynchronize on the last done event).
//   The device-only half, for a device path (device_collectives.h): the
//   same gather and scatter without the host copies, and the kernels on
//   kolo's stream.
//   - stream(device): kolo's stream of `device` (cudaStream_t as void*),
//     the stream a device path's calls are ordered on.
//   - deviceBuffer(device, bytes): the device fusion buffer of `device`, at
//     least `bytes` long (its contents are lost when it grows).
//   - gather(run, pieces): makes kolo's stream wait on each piece's ready
//     event and returns the device address of the run's bytes in layout
//     order: the piece's own input for a run of one (nothing copied), else
//     the device fusion buffer with each piece copied in (one
//     device-to-device copy each). Stream-ordered: returns without waiting.
//   - scatter(run, pieces, src): copies each piece's bytes from src (laid
//     out as gather's) to its output (nothing for a piece whose output is
//     src itself), records each piece's done event on kolo's stream and
//     returns once they are written (cudaEventSynchronize on the last one;
//     a run of pieces without entries: cudaStreamSynchronize).
//   - copy(device, dst, src, bytes): one copy on kolo's stream (device to
//     device, or device to host memory), stream-ordered.
//   - scale(device, buf, count, dtype, factor) and divide(device, buf,
//     count, dtype, divisor): device_reduce.h's scaleInPlace and
//     divideInPlace on kolo's stream.
//   - synchronize(device): returns once kolo's stream of `device` has run
//     what was enqueued on it.
//   - keepDeviceMemory(): from now on device fusion buffers are never freed
//     (an outgrown one is kept, the next one at least twice its size; the
//     last ones are left to the process's CUDA context at destruction): a
//     device path's peers may map them (CUDA IPC), and CUDA makes freeing
//     memory another process maps undefined. Called before the first use
//     of a buffer with a device path.
//   Failures: Error(kInternal) naming the CUDA call, the device and the
//   CUDA error.
// - In a build without CUDA every function throws checkDevice's error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kolo/types.h>

#include "collectives/cuda/staging_plan.h"

namespace kolo::collectives::cuda {

void checkDevice(const std::string& operation, int device);

class DeviceEntry {
 public:
  static std::shared_ptr<DeviceEntry> record(const std::string& operation, int device,
                                             void* stream);
  ~DeviceEntry();
  DeviceEntry(const DeviceEntry&) = delete;
  DeviceEntry& operator=(const DeviceEntry&) = delete;

  // An entry without events (never recorded, never waited on), for a
  // stager that moves no device memory: the tests' host double.
  static std::shared_ptr<DeviceEntry> forTesting(int device) {
    return std::shared_ptr<DeviceEntry>(new DeviceEntry(device, nullptr));
  }

  int device() const { return device_; }
  void* stream() const { return stream_; }
  void* readyEvent() const { return ready_; }
  void* doneEvent() const { return done_; }

 private:
  DeviceEntry(int device, void* stream) : device_(device), stream_(stream) {}
  int device_;
  void* stream_;
  void* ready_ = nullptr;
  void* done_ = nullptr;
};

// Virtual so that a test can stand in for the CUDA copies (the runtime's
// RuntimeOptions::makeStager); constructing one touches no CUDA.
class DeviceStager {
 public:
  DeviceStager();
  virtual ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  virtual uint8_t* hostBuffer(size_t bytes);
  virtual void toHost(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                      uint8_t* host);
  virtual void fromHost(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                        const uint8_t* host);

  // The device-only half (a device path).
  virtual void keepDeviceMemory();
  virtual void* stream(int device);
  virtual void* deviceBuffer(int device, size_t bytes);
  virtual const void* gather(const StagingRun& run,
                             const std::vector<StagedPiece>& pieces);
  virtual void scatter(const StagingRun& run, const std::vector<StagedPiece>& pieces,
                       const void* src);
  virtual void copy(int device, void* dst, const void* src, size_t bytes);
  virtual void scale(int device, void* buf, size_t count, DataType dtype, double factor);
  virtual void divide(int device, void* buf, size_t count, DataType dtype,
                      double divisor);
  virtual void synchronize(int device);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::collectives::cuda
