// The CUDA implementation of cuda_ipc::IpcDevice (transport/cuda_ipc/
// ipc_device.h), for makeIpcCollectives (ipc_collectives.h).
//
// - locate(): the driver's cuPointerGetAttributes (RANGE_START_ADDR,
//   RANGE_SIZE, BUFFER_ID, DEVICE_ORDINAL), reached with dlsym in the
//   libcuda.so.1 the CUDA runtime loaded, as device_pointer.cc does.
// - exportMemory / openMemory / closeMemory: cudaIpcGetMemHandle,
//   cudaIpcOpenMemHandle(cudaIpcMemLazyEnablePeerAccess: peers on other
//   GPUs with peer access; ranks on one GPU need none),
//   cudaIpcCloseMemHandle. cudaIpcGetMemHandle refuses virtual-memory
//   allocations (cuMemCreate, PyTorch's expandable segments): false, and
//   the collective stages through allocate()'s cudaMalloc memory.
// - events: cudaEventCreateWithFlags(cudaEventInterprocess |
//   cudaEventDisableTiming), cudaIpcGetEventHandle, cudaIpcOpenEventHandle,
//   cudaEventRecord, cudaStreamWaitEvent, cudaEventQuery.
// - copy: cudaMemcpyAsync; reduce: device_reduce.h's reduceToMany.
// Every call makes `device` current for its duration (and restores the
// caller's). Errors: Error(kInternal) naming the call, the device and the
// CUDA error. Built in builds with CUDA; NOT yet run on a GPU.
// In a build without CUDA makeCudaIpcDevice throws Error(kInvalidArgument)
// ("no CUDA support").
#pragma once

#include <memory>

#include "transport/cuda_ipc/ipc_device.h"

namespace kolo::collectives::cuda {

// Throws Error(kInvalidArgument) when there is no such device (the probe's
// reason) or the build has no CUDA.
std::shared_ptr<cuda_ipc::IpcDevice> makeCudaIpcDevice(int device);

}  // namespace kolo::collectives::cuda
