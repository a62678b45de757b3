// Which CUDA device is current on a thread while kolo works on it (CUDA
// build only; plain C++ header).
//
// Contract
// - enterDevice(device) makes `device` current on the calling thread and
//   returns what leaveDevice needs to undo it: the device that was current,
//   or -1 when nothing is to be restored. Nothing is restored when the
//   device was already current, or when the thread had no CUDA context
//   current (the runtime's background thread, a caller's thread that never
//   used CUDA): restoring such a thread's default device 0 would create a
//   context on GPU 0 (cudaSetDevice does since CUDA 12) for a rank that
//   works on another GPU. Returns the CUDA error code (not 0) through
//   `error` when cudaGetDevice or cudaSetDevice fails; the thread's device
//   is then unchanged.
// - leaveDevice(previous) restores `previous` when it is >= 0; errors are
//   ignored (it runs in destructors).
// - DeviceScope: the two as a scope; a failure throws Error(kInternal)
//   "<who>: cudaSetDevice(<device>) failed: <CUDA error>".
#pragma once

#include <string>

namespace kolo::collectives::cuda {

int enterDevice(int device, int* error);
void leaveDevice(int previous) noexcept;

class DeviceScope {
 public:
  DeviceScope(int device, const std::string& who);
  ~DeviceScope() { leaveDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace kolo::collectives::cuda
