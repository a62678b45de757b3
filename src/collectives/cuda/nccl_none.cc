// The NCCL path's CUDA side (nccl_device_ops.h) in a build without CUDA:
// never reached, since ncclAvailability() says "no CUDA support" first and
// makeNcclCollectives stops there; kept for the link.
#include "collectives/cuda/nccl_device_ops.h"
#include "common/check.h"

namespace kolo::collectives::cuda {

std::unique_ptr<NcclDeviceOps> makeCudaDeviceOps(int device) {
  KOLO_THROW(
      ErrorCode::kInvalidArgument,
      "the NCCL path on CUDA device "
          << device
          << ": this kolo build has no CUDA support (KOLO_WITH_CUDA was off or nvcc "
             "missing)");
}

}  // namespace kolo::collectives::cuda
