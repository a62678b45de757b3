// What the NCCL communicator asks of the CUDA runtime, as an interface, so
// that the communicator's logic (which NCCL calls each collective makes,
// the completion watch, the errors, the broken state) is plain C++ that
// runs, and is tested, without a GPU: nccl_cuda_ops.cc implements it with
// the CUDA runtime (CUDA build); tests/nccl_test.cc with a stand-in.
//
// Contract
// - One object per communicator and device, used by one thread at a time.
// - enter() makes the device current on the calling thread and returns
//   what leave() needs to restore the previous one; it throws
//   Error(kInternal) starting with `who` when it cannot.
// - record() records the object's completion event on `stream` behind the
//   work enqueued there; poll() says whether that work has finished. Both
//   report a CUDA error as text ("" / kFailed with *error set), never throw.
// - copy() enqueues a device-to-device copy on `stream`: "" or the error.
// - divide() is divideInPlace (device_reduce.h), with its errors.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <memory>
#include <string>

namespace kolo::collectives::cuda {

class NcclDeviceOps {
 public:
  enum class Poll { kDone, kPending, kFailed };

  virtual ~NcclDeviceOps() = default;
  virtual int enter(const std::string& who) = 0;
  virtual void leave(int previous) noexcept = 0;
  virtual std::string record(void* stream) = 0;
  virtual Poll poll(std::string* error) = 0;
  virtual std::string copy(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void divide(void* buffer, size_t count, DataType dtype, double divisor,
                      void* stream) = 0;
};

// The CUDA runtime's, on `device` (its event is made there). In a build
// without CUDA: Error(kInvalidArgument) saying so.
std::unique_ptr<NcclDeviceOps> makeCudaDeviceOps(int device);

}  // namespace kolo::collectives::cuda
