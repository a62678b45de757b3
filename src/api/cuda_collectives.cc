// kolo/cuda_communicator.h: the device-memory forms of the collectives.
//
// None is implemented yet: the device reduction kernels exist
// (collectives/cuda/device_reduce.h), but no transport moves device memory
// (staging through host memory, CUDA IPC between ranks of one host, NCCL).
// Until one does, each call says exactly that, after the checks a caller
// can act on: the build, the device, the device number. Every check is
// local and gives the same answer on every rank of a job that passes the
// same arguments, so no rank is left waiting in a collective.
#include <kolo/cuda_communicator.h>

#include "collectives/cuda/device_runtime.h"
#include "common/check.h"

namespace kolo {
namespace {

namespace cuda = collectives::cuda;

[[noreturn]] void refuse(const char* operation, const CudaMemory& memory) {
  const std::string what = std::string(operation) + " on CUDA device memory";
  if (memory.device < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": device " << memory.device << " is not a CUDA device ordinal");
  }
  if (!cuda::built()) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": " << cuda::probeDevices().reason);
  }
  const cuda::DeviceProbe& probe = cuda::probeDevices();
  if (probe.count == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": no CUDA device: " << probe.reason);
  }
  if (memory.device >= probe.count) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": CUDA device " << memory.device
                                                 << " does not exist (" << probe.count
                                                 << " devices)");
  }
  KOLO_THROW(
      ErrorCode::kInvalidArgument,
      what << " is not implemented yet: this build has the CUDA reduction kernels, "
              "but no path that moves device memory between ranks (host staging, "
              "CUDA IPC or NCCL); pass host memory (docs/gpu.md)");
}

}  // namespace

CudaSupport cudaSupport() {
  CudaSupport support;
  support.built = cuda::built();
  support.devices = cuda::probeDevices().count;
  support.reason = cuda::probeDevices().reason;
  return support;
}

void allreduce(Communicator&, const AllreduceOptions&, const CudaMemory& memory) {
  refuse("allreduce", memory);
}

void broadcast(Communicator&, const BroadcastOptions&, const CudaMemory& memory) {
  refuse("broadcast", memory);
}

void allgather(Communicator&, const AllgatherOptions&, const CudaMemory& memory) {
  refuse("allgather", memory);
}

void reduceScatter(Communicator&, const ReduceScatterOptions&, const CudaMemory& memory) {
  refuse("reduce_scatter", memory);
}

void alltoall(Communicator&, const AlltoallOptions&, const CudaMemory& memory) {
  refuse("alltoall", memory);
}

}  // namespace kolo
