// The CUDA runtime as the rest of kolo sees it: whether this build has CUDA,
// how many devices this process can use (and why none), and device memory
// for the kernels' callers and tests. Plain C++: no CUDA header, so every
// layer may include it, in builds with and without CUDA.
//
// Contract
// - built() is fixed at build time: true when libkolo was built with CUDA
//   (KOLO_WITH_CUDA, docs/gpu.md). A build without CUDA links
//   cuda_none.cc, whose functions answer "no CUDA support" (probeDevices) or
//   throw Error(kInvalidArgument) saying so (everything else).
// - probeDevices() asks the CUDA runtime once per process
//   (cudaGetDeviceCount) and caches the answer; it never throws and never
//   creates a CUDA context. A failing call (no driver, no device, a driver
//   older than the runtime) is 0 devices with the runtime's error name and
//   text in `reason`; the GPU paths are then never taken and the CPU paths
//   run as in a build without CUDA.
// - DeviceBuffer: device memory on one device, freed by the destructor.
//   Every failure (no device, out of memory, a copy that fails) throws
//   kolo::Error naming the operation, the device and the CUDA error; the
//   constructor throws Error(kInvalidArgument) when there is no device, with
//   probeDevices().reason in the message.
// - Thread-safety: probeDevices() may be called from any thread; a
//   DeviceBuffer is used by one thread at a time.
#pragma once

#include <cstddef>
#include <string>

namespace kolo::collectives::cuda {

// True when libkolo was built with CUDA.
bool built();

struct DeviceProbe {
  int count = 0;           // devices this process can use (CUDA_VISIBLE_DEVICES applies)
  std::string reason;      // why count is 0; empty when count > 0
  int runtimeVersion = 0;  // CUDA runtime linked in (e.g. 13000), 0 without CUDA
  int driverVersion = 0;   // CUDA version the driver supports, 0 without a driver
};

// The devices, asked once (cached); never throws.
const DeviceProbe& probeDevices();

// Blocks until everything enqueued on `stream` (a cudaStream_t; nullptr:
// the legacy default stream) has run; throws Error(kInternal) naming the
// CUDA error of a failed kernel or copy.
void synchronize(void* stream);

class DeviceBuffer {
 public:
  // `bytes` of device memory on `device` (0 bytes: no allocation).
  DeviceBuffer(size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

  // Synchronous copies of the first `bytes` bytes (at most bytes()).
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

}  // namespace kolo::collectives::cuda
