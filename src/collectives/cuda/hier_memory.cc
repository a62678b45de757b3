// cudaDeviceMemory (hier_collectives.h) in a build with CUDA: copies on the
// caller's stream, synchronised on that stream only; scratch grown by half
// again when too small (cudaMalloc on the device, cudaHostAlloc pinned).
// Device scratch is never cudaFree'd: it is the intra-host collective's
// buffer (allreduce's reduce-scatter output), and with the CUDA IPC path
// the peers keep it mapped (cudaIpcOpenMemHandle, cached) past this
// object's life; CUDA makes a cudaFree of memory another process still maps
// undefined. Outgrown device scratch is kept, and the last is left to the
// process's CUDA context (at most ~3x the largest scratch: growth by half).
// Pinned host scratch is freed with the object.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_scope.h"
#include "collectives/cuda/device_staging.h"
#include "collectives/cuda/hier_collectives.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

class CudaDeviceMemory : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}
  ~CudaDeviceMemory() override {
    for (int s = 0; s < 2; ++s) {
      if (host_[s].data != nullptr) (void)cudaFreeHost(host_[s].data);
    }
    // device_mem_ and retired_: left to the process (see the file comment).
  }

  void toHost(void* host, const void* device, size_t bytes, void* stream) override {
    move(host, device, bytes, cudaMemcpyDeviceToHost, stream, "to host");
  }
  void toDevice(void* device, const void* host, size_t bytes, void* stream) override {
    move(device, host, bytes, cudaMemcpyHostToDevice, stream, "to the device");
  }
  void copy(void* dst, const void* src, size_t bytes, void* stream) override {
    move(dst, src, bytes, cudaMemcpyDeviceToDevice, stream, "on the device");
  }

  uint8_t* hostScratch(size_t bytes, int slot) override {
    Buffer& b = host_[slot];
    if (b.data == nullptr || b.bytes < bytes) {
      DeviceScope scope(device_, "hierarchical device collectives");
      if (b.data != nullptr) (void)cudaFreeHost(b.data);
      b = {};
      const size_t grown = std::max<size_t>(bytes + bytes / 2, 4096);
      check(cudaHostAlloc(&b.data, grown, cudaHostAllocDefault), "cudaHostAlloc");
      b.bytes = grown;
    }
    return static_cast<uint8_t*>(b.data);
  }

  void* deviceScratch(size_t bytes, int slot) override {
    Buffer& b = device_mem_[slot];
    if (b.data == nullptr || b.bytes < bytes) {
      DeviceScope scope(device_, "hierarchical device collectives");
      if (b.data != nullptr) retired_.push_back(b.data);  // peers may map it
      b = {};
      const size_t grown = std::max<size_t>(bytes + bytes / 2, 4096);
      check(cudaMalloc(&b.data, grown), "cudaMalloc");
      b.bytes = grown;
    }
    return b.data;
  }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };
  void check(cudaError_t e, const char* what) const {
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      KOLO_THROW(ErrorCode::kInternal, "hierarchical device collectives: "
                                           << what << " on CUDA device " << device_
                                           << " failed: " << cudaErrorText(e));
    }
  }

  void move(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, void* stream,
            const char* where) const {
    if (bytes == 0) return;
    DeviceScope scope(device_, "hierarchical device collectives");
    const auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemcpyAsync(dst, src, bytes, kind, s),
          (std::string("cudaMemcpyAsync ") + where).c_str());
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize of the caller's stream");
  }

  int device_;
  Buffer host_[2];
  Buffer device_mem_[2];
  std::vector<void*> retired_;  // outgrown device scratch, never freed
};

}  // namespace

std::unique_ptr<DeviceMemory> cudaDeviceMemory(int device) {
  checkDevice("hierarchical device collectives", device);
  return std::make_unique<CudaDeviceMemory>(device);
}

}  // namespace kolo::collectives::cuda
