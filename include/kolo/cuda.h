/* kolo C API, part 3: GPUs (docs/gpu.md).
 *
 * What the build has, and collectives on CUDA device memory. Device memory
 * is named by a pointer plus a kolo_cuda_memory: the CUDA device the
 * buffers are on and the CUDA stream their data is ordered on. The calls of
 * kolo.h take host memory only and are unchanged; each has a `_cuda` form
 * here with one more argument.
 *
 * Stream order: a `_cuda` collective reads its inputs after the work
 * enqueued on `stream` before the call, and its results are ordered before
 * the work enqueued on `stream` after it returns (cudaStreamSynchronize
 * before reading them on the host). The stream is a cudaStream_t passed as
 * void*, so this header needs no CUDA header; NULL is the legacy default
 * stream.
 *
 * Path: host staging (docs/gpu.md, "The host-staged path"). A `_cuda` call
 * records a CUDA event on `stream`, copies the inputs into pinned host
 * memory on kolo's own stream after that event, runs the collective of
 * kolo.h on them, copies the results into the outputs, and returns once
 * they are there (so work enqueued on `stream` afterwards sees them). No
 * device-wide synchronize. The runtime's asynchronous forms are in
 * kolo/runtime.h (kolo_allreduce_async_cuda, ...).
 *
 * Errors (KOLO_ERR_INVALID_ARGUMENT, kolo_last_error() naming the operation
 * and the cause, the buffers untouched): a build without CUDA, no CUDA
 * device (and why), a device that does not exist, a null `memory`. The
 * checks are local: every rank given the same arguments answers alike.
 *
 * A device pointer given to a call of kolo.h (kolo_allreduce given
 * cudaMalloc memory) is refused by name when the CUDA driver is loaded in
 * the process (it is asked nothing otherwise: no cost for CPU-only jobs).
 */
#ifndef KOLO_CUDA_H_
#define KOLO_CUDA_H_

#include <stddef.h>

#include "kolo/kolo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int device;   /* CUDA device ordinal every buffer of the call is on (>= 0) */
  void* stream; /* cudaStream_t the buffers' data is ordered on; NULL: default */
} kolo_cuda_memory;

/* 1 when this libkolo was built with CUDA (KOLO_WITH_CUDA), else 0. Needs no
 * kolo_init; never fails. */
int kolo_cuda_built(void);

/* The NCCL version code (e.g. 22809 for 2.28.9) when NCCL is usable as a
 * backend: this libkolo was built with CUDA and libnccl.so.2, 2.14.3 or
 * later, loads with every entry point kolo calls; else 0. About the build
 * and its library, not the machine (kolo_cuda_device_count says whether
 * there is a device). Needs no kolo_init; creates no CUDA context. */
int kolo_nccl_built(void);

/* The CUDA devices this process can use: *count (0 without CUDA, a driver or
 * a device) and, when 0, *reason saying why (a static string, valid for the
 * life of the process; "" when *count > 0). Asks the CUDA runtime once and
 * caches the answer; never creates a CUDA context. Needs no kolo_init.
 * KOLO_ERR_INVALID_ARGUMENT when count is NULL; reason may be NULL. */
int kolo_cuda_device_count(int* count, const char** reason);

/* The collectives of kolo.h on device memory (same arguments, same
 * meaning, plus `memory`, which must not be NULL). */
int kolo_allreduce_cuda(const void* send, void* recv, size_t count, kolo_dtype dtype,
                        kolo_op op, const kolo_cuda_memory* memory);
int kolo_broadcast_cuda(void* buf, size_t count, kolo_dtype dtype, int root,
                        const kolo_cuda_memory* memory);
int kolo_allgather_cuda(const void* send, void* recv, size_t count, kolo_dtype dtype,
                        const kolo_cuda_memory* memory);
int kolo_reduce_scatter_cuda(const void* send, void* recv, size_t recv_count,
                             kolo_dtype dtype, kolo_op op,
                             const kolo_cuda_memory* memory);
int kolo_alltoall_cuda(const void* send, void* recv, size_t count_per_rank,
                       kolo_dtype dtype, const kolo_cuda_memory* memory);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_CUDA_H_ */
