// In a build without CUDA (device_identity.h, hier_collectives.h): no
// device to identify, no device memory to move; both say so by
// checkDevice's error.
#include "collectives/cuda/device_identity.h"
#include "collectives/cuda/device_staging.h"
#include "collectives/cuda/hier_collectives.h"
#include "common/check.h"

namespace kolo::collectives::cuda {

DeviceIdentity identifyDevice(int device) {
  checkDevice("collectives", device);  // throws: no CUDA support
  KOLO_THROW(ErrorCode::kInternal, "identifyDevice without CUDA support");
}

std::unique_ptr<DeviceMemory> cudaDeviceMemory(int device) {
  checkDevice("hierarchical device collectives", device);  // throws, as above
  KOLO_THROW(ErrorCode::kInternal, "cudaDeviceMemory without CUDA support");
}

}  // namespace kolo::collectives::cuda
