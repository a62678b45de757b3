// The NCCL communicator behind makeNcclCollectives (nccl_collectives.h),
// made in nccl_communicator.cc. Internal to the NCCL path; plain C++.
#pragma once

#include <memory>

#include "collectives/cuda/device_collectives.h"
#include "collectives/cuda/nccl_collectives.h"
#include "collectives/cuda/nccl_library.h"
#include "collectives/cuda/nccl_rendezvous.h"

namespace kolo::collectives::cuda {

// Step 4 of makeNcclCollectives: the non-blocking init with `id` on
// options.device, polled until rendezvous.deadline(), watching the store
// (rendezvous.checkPeers) for a member's published failure. `nccl` has every entry point
// the path needs (ncclAvailability said so). Throws as nccl_collectives.h says; the
// caller publishes the failure.
std::unique_ptr<DeviceCollectives> openNcclCommunicator(const NcclLibrary& nccl,
                                                        const NcclOptions& options,
                                                        const NcclLibrary::UniqueId& id,
                                                        NcclRendezvous& rendezvous);

}  // namespace kolo::collectives::cuda
