// Collectives on CUDA device memory between the ranks of ONE host through
// CUDA IPC (docs/gpu.md, "CUDA IPC"): every rank maps its peers' buffers
// and the device kernels read and write them in place, zero copy, on the
// caller's stream. The ranks may share one GPU, or have GPUs with peer
// access (ipc_support.h says whether a group can be served).
//
// The contract is DeviceCollectives' (device_collectives.h); name() is
// "ipc". How each collective moves its data (each rank's work between
// cuda_ipc::IpcGroup's begin / await / finish, which order the ranks'
// streams and map the buffers):
// - allreduce: rank r owns slice r of the vector (boundaries on 256-byte
//   multiples); one kernel reads slice r of every rank's send and writes
//   the reduced slice (kAverage divided in the same pass) into slice r of
//   every rank's recv: n * S bytes read and n * S written in all, for
//   n ranks and S bytes. In place works element by element.
// - broadcast: every rank but the root copies the root's buffer into its
//   own (a pull: each rank writes only its own memory).
// - allgather: every rank copies each peer's send block into its own recv.
// - reduceScatter: rank r reduces block r of every rank's send into its
//   recv (one kernel).
// - alltoall: rank r copies block r of every peer's send into its recv
//   (the counts of every rank are checked against each other first: a
//   disagreement is Error(kMismatch) on every rank).
// Memory that cannot be exported (VMM allocations, a framework's
// expandable segments) is staged through a kolo-owned exported buffer: one
// more copy, same results.
//
// Buffer lifetime (beyond DeviceCollectives' contract): the peers keep the
// allocation of a buffer passed to a call mapped after the call (a cache
// keyed by the allocation), and CUDA makes a cudaFree of memory another
// process maps undefined: an allocation passed to a call must not be
// returned to CUDA (cudaFree; torch.cuda.empty_cache()) while the object
// lives. Reusing its memory for other data is fine.
//
// Status: the protocol ran between processes with a host double of the
// device (tests/cuda_ipc_protocol_test.cc, tests/cuda_ipc_check.cc under
// kolorun); the CUDA implementation (cuda_ipc_device.cc) and the kernel
// have been built but NOT run on a GPU.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/cuda/device_collectives.h"

namespace kolo::rendezvous {
class Store;
}
namespace kolo::cuda_ipc {
class IpcDevice;
}

namespace kolo::collectives::cuda {

struct IpcOptions {
  int localRank = 0;  // this rank among the host's ranks of the group
  int localSize = 1;
  std::vector<int> globalRanks;              // the group rank of each local rank (errors)
  int device = 0;                            // this rank's CUDA device ordinal
  std::chrono::milliseconds timeout{30000};  // KOLO_TIMEOUT
  std::string name;  // unique per job and group: store keys, segment names
  // Allreduce by ONE kernel of local rank 0 over the whole vector (the
  // others only take part in the synchronisation) instead of one slice per
  // rank: the same traffic, one kernel instead of n. For ranks sharing one
  // GPU, whose processes' kernels are time-sliced rather than run side by
  // side (without MPS); which is faster is measured by cuda_ipc_check
  // --bench (not yet run on a GPU). Every rank must pass the same value.
  bool oneWriter = false;
};

// Collective over the local ranks (every one calls it with its own
// localRank and the same localSize, globalRanks and name). Needs a build
// with CUDA and a device: otherwise Error(kInvalidArgument) saying why.
// rank() and size() of the result are localRank and localSize.
std::unique_ptr<DeviceCollectives> makeIpcCollectives(const IpcOptions& options,
                                                      rendezvous::Store& store);

// The same over any implementation of the device operations (tests run the
// protocol with a host double).
std::unique_ptr<DeviceCollectives> makeIpcCollectives(
    const IpcOptions& options, rendezvous::Store& store,
    std::shared_ptr<cuda_ipc::IpcDevice> device);

}  // namespace kolo::collectives::cuda
