// kolo::Communicator's collectives on CUDA device memory (docs/gpu.md), and
// what the build and the machine have. The C form is kolo/cuda.h.
//
// Contract
// - A device-memory collective takes the Communicator call's options
//   (pointers are device pointers) plus a CudaMemory: the device the
//   buffers are on and the cudaStream_t (as void*) their data is ordered on.
//   Stream order: inputs are read after the work enqueued on the stream
//   before the call; results are ordered before the work enqueued after it.
// - Path (docs/gpu.md, "The paths"): an event recorded on the stream, and
//   on kolo's stream of the device after it either the communicator's
//   device path (CUDA IPC, NCCL, hierarchical: the collective on the
//   buffers themselves), or host staging (the inputs copied into pinned
//   host memory, the Communicator's collective on them, the results copied
//   into the outputs); the call returns once the outputs are written. No
//   device-wide synchronize. The segmented allreduce takes host memory
//   only. The device path is made at the communicator's first device call
//   (collective) and serves that device of each rank: a later call on
//   another device fails on every rank with Error(kInvalidArgument) naming
//   the rank and both devices (each call on a path first gathers the
//   ranks' devices).
// - Errors: Error(kInvalidArgument) naming the operation and the cause (a
//   build without CUDA, no CUDA device and the runtime's reason, a device
//   that does not exist, a negative ordinal), thrown on the calling rank
//   before any communication, the buffers untouched; Error(kInternal)
//   naming the CUDA call that failed.
// - cudaSupport() never throws; it asks the CUDA runtime once per process
//   and never creates a CUDA context.
#pragma once

#include <kolo/communicator.h>

#include <string>

namespace kolo {

struct CudaMemory {
  int device = 0;          // CUDA device ordinal every buffer is on
  void* stream = nullptr;  // cudaStream_t; nullptr: the legacy default stream
};

struct CudaSupport {
  bool built = false;   // libkolo was built with CUDA (KOLO_WITH_CUDA)
  int devices = 0;      // devices this process can use
  std::string reason;   // why devices is 0; empty otherwise
  int ncclVersion = 0;  // NCCL's version when it is usable as a backend (a
                        // build with CUDA where libnccl.so.2 >= 2.14.3
                        // loads), else 0
};

CudaSupport cudaSupport();

void allreduce(Communicator& comm, const AllreduceOptions& options,
               const CudaMemory& memory);
void broadcast(Communicator& comm, const BroadcastOptions& options,
               const CudaMemory& memory);
void allgather(Communicator& comm, const AllgatherOptions& options,
               const CudaMemory& memory);
void reduceScatter(Communicator& comm, const ReduceScatterOptions& options,
                   const CudaMemory& memory);
void alltoall(Communicator& comm, const AlltoallOptions& options,
              const CudaMemory& memory);

}  // namespace kolo
