// Collectives that keep CUDA device memory on the devices (docs/gpu.md,
// "The paths"): CUDA IPC between the ranks of a host
// (transport/cuda_ipc/), NCCL with one rank per GPU (nccl_collectives.h),
// and the hierarchical composition of either with kolo's host transports
// between hosts. The host-staged path (device_staging.h) is not one of
// them: it is what runs where none is chosen (device_path.h chooses).
//
// Plain C++ (no CUDA header): streams are cudaStream_t passed as void*.
//
// Contract
// - An object serves one group of ranks (a communicator: the job, a team,
//   a process set) and one device of this rank (device()); it is made
//   collectively by every member of the group and used by one thread at a
//   time.
// - Every call is collective: every member calls it in the same order with
//   agreeing arguments (counts, dtype, op, root); the caller guarantees
//   this (the runtime's negotiation, or the synchronous API's descriptor
//   check before the call).
// - Buffers are memory on device() that the CUDA runtime can address
//   (cudaMalloc'd, the caching allocator's blocks of a framework). A call
//   reads its inputs after the work enqueued on `stream` before the call
//   (stream order), and returns once its outputs are written: on return
//   any stream, and the host after a cudaStreamSynchronize of `stream`, may
//   read them. It may enqueue work on `stream` and on streams of its own.
// - Counts are elements of `dtype`. In place: send == recv (allreduce;
//   allgather's send at this rank's block of recv).
// - kAverage: the sum divided by the group's size, in the dtype's compute
//   precision, as the CPU collectives do (reduce.h).
// - Errors (never a hang): a lost peer, a peer silent past KOLO_TIMEOUT, an
//   NCCL error (asynchronous ones included) or a CUDA error fail the call
//   with kolo::Error naming this rank, the peer where known, and the cause
//   (kPeerLost, kTimeout, kInternal); the object is then broken and every
//   later call throws the same error.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <string_view>
#include <vector>

namespace kolo::collectives::cuda {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;

  // "ipc", "nccl" or "hier": the path's name in logs, the timeline and
  // errors.
  virtual std::string_view name() const = 0;
  // The CUDA device of this rank's buffers.
  virtual int device() const = 0;
  // This rank in the group, and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // recv[i] = send_0[i] (op) ... (op) send_{size-1}[i].
  virtual void allreduce(const void* send, void* recv, size_t count, DataType dtype,
                         ReduceOp op, void* stream) = 0;
  // buffer on every rank = buffer on `root`.
  virtual void broadcast(void* buffer, size_t count, DataType dtype, int root,
                         void* stream) = 0;
  // counts[i] elements from rank i, at the prefix sum of counts in recv;
  // send holds counts[rank()] elements.
  virtual void allgather(const void* send, void* recv, const std::vector<size_t>& counts,
                         DataType dtype, void* stream) = 0;
  // send holds size() blocks, block i of counts[i] elements; recv gets the
  // reduction of every rank's block rank() (counts[rank()] elements).
  virtual void reduceScatter(const void* send, void* recv,
                             const std::vector<size_t>& counts, DataType dtype,
                             ReduceOp op, void* stream) = 0;
  // sendCounts[j] elements of send (at its prefix sum) go to rank j;
  // recvCounts[i] elements from rank i land in recv (at its prefix sum).
  // Every rank's sendCounts[j] equals rank j's recvCounts[rank].
  virtual void alltoall(const void* send, const std::vector<size_t>& sendCounts,
                        void* recv, const std::vector<size_t>& recvCounts, DataType dtype,
                        void* stream) = 0;
};

}  // namespace kolo::collectives::cuda
