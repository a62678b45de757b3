// The NCCL communicator (nccl_communicator.h) in a build without CUDA:
// never reached, since ncclAvailability() says "no CUDA support" first and
// makeNcclCollectives stops there; kept for the link.
#include "collectives/cuda/nccl_communicator.h"
#include "common/check.h"

namespace kolo::collectives::cuda {

std::unique_ptr<DeviceCollectives> openNcclCommunicator(const NcclLibrary&,
                                                        const NcclOptions& options,
                                                        const NcclLibrary::UniqueId&,
                                                        NcclRendezvous& rendezvous) {
  KOLO_THROW(
      ErrorCode::kInvalidArgument,
      rendezvous.group().self()
          << ": the NCCL path on CUDA device " << options.device
          << ": this kolo build has no CUDA support (KOLO_WITH_CUDA was off or nvcc "
             "missing)");
}

}  // namespace kolo::collectives::cuda
