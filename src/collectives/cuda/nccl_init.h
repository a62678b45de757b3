// Step 4 of makeNcclCollectives (nccl_collectives.h): the non-blocking
// NCCL init, polled against the rendezvous' deadline. No CUDA call: the
// caller has made the communicator's device current. Plain C++, in every
// build (tests/nccl_test.cc runs it against a stand-in NCCL library).
//
// Contract
// - ncclCommInitRankConfig with blocking = 0, then ncclCommGetAsyncError
//   until it leaves ncclInProgress (spinning briefly, then sleeping up to
//   1 ms between polls); every 100 ms the store is asked whether a member
//   published a failure (NcclRendezvous::checkPeers).
// - Returns the initialized communicator. Otherwise aborts it
//   (ncclCommAbort) and throws: at the deadline Error(kTimeout); NCCL's
//   failure Error(kInternal), or kPeerLost for NCCL's remote and system
//   errors, with ncclGetErrorString and ncclGetLastError's text; a member's
//   published failure as NcclRendezvous::checkPeers throws it. Each message
//   starts with `what` (this rank, the communicator, the device).
#pragma once

#include <string>

#include "collectives/cuda/nccl_library.h"
#include "collectives/cuda/nccl_rendezvous.h"

namespace kolo::collectives::cuda {

NcclLibrary::Comm initCommunicator(const NcclLibrary& nccl,
                                   const NcclLibrary::UniqueId& id,
                                   NcclRendezvous& rendezvous, const std::string& what);

// ncclGetErrorString(result), with ncclGetLastError's text where NCCL has it.
std::string ncclErrorText(const NcclLibrary& nccl, NcclLibrary::Result result,
                          NcclLibrary::Comm comm);

}  // namespace kolo::collectives::cuda
