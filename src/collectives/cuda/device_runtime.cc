// The CUDA runtime probe and device memory (device_runtime.h), in a build
// with CUDA. libkolo links the static CUDA runtime; its first call loads
// the driver (libcuda.so.1). On a machine without a driver or a GPU every
// call here fails cleanly with a cudaError_t, which becomes the probe's
// reason (0 devices) or an Error naming it.
#include "collectives/cuda/device_runtime.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>

#include "collectives/cuda/device_kernels.h"
#include "common/check.h"

namespace kolo::collectives::cuda {

std::string cudaErrorText(int code) {
  const auto e = static_cast<cudaError_t>(code);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

namespace {

DeviceProbe askRuntime() {
  DeviceProbe probe;
  // Both leave 0 when they fail (no driver: driverVersion 0).
  (void)cudaRuntimeGetVersion(&probe.runtimeVersion);
  (void)cudaDriverGetVersion(&probe.driverVersion);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; leave no error behind for the caller
    probe.reason = "cudaGetDeviceCount failed with " + cudaErrorText(e);
    return probe;
  }
  probe.count = count;
  if (count == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    probe.reason =
        std::string("cudaGetDeviceCount found 0 devices") +
        (visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : "");
  }
  return probe;
}

void checkCuda(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    KOLO_THROW(ErrorCode::kInternal,
               what << " on CUDA device " << device << " failed: " << cudaErrorText(e));
  }
}

// Runs fn with `device` current on this thread, then restores the previous one.
template <typename Fn>
void onDevice(int device, Fn&& fn) {
  int previous = 0;
  checkCuda(cudaGetDevice(&previous), "cudaGetDevice", device);
  checkCuda(cudaSetDevice(device), "cudaSetDevice", device);
  try {
    fn();
  } catch (...) {
    (void)cudaSetDevice(previous);
    throw;
  }
  (void)cudaSetDevice(previous);
}

}  // namespace

bool built() {
  return true;
}

const DeviceProbe& probeDevices() {
  static const DeviceProbe probe = askRuntime();
  return probe;
}

void synchronize(void* stream) {
  checkCuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
            "cudaStreamSynchronize", -1);
}

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes), device_(device) {
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "DeviceBuffer of " << bytes << " bytes: no CUDA device: " << probe.reason);
  }
  if (device < 0 || device >= probe.count) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "DeviceBuffer: CUDA device "
                                                << device << " does not exist ("
                                                << probe.count << " devices)");
  }
  if (bytes == 0) return;
  onDevice(device, [&] { checkCuda(cudaMalloc(&data_, bytes), "cudaMalloc", device); });
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) (void)cudaFree(data_);
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > bytes_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "DeviceBuffer::upload of " << bytes << " bytes into " << bytes_);
  }
  if (bytes == 0) return;
  checkCuda(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice),
            "cudaMemcpy to device", device_);
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > bytes_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "DeviceBuffer::download of " << bytes << " bytes from " << bytes_);
  }
  if (bytes == 0) return;
  checkCuda(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host",
            device_);
}

}  // namespace kolo::collectives::cuda
