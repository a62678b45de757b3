// CudaIpcDevice (cuda_ipc_device.h) and the CUDA side of ipc_support.h, in
// a build with CUDA. Built here; not yet run on a GPU.
#include "collectives/cuda/cuda_ipc_device.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstring>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/device_scope.h"
#include "collectives/cuda/ipc_support.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == cuda_ipc::Handle::kBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == cuda_ipc::Handle::kBytes);

// cuda.h: CUpointer_attribute values (stable since CUDA 7 / 11.3).
constexpr int kAttributeBufferId = 7;       // CU_POINTER_ATTRIBUTE_BUFFER_ID
constexpr int kAttributeDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr int kAttributeRangeStart = 11;    // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
constexpr int kAttributeRangeSize = 12;     // CU_POINTER_ATTRIBUTE_RANGE_SIZE
using GetAttributes = int (*)(unsigned, int*, void**, unsigned long long);

// The driver's cuPointerGetAttributes. Called with the device current
// (DeviceScope), so the runtime has loaded the driver by then.
GetAttributes driverQuery() {
  static const GetAttributes query = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    return lib == nullptr
               ? GetAttributes{nullptr}
               : reinterpret_cast<GetAttributes>(dlsym(lib, "cuPointerGetAttributes"));
  }();
  return query;
}

[[noreturn]] void fail(const char* what, int device, cudaError_t e) {
  (void)cudaGetLastError();
  KOLO_THROW(ErrorCode::kInternal,
             what << " on CUDA device " << device << " failed: " << cudaErrorText(e));
}

class CudaIpcDevice final : public cuda_ipc::IpcDevice {
 public:
  explicit CudaIpcDevice(int device) : device_(device) {}

  int device() const override { return device_; }

  bool locate(const void* p, cuda_ipc::Allocation* out, std::string* why) override {
    DeviceScope scope(device_, "CUDA IPC");
    const GetAttributes query = driverQuery();
    if (query == nullptr) {
      *why = "the CUDA driver's cuPointerGetAttributes was not found";
      return false;
    }
    unsigned long long id = 0;
    unsigned long long start = 0;
    size_t bytes = 0;
    int ordinal = -1;
    int attrs[] = {kAttributeBufferId, kAttributeRangeStart, kAttributeRangeSize,
                   kAttributeDeviceOrdinal};
    void* data[] = {&id, &start, &bytes, &ordinal};
    const int rc = query(4, attrs, data, reinterpret_cast<uintptr_t>(p));
    if (rc != 0 || start == 0) {
      *why = "the CUDA driver does not know the pointer (CUresult " + std::to_string(rc) +
             "): host memory?";
      return false;
    }
    if (ordinal != device_) {
      *why = "it is memory of CUDA device " + std::to_string(ordinal);
      return false;
    }
    out->base = reinterpret_cast<const void*>(static_cast<uintptr_t>(start));
    out->bytes = bytes;
    out->id = id;
    return true;
  }

  bool exportMemory(const void* base, cuda_ipc::Handle* out, std::string* why) override {
    DeviceScope scope(device_, "CUDA IPC");
    cudaIpcMemHandle_t h;
    const cudaError_t e = cudaIpcGetMemHandle(&h, const_cast<void*>(base));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      *why = "cudaIpcGetMemHandle failed: " + cudaErrorText(e);
      return false;
    }
    std::memcpy(out->bytes, &h, sizeof h);
    return true;
  }

  void* openMemory(const cuda_ipc::Handle& handle) override {
    DeviceScope scope(device_, "CUDA IPC");
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.bytes, sizeof h);
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) fail("cudaIpcOpenMemHandle of a peer's buffer", device_, e);
    return p;
  }

  void closeMemory(void* base) noexcept override {
    DeviceScope scope(device_, "CUDA IPC");
    if (cudaIpcCloseMemHandle(base) != cudaSuccess) (void)cudaGetLastError();
  }

  void* allocate(size_t bytes) override {
    DeviceScope scope(device_, "CUDA IPC");
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) fail("cudaMalloc of a CUDA IPC staging buffer", device_, e);
    return p;
  }

  void release(void* p) noexcept override {
    DeviceScope scope(device_, "CUDA IPC");
    (void)cudaFree(p);
  }

  Event createEvent() override {
    DeviceScope scope(device_, "CUDA IPC");
    cudaEvent_t e = nullptr;
    const cudaError_t rc =
        cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming);
    if (rc != cudaSuccess) fail("cudaEventCreateWithFlags(interprocess)", device_, rc);
    return e;
  }

  cuda_ipc::Handle exportEvent(Event event) override {
    cudaIpcEventHandle_t h;
    const cudaError_t rc = cudaIpcGetEventHandle(&h, static_cast<cudaEvent_t>(event));
    if (rc != cudaSuccess) fail("cudaIpcGetEventHandle", device_, rc);
    cuda_ipc::Handle out;
    std::memcpy(out.bytes, &h, sizeof h);
    return out;
  }

  Event openEvent(const cuda_ipc::Handle& handle) override {
    DeviceScope scope(device_, "CUDA IPC");
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.bytes, sizeof h);
    cudaEvent_t e = nullptr;
    const cudaError_t rc = cudaIpcOpenEventHandle(&e, h);
    if (rc != cudaSuccess) fail("cudaIpcOpenEventHandle of a peer's event", device_, rc);
    return e;
  }

  void destroyEvent(Event event) noexcept override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  void record(Event event, void* stream) override {
    DeviceScope scope(device_, "CUDA IPC");
    const cudaError_t rc = cudaEventRecord(static_cast<cudaEvent_t>(event),
                                           static_cast<cudaStream_t>(stream));
    if (rc != cudaSuccess) fail("cudaEventRecord", device_, rc);
  }

  void streamWait(void* stream, Event event) override {
    DeviceScope scope(device_, "CUDA IPC");
    const cudaError_t rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                               static_cast<cudaEvent_t>(event), 0);
    if (rc != cudaSuccess) fail("cudaStreamWaitEvent", device_, rc);
  }

  bool query(Event event) override {
    const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (rc == cudaSuccess) return true;
    if (rc == cudaErrorNotReady) return false;
    fail("cudaEventQuery", device_, rc);
  }

  void copy(void* dst, const void* src, size_t bytes, void* stream) override {
    DeviceScope scope(device_, "CUDA IPC");
    const cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                           static_cast<cudaStream_t>(stream));
    if (rc != cudaSuccess) fail("cudaMemcpyAsync (CUDA IPC)", device_, rc);
  }

  void reduce(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
              DataType dtype, ReduceOp op, void* stream) override {
    DeviceScope scope(device_, "CUDA IPC");
    const int rc = launch::reduceToMany(dsts, m, srcs, n, count, dtype, op, stream);
    if (rc != 0)
      fail("the CUDA IPC reduction kernel", device_, static_cast<cudaError_t>(rc));
  }

 private:
  int device_;
};

}  // namespace

std::shared_ptr<cuda_ipc::IpcDevice> makeCudaIpcDevice(int device) {
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "CUDA IPC collectives: no CUDA device: " << probe.reason);
  }
  if (device < 0 || device >= probe.count) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "CUDA IPC collectives: CUDA device "
                                                << device << " does not exist ("
                                                << probe.count << " devices)");
  }
  return std::make_shared<CudaIpcDevice>(device);
}

std::string devicePciBusId(int device) {
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "devicePciBusId: no CUDA device: " << probe.reason);
  }
  char id[32] = {};
  const cudaError_t e = cudaDeviceGetPCIBusId(id, sizeof id, device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "devicePciBusId: CUDA device " << device << ": " << cudaErrorText(e));
  }
  return id;
}

IpcSupport ipcSupport(const std::vector<std::string>& pciBusIds) {
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) return {false, "no CUDA device: " + probe.reason};
  auto ordinal = [](const std::string& busId) {
    int d = -1;
    if (cudaDeviceGetByPCIBusId(&d, busId.c_str()) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return d;
  };
  return ipcSupportWith(
      pciBusIds, [&](const std::string& g) { return ordinal(g) >= 0; },
      [&](const std::string& a, const std::string& b) {
        int can = 0;
        if (cudaDeviceCanAccessPeer(&can, ordinal(a), ordinal(b)) != cudaSuccess) {
          (void)cudaGetLastError();
          return false;
        }
        return can != 0;
      });
}

}  // namespace kolo::collectives::cuda
