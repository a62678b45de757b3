// NcclDeviceOps (nccl_device_ops.h) with the CUDA runtime: the current
// device, one completion event (no timing), async copies, the divide
// kernel.
#include <cuda_runtime_api.h>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/device_scope.h"
#include "collectives/cuda/nccl_device_ops.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

std::string failure(cudaError_t e, const char* call) {
  (void)cudaGetLastError();  // not sticky: leave nothing behind for the caller
  return std::string(call) + " failed: " + cudaErrorText(e);
}

class CudaDeviceOps final : public NcclDeviceOps {
 public:
  explicit CudaDeviceOps(int device) : device_(device) {
    const std::string who = "the NCCL path on CUDA device " + std::to_string(device);
    const int previous = enter(who);
    const cudaError_t e = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
    leave(previous);
    if (e != cudaSuccess) {
      KOLO_THROW(ErrorCode::kInternal,
                 who << ": " << failure(e, "cudaEventCreateWithFlags"));
    }
  }
  ~CudaDeviceOps() override { (void)cudaEventDestroy(event_); }

  int enter(const std::string& who) override {
    int error = 0;
    const int previous = enterDevice(device_, &error);
    if (error != 0) {
      KOLO_THROW(
          ErrorCode::kInternal,
          who << ": "
              << failure(static_cast<cudaError_t>(error),
                         ("cudaSetDevice(" + std::to_string(device_) + ")").c_str()));
    }
    return previous;
  }
  void leave(int previous) noexcept override { leaveDevice(previous); }

  std::string record(void* stream) override {
    const cudaError_t e = cudaEventRecord(event_, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? "" : failure(e, "cudaEventRecord");
  }

  Poll poll(std::string* error) override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return Poll::kDone;
    if (e == cudaErrorNotReady) return Poll::kPending;
    *error = failure(e, "cudaEventQuery");
    return Poll::kFailed;
  }

  std::string copy(void* dst, const void* src, size_t bytes, void* stream) override {
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                          static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? "" : failure(e, "cudaMemcpyAsync");
  }

  void divide(void* buffer, size_t count, DataType dtype, double divisor,
              void* stream) override {
    divideInPlace(buffer, count, dtype, divisor, stream);
  }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::unique_ptr<NcclDeviceOps> makeCudaDeviceOps(int device) {
  return std::make_unique<CudaDeviceOps>(device);
}

}  // namespace kolo::collectives::cuda
