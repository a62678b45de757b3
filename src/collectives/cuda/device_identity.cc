// identifyDevice in a build with CUDA (device_identity.h).
#include "collectives/cuda/device_identity.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_staging.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

void check(cudaError_t e, const char* what, int device) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    KOLO_THROW(ErrorCode::kInternal,
               what << " on CUDA device " << device << " failed: " << cudaErrorText(e));
  }
}

std::string uuidOf(const cudaDeviceProp& prop) {
  unsigned char bytes[16];
  static_assert(sizeof(prop.uuid.bytes) == sizeof(bytes));
  std::memcpy(bytes, prop.uuid.bytes, sizeof(bytes));
  return uuidText(bytes);
}

}  // namespace

DeviceIdentity identifyDevice(int device) {
  checkDevice("collectives", device);
  DeviceIdentity id;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", device);
  id.uuid = uuidOf(prop);
  char bus[32] = {};
  check(cudaDeviceGetPCIBusId(bus, sizeof(bus), device), "cudaDeviceGetPCIBusId", device);
  id.pciBusId = bus;
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount", device);
  for (int other = 0; other < count; ++other) {
    if (other == device) continue;
    int can = 0;
    check(cudaDeviceCanAccessPeer(&can, device, other), "cudaDeviceCanAccessPeer",
          device);
    if (!can) continue;
    cudaDeviceProp peer{};
    check(cudaGetDeviceProperties(&peer, other), "cudaGetDeviceProperties", other);
    id.peers.push_back(uuidOf(peer));
  }
  return id;
}

}  // namespace kolo::collectives::cuda
