// The C API of kolo/cuda.h: the build's CUDA and NCCL, the devices, and the
// `_cuda` collectives, which bind kolo/cuda_communicator.h (each checks its
// C arguments here, then its device memory there).
#include <kolo/cuda.h>
#include <kolo/cuda_communicator.h>

#include <cstring>
#include <string>

#include "capi/capi_internal.h"
#include "collectives/cuda/device_pointer.h"
#include "collectives/cuda/device_runtime.h"

namespace {

using kolo::capi::fail;

// A C caller may pass any int as an enum: read its bytes (kolo_c.cc does
// the same for kolo.h's calls).
template <typename T>
int rawValue(const T& v) {
  static_assert(sizeof(T) == sizeof(int));
  int raw;
  std::memcpy(&raw, &v, sizeof raw);
  return raw;
}

// KOLO_OK, or the code of the first bad C argument (dtype, op, memory).
// The enums by reference: copying one that holds a value outside its
// enumerators would already be undefined (UBSan reports the load).
int checkArguments(const char* name, const kolo_dtype& dtype, const kolo_op* op,
                   const kolo_cuda_memory* memory) {
  if (rawValue(dtype) < 0 || rawValue(dtype) >= kolo::kNumDataTypes) {
    return fail(KOLO_ERR_INVALID_ARGUMENT, std::string(name) + ": unknown dtype value " +
                                               std::to_string(rawValue(dtype)));
  }
  if (op != nullptr && (rawValue(*op) < 0 || rawValue(*op) >= kolo::kNumReduceOps)) {
    return fail(KOLO_ERR_INVALID_ARGUMENT, std::string(name) + ": unknown op value " +
                                               std::to_string(rawValue(*op)));
  }
  if (memory == nullptr) {
    return fail(
        KOLO_ERR_INVALID_ARGUMENT,
        std::string(name) + ": memory is null (the device and stream of the buffers)");
  }
  return KOLO_OK;
}

kolo::CudaMemory toCpp(const kolo_cuda_memory* memory) {
  kolo::CudaMemory m;
  m.device = memory->device;
  m.stream = memory->stream;
  return m;
}

}  // namespace

int kolo::capi::refuseDevicePointer(const char* fn, const char* what, const void* p) {
  const int device = kolo::collectives::cuda::devicePointerOrdinal(p);
  if (device < 0) return KOLO_OK;
  return fail(KOLO_ERR_INVALID_ARGUMENT,
              std::string(fn) + ": " + what + " is CUDA device memory (device " +
                  std::to_string(device) + "): this call takes host memory; use " + fn +
                  "_cuda (docs/gpu.md)");
}

extern "C" {

int kolo_cuda_built(void) {
  return kolo::collectives::cuda::built() ? 1 : 0;
}

int kolo_nccl_built(void) {
  return kolo::cudaSupport().ncclVersion;
}

int kolo_cuda_device_count(int* count, const char** reason) {
  if (count == nullptr) {
    return fail(KOLO_ERR_INVALID_ARGUMENT, "kolo_cuda_device_count: count is null");
  }
  const auto& probe = kolo::collectives::cuda::probeDevices();
  *count = probe.count;
  if (reason != nullptr) *reason = probe.reason.c_str();
  return KOLO_OK;
}

int kolo_allreduce_cuda(const void* send, void* recv, size_t count, kolo_dtype dtype,
                        kolo_op op, const kolo_cuda_memory* memory) {
  constexpr const char* kName = "kolo_allreduce_cuda";
  if (int rc = checkArguments(kName, dtype, &op, memory); rc != KOLO_OK) return rc;
  return kolo::capi::callOnWorld(kName, [&](kolo::Communicator& c) {
    kolo::AllreduceOptions o;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    o.op = static_cast<kolo::ReduceOp>(op);
    kolo::allreduce(c, o, toCpp(memory));
  });
}

int kolo_broadcast_cuda(void* buf, size_t count, kolo_dtype dtype, int root,
                        const kolo_cuda_memory* memory) {
  constexpr const char* kName = "kolo_broadcast_cuda";
  if (int rc = checkArguments(kName, dtype, nullptr, memory); rc != KOLO_OK) return rc;
  return kolo::capi::callOnWorld(kName, [&](kolo::Communicator& c) {
    kolo::BroadcastOptions o;
    o.buffer = buf;
    o.count = count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    o.root = root;
    kolo::broadcast(c, o, toCpp(memory));
  });
}

int kolo_allgather_cuda(const void* send, void* recv, size_t count, kolo_dtype dtype,
                        const kolo_cuda_memory* memory) {
  constexpr const char* kName = "kolo_allgather_cuda";
  if (int rc = checkArguments(kName, dtype, nullptr, memory); rc != KOLO_OK) return rc;
  return kolo::capi::callOnWorld(kName, [&](kolo::Communicator& c) {
    kolo::AllgatherOptions o;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    kolo::allgather(c, o, toCpp(memory));
  });
}

int kolo_reduce_scatter_cuda(const void* send, void* recv, size_t recv_count,
                             kolo_dtype dtype, kolo_op op,
                             const kolo_cuda_memory* memory) {
  constexpr const char* kName = "kolo_reduce_scatter_cuda";
  if (int rc = checkArguments(kName, dtype, &op, memory); rc != KOLO_OK) return rc;
  return kolo::capi::callOnWorld(kName, [&](kolo::Communicator& c) {
    kolo::ReduceScatterOptions o;
    o.send = send;
    o.recv = recv;
    o.recvCount = recv_count;
    o.dtype = static_cast<kolo::DataType>(dtype);
    o.op = static_cast<kolo::ReduceOp>(op);
    kolo::reduceScatter(c, o, toCpp(memory));
  });
}

int kolo_alltoall_cuda(const void* send, void* recv, size_t count_per_rank,
                       kolo_dtype dtype, const kolo_cuda_memory* memory) {
  constexpr const char* kName = "kolo_alltoall_cuda";
  if (int rc = checkArguments(kName, dtype, nullptr, memory); rc != KOLO_OK) return rc;
  return kolo::capi::callOnWorld(kName, [&](kolo::Communicator& c) {
    kolo::AlltoallOptions o;
    o.send = send;
    o.recv = recv;
    o.countPerRank = count_per_rank;
    o.dtype = static_cast<kolo::DataType>(dtype);
    kolo::alltoall(c, o, toCpp(memory));
  });
}

}  // extern "C"
