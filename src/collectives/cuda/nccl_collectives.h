// NCCL as a device path (DeviceCollectives, device_collectives.h): one rank
// per GPU; NCCL is loaded with dlopen (nccl_library.h), its unique id is
// exchanged through kolo's rendezvous store (nccl_rendezvous.h). How it
// works, the semantics that differ from the CPU kernels, and the errors:
// docs/gpu.md ("The NCCL path").
//
// Plain C++ (no CUDA or NCCL header), compiled in every build; a build
// without CUDA answers "no CUDA support".
//
// Contract
// - ncclAvailability(): whether this process can run the NCCL path: a
//   build with CUDA, at least one CUDA device (probeDevices), libnccl.so.2
//   loads with every entry point, and its version is 2.14 or later (the
//   non-blocking communicator init that lets a missing rank fail instead of
//   hang). version is NCCL's version code (e.g. 22809 for 2.28.9) when
//   available, else 0 with `reason` saying why (never empty then). Asked
//   once per process (cached); never throws; creates no CUDA context. It is
//   this rank's answer only: a path choice agrees on it across the group.
// - makeNcclCollectives(options, store): collective over the group (every
//   member calls it with the same size, key and timeout, its own rank and
//   device). Within options.timeout (KOLO_TIMEOUT) it
//     1. checks the options and ncclAvailability() (Error(kInvalidArgument)
//        naming this rank, the device and the reason),
//     2. publishes this rank's arrival under the key in `store` and waits
//        for every member (Error(kTimeout) naming this rank and the ranks
//        that never came; a member that failed in steps 1-4 publishes its
//        error, and the others fail at once with Error(kPeerLost) quoting
//        it),
//     3. rank 0 makes the NCCL unique id (ncclGetUniqueId) and publishes
//        its 128 bytes under the key; the others read them,
//     4. creates the communicator on options.device with the non-blocking
//        ncclCommInitRankConfig, polled until done; past the deadline it
//        aborts it (ncclCommAbort) and throws Error(kTimeout) naming this
//        rank. A failed init throws Error(kInternal) with NCCL's error.
//   Store keys live under "<key>/nccl/": the key must be unique per group
//   of ranks; the same group making its communicator again under the same
//   key is told apart by a round counter (nccl_rendezvous.h). The store is
//   used only during this call.
// - The object's calls follow DeviceCollectives. Each enqueues NCCL's
//   work on the caller's stream, records an event after it and polls the
//   event and ncclCommGetAsyncError until the work is done; an NCCL error
//   (asynchronous ones included), a CUDA error or options.timeout passing
//   aborts the communicator and throws kolo::Error naming this rank
//   (global rank), the operation and the cause (kPeerLost for NCCL's
//   remote and system errors, kTimeout, kInternal); every later call
//   throws the same error. Arguments are checked before anything is
//   enqueued (Error(kInvalidArgument)).
// - Destruction: the communicator is finalized (ncclCommFinalize, polled
//   up to options.timeout, then aborted) and destroyed; a broken one was
//   aborted already. Never blocks past the timeout.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/cuda/device_collectives.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/nccl_library.h"

namespace kolo::rendezvous {
class Store;
}

namespace kolo::collectives::cuda {

struct NcclAvailability {
  int version = 0;     // NCCL's version code when the path can run, else 0
  std::string reason;  // why not (empty when version > 0)
};

// This process's answer, asked once (cached); never throws.
NcclAvailability ncclAvailability();

// The rule behind it, for tests: a build with CUDA, a device, an NCCL that
// load() returns (or the kolo::Error it throws), its version and entry
// points.
NcclAvailability ncclAvailabilityOf(bool cudaBuilt, const DeviceProbe& devices,
                                    const std::function<const NcclLibrary&()>& load);

// The oldest NCCL the path takes: 2.14.3 (ncclCommInitRankConfig with
// blocking = 0, ncclCommFinalize).
inline constexpr int kNcclMinimumVersion = 21403;

struct NcclOptions {
  int rank = 0;  // this rank in the group, 0 <= rank < size
  int size = 1;  // the group's size
  // The global rank of each member, for messages (rank i is globalRanks[i]);
  // empty: the group's own numbers.
  std::vector<int> globalRanks;
  int device = 0;  // this rank's CUDA device
  // KOLO_TIMEOUT: the longest creation, and each collective, may take.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Unique per communicator and generation: the store keys' prefix.
  std::string key;
};

// Collective over the group: see the contract above.
std::unique_ptr<DeviceCollectives> makeNcclCollectives(const NcclOptions& options,
                                                       rendezvous::Store& store);

}  // namespace kolo::collectives::cuda
