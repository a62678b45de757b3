// device_runtime.h and device_reduce.h in a build without CUDA
// (KOLO_WITH_CUDA=OFF, or auto without nvcc): no device, ever. The probe
// says why; every other call throws Error(kInvalidArgument) naming the call
// and saying the same. The argument checks of the CUDA build are not
// repeated: nothing can run here, whatever the arguments.
#include "collectives/cuda/cuda_ipc_device.h"
#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/device_staging.h"
#include "collectives/cuda/ipc_support.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

constexpr const char* kNoCuda =
    "this kolo build has no CUDA support (built with KOLO_WITH_CUDA=OFF, or without "
    "nvcc; docs/gpu.md)";

[[noreturn]] void noCuda(const char* what) {
  KOLO_THROW(ErrorCode::kInvalidArgument, what << ": no CUDA device: " << kNoCuda);
}

}  // namespace

bool built() {
  return false;
}

const DeviceProbe& probeDevices() {
  static const DeviceProbe probe{0, kNoCuda, 0, 0};
  return probe;
}

void synchronize(void*) {
  noCuda("cuda::synchronize");
}

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes), device_(device) {
  noCuda("DeviceBuffer");
}
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::upload(const void*, size_t) {
  noCuda("DeviceBuffer::upload");
}
void DeviceBuffer::download(void*, size_t) const {
  noCuda("DeviceBuffer::download");
}

void checkDevice(const std::string& operation, int device) {
  if (device < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, operation << " on CUDA device memory: device "
                                                      << device
                                                      << " is not a CUDA device ordinal");
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             operation << " on CUDA device memory: " << kNoCuda);
}

std::shared_ptr<DeviceEntry> DeviceEntry::record(const std::string& operation, int device,
                                                 void*) {
  checkDevice(operation, device);
  return nullptr;
}
DeviceEntry::~DeviceEntry() = default;

struct DeviceStager::Impl {};
DeviceStager::DeviceStager() = default;
DeviceStager::~DeviceStager() = default;
uint8_t* DeviceStager::hostBuffer(size_t) {
  noCuda("DeviceStager::hostBuffer");
}
void DeviceStager::toHost(const StagingRun&, const std::vector<StagedPiece>&, uint8_t*) {
  noCuda("DeviceStager::toHost");
}
void DeviceStager::fromHost(const StagingRun&, const std::vector<StagedPiece>&,
                            const uint8_t*) {
  noCuda("DeviceStager::fromHost");
}
void DeviceStager::keepDeviceMemory() {}
void* DeviceStager::stream(int) {
  noCuda("DeviceStager::stream");
}
void* DeviceStager::deviceBuffer(int, size_t) {
  noCuda("DeviceStager::deviceBuffer");
}
const void* DeviceStager::gather(const StagingRun&, const std::vector<StagedPiece>&) {
  noCuda("DeviceStager::gather");
}
void DeviceStager::scatter(const StagingRun&, const std::vector<StagedPiece>&,
                           const void*) {
  noCuda("DeviceStager::scatter");
}
void DeviceStager::copy(int, void*, const void*, size_t) {
  noCuda("DeviceStager::copy");
}
void DeviceStager::scale(int, void*, size_t, DataType, double) {
  noCuda("DeviceStager::scale");
}
void DeviceStager::divide(int, void*, size_t, DataType, double) {
  noCuda("DeviceStager::divide");
}
void DeviceStager::synchronize(int) {
  noCuda("DeviceStager::synchronize");
}

void reduce2(void*, const void*, const void*, size_t, DataType, ReduceOp, void*) {
  noCuda("cuda::reduce2");
}
void reduceMany(void*, const void* const*, int, size_t, DataType, ReduceOp, void*) {
  noCuda("cuda::reduceMany");
}
void divideInPlace(void*, size_t, DataType, double, void*) {
  noCuda("cuda::divideInPlace");
}
void scaleInPlace(void*, size_t, DataType, double, void*) {
  noCuda("cuda::scaleInPlace");
}
void compressToHalf(uint16_t*, const float*, size_t, void*) {
  noCuda("cuda::compressToHalf");
}
void decompressFromHalf(float*, const uint16_t*, size_t, void*) {
  noCuda("cuda::decompressFromHalf");
}

void reduceToMany(void* const*, int, const void* const*, int, size_t, DataType, ReduceOp,
                  void*) {
  noCuda("cuda::reduceToMany");
}

std::shared_ptr<cuda_ipc::IpcDevice> makeCudaIpcDevice(int) {
  KOLO_THROW(ErrorCode::kInvalidArgument, "CUDA IPC collectives: " << kNoCuda);
}
std::string devicePciBusId(int) {
  noCuda("devicePciBusId");
}
IpcSupport ipcSupport(const std::vector<std::string>&) {
  return {false, kNoCuda};
}

}  // namespace kolo::collectives::cuda
