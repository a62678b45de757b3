// The current CUDA device of a thread (device_scope.h). Whether the thread
// has a context is the driver's cuCtxGetCurrent, found in the libcuda.so.1
// the CUDA runtime has loaded (dlopen RTLD_NOLOAD, as device_pointer.cc
// does): libkolo never links the driver.
#include "collectives/cuda/device_scope.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "collectives/cuda/device_kernels.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

// Whether a CUDA context is current on this thread. Unknown (no driver
// symbol): true, so the caller's device is restored as it always was.
bool contextCurrent() {
  using GetCurrent = int (*)(void**);
  static const GetCurrent getCurrent = []() -> GetCurrent {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    return lib ? reinterpret_cast<GetCurrent>(dlsym(lib, "cuCtxGetCurrent")) : nullptr;
  }();
  if (getCurrent == nullptr) return true;
  void* context = nullptr;
  return getCurrent(&context) == 0 && context != nullptr;
}

}  // namespace

int enterDevice(int device, int* error) {
  *error = 0;
  int previous = 0;
  cudaError_t e = cudaGetDevice(&previous);
  if (e == cudaSuccess && previous == device) return -1;
  const bool restore = e == cudaSuccess && contextCurrent();
  e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *error = static_cast<int>(e);
    return -1;
  }
  return restore ? previous : -1;
}

void leaveDevice(int previous) noexcept {
  if (previous >= 0) (void)cudaSetDevice(previous);
}

DeviceScope::DeviceScope(int device, const std::string& who) {
  int error = 0;
  previous_ = enterDevice(device, &error);
  if (error != 0) {
    KOLO_THROW(ErrorCode::kInternal, who << ": cudaSetDevice(" << device
                                         << ") failed: " << cudaErrorText(error));
  }
}

}  // namespace kolo::collectives::cuda
