/* kolo C API, part 2: named asynchronous operations through the runtime
 * (docs/runtime.md), for frameworks: the Python package binds this.
 *
 * After kolo_init() a background runtime serves the global process set (id
 * 0). Operations are submitted by name from any thread and return at once
 * with a handle; every rank must submit the same names (in any order) for
 * them to run. Ready allreduces are fused. Buffers must stay valid and
 * unchanged until the handle is done.
 *
 * Every call returns KOLO_OK or an error code (kolo.h); kolo_last_error()
 * says why. A bad argument (null or empty name, unknown dtype or op, null
 * buffer, root outside the set, a first dimension that does not divide,
 * a name already pending on this rank, an unknown process set) is returned
 * by the submitting call itself, and no handle is made. A failed
 * operation's error (mismatch across ranks, lost peer, shutdown) is
 * returned by kolo_wait() with its message in kolo_last_error().
 *
 * Lifetime: the runtime of set 0 starts in kolo_init (on every rank: its
 * cycles are collective) on its own communicator, so the synchronous calls
 * of kolo.h never interleave with it. kolo_finalize shuts every runtime
 * down (what is pending fails) and forgets every handle and process set;
 * later calls return KOLO_ERR_NOT_INITIALIZED. Buffers given to an
 * operation must stay valid until it ends, even if its handle is released.
 *
 * Thread safety: every call may come from any thread. Create and destroy
 * process sets from one thread at a time.
 *
 * Shapes: `ndim` dimensions in `shape` (ndim 0: a scalar). Allgather and
 * alltoall may differ in the first dimension across ranks; their output is
 * allocated by kolo and read with kolo_handle_output().
 */
#ifndef KOLO_RUNTIME_H_
#define KOLO_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "kolo/cuda.h"
#include "kolo/kolo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int64_t kolo_handle; /* > 0; 0 is never a valid handle */

/* --- process sets (teams). Id 0 is every rank. ---------------------------
 * kolo_process_set_create is collective over the listed ranks only (each
 * member calls it with the same list, in the same order); non-members must
 * not call it. The new set has its own background runtime.
 * Ids: the members agree on the id (one exchange at creation: the largest
 * of their next free ids), so it is the same on every member and never
 * reused within a process. Members must create (and destroy) their sets in
 * the same order relative to each other. Only members know a set: on any
 * other rank its id is unknown (kolo_process_set_rank gives -1, other
 * calls KOLO_ERR_INVALID_ARGUMENT). kolo_process_set_destroy fails what is
 * pending in the set; id 0 cannot be destroyed. */
int kolo_process_set_create(const int* ranks, int n, int* id);
int kolo_process_set_destroy(int id);         /* collective over its members */
int kolo_process_set_rank(int id, int* rank); /* this rank's index, -1 if not a member */
int kolo_process_set_size(int id, int* size);

/* --- submission ------------------------------------------------------------
 * prescale/postscale multiply input and output (1.0: none). KOLO_AVG
 * divides by the number of contributing ranks (joined ranks excluded). */
int kolo_allreduce_async(const char* name, const void* send, void* recv, int ndim,
                         const int64_t* shape, kolo_dtype dtype, kolo_op op,
                         double prescale, double postscale, int process_set,
                         kolo_handle* handle);

/* n allreduces that always run together (one fusion bucket). */
int kolo_grouped_allreduce_async(int n, const char* const* names,
                                 const void* const* sends, void* const* recvs,
                                 const int* ndims, const int64_t* const* shapes,
                                 kolo_dtype dtype, kolo_op op, double prescale,
                                 double postscale, int process_set, kolo_handle* handles);

/* Output: the ranks' tensors concatenated along the first dimension. */
int kolo_allgather_async(const char* name, const void* send, int ndim,
                         const int64_t* shape, kolo_dtype dtype, int process_set,
                         kolo_handle* handle);

int kolo_broadcast_async(const char* name, void* buf, int ndim, const int64_t* shape,
                         kolo_dtype dtype, int root, int process_set,
                         kolo_handle* handle);

/* splits: rows of the first dimension sent to each rank (nsplits = set
 * size), or NULL for an equal split. Output: the rows received, in rank
 * order; kolo_handle_output's shape gives their count. */
int kolo_alltoall_async(const char* name, const void* send, int ndim,
                        const int64_t* shape, const int64_t* splits, int nsplits,
                        kolo_dtype dtype, int process_set, kolo_handle* handle);

/* The first dimension must divide by the set size; output: this rank's
 * reduced block (first dimension / size). */
int kolo_reducescatter_async(const char* name, const void* send, int ndim,
                             const int64_t* shape, kolo_dtype dtype, kolo_op op,
                             int process_set, kolo_handle* handle);

/* Barriers of a set are matched by their order: the n-th call on every
 * member. */
int kolo_barrier_async(int process_set, kolo_handle* handle);

/* This rank has run out of data: it contributes zeros to the others'
 * allreduces until every rank of the set has joined; then the handle is
 * done. */
int kolo_join_async(int process_set, kolo_handle* handle);

/* --- CUDA device memory (docs/gpu.md, "The paths") ----------------------
 * The submissions above on CUDA device memory: the same arguments, the
 * same meaning, plus `memory` (not NULL): the device every buffer of the
 * call is on and the cudaStream_t (as void*) their data is ordered on.
 * The inputs are read after the work enqueued on memory->stream before the
 * call (kolo records a CUDA event there); on kolo's own stream the
 * collective runs on the device path of the process set (CUDA IPC, NCCL,
 * hierarchical) when it has one, else staged through pinned host memory
 * into the CPU collective. A device path serves one device per rank (the
 * device of the first device operation every rank submitted): a tensor on
 * another device fails that operation on every rank, naming the tensor,
 * the rank and both devices. The handle is
 * done when the results are in the device outputs (recv / buf): after
 * kolo_wait returns, work on any stream may read them; nothing is enqueued
 * on the caller's stream. Allgather, alltoall and reducescatter: the output
 * read with kolo_handle_output is HOST memory (kolo's, as for the host
 * calls); the caller copies it to the device (a binding does).
 * Device tensors fuse only with device tensors (dtype, op and scale
 * factors alike, as for host tensors), never with host memory; a fused
 * bucket's neighbours on one device move to the host in one copy. A build
 * without CUDA, no device, or a device that does not exist: the call
 * returns KOLO_ERR_INVALID_ARGUMENT naming the call, the tensor, the
 * operation and the cause, and makes no handle. A host call above given
 * CUDA device memory is refused the same way (when the CUDA driver is
 * loaded in the process). Ranks must agree on host or device memory per
 * name (else kolo_wait gives KOLO_ERR_MISMATCH naming "memory"). */
int kolo_allreduce_async_cuda(const char* name, const void* send, void* recv, int ndim,
                              const int64_t* shape, kolo_dtype dtype, kolo_op op,
                              double prescale, double postscale, int process_set,
                              kolo_handle* handle, const kolo_cuda_memory* memory);
int kolo_grouped_allreduce_async_cuda(int n, const char* const* names,
                                      const void* const* sends, void* const* recvs,
                                      const int* ndims, const int64_t* const* shapes,
                                      kolo_dtype dtype, kolo_op op, double prescale,
                                      double postscale, int process_set,
                                      kolo_handle* handles,
                                      const kolo_cuda_memory* memory);
int kolo_allgather_async_cuda(const char* name, const void* send, int ndim,
                              const int64_t* shape, kolo_dtype dtype, int process_set,
                              kolo_handle* handle, const kolo_cuda_memory* memory);
int kolo_broadcast_async_cuda(const char* name, void* buf, int ndim, const int64_t* shape,
                              kolo_dtype dtype, int root, int process_set,
                              kolo_handle* handle, const kolo_cuda_memory* memory);
int kolo_alltoall_async_cuda(const char* name, const void* send, int ndim,
                             const int64_t* shape, const int64_t* splits, int nsplits,
                             kolo_dtype dtype, int process_set, kolo_handle* handle,
                             const kolo_cuda_memory* memory);
int kolo_reducescatter_async_cuda(const char* name, const void* send, int ndim,
                                  const int64_t* shape, kolo_dtype dtype, kolo_op op,
                                  int process_set, kolo_handle* handle,
                                  const kolo_cuda_memory* memory);
/* The CUDA event (a cudaEvent_t as void*) recorded on kolo's stream after
 * the results were copied into the device outputs, for a caller that
 * orders a stream on it (cudaStreamWaitEvent) instead of waiting on the
 * host. *event is set once the handle is done (NULL while pending, for a
 * host operation, or when the operation failed); it is valid until
 * kolo_release. */
int kolo_handle_cuda_event(kolo_handle handle, void** event);

/* --- point to point ------------------------------------------------------
 * Non-blocking kolo_send / kolo_recv (kolo.h) within a process set: `peer`
 * is a rank of the set (id 0: every rank; kolo_send and kolo_recv are
 * these on set 0, waited for). Not collective: only the two ranks take
 * part. Messages from one rank to another in one set with the same tag
 * are received in the order sent; the receive's count and dtype must equal
 * the send's, else kolo_wait returns KOLO_ERR_MISMATCH naming both ranks,
 * counts and dtypes (the buffer untouched). A receive from a rank that died
 * fails with KOLO_ERR_PEER_LOST naming it (a silent one: KOLO_ERR_TIMEOUT
 * after KOLO_TIMEOUT). Bad arguments (peer outside the set or this rank
 * itself, negative tag, null buffer with a count, unknown set) are returned
 * by the call itself. The handle is completed by kolo_wait, kolo_poll and
 * kolo_wait_release, which move the messages (the transfer progresses
 * while this rank is inside a kolo call); kolo_handle_notify is refused.
 * Buffers stay in use until the handle is done, even when released. */
int kolo_isend(const void* buf, size_t count, kolo_dtype dtype, int peer, int tag,
               int process_set, kolo_handle* handle);
int kolo_irecv(void* buf, size_t count, kolo_dtype dtype, int peer, int tag,
               int process_set, kolo_handle* handle);

/* --- completion --------------------------------------------------------
 * An unknown (or released) handle is KOLO_ERR_INVALID_ARGUMENT. */
int kolo_poll(kolo_handle handle, int* done); /* *done = 1 when finished */
/* Blocks until done; returns the operation's result code, and its message
 * in kolo_last_error() on the calling thread. Any number of times, from any
 * thread. */
int kolo_wait(kolo_handle handle);
/* For allgather, alltoall and reducescatter: the output kolo allocated,
 * valid until kolo_release() (or kolo_finalize). *shape points at *ndim
 * values. KOLO_ERR_INVALID_ARGUMENT while pending or for other kinds; a
 * failed operation returns its error. */
int kolo_handle_output(kolo_handle handle, const void** data, size_t* bytes, int* ndim,
                       const int64_t** shape);
/* Frees the handle (and its output). Releasing a pending handle is
 * allowed: the operation still runs, its result is discarded. */
int kolo_release(kolo_handle handle);
/* kolo_wait then kolo_release in one call (one look-up of the handle, the
 * hot path of a training step): blocks until done, frees the handle
 * whatever the outcome, and returns the operation's result code (its
 * message in kolo_last_error()). One thread per handle: the handle is
 * unknown to other calls from the moment this one starts. */
int kolo_wait_release(kolo_handle handle);

/* Calls fn(arg) once when the operation ends (success or failure): on the
 * runtime's thread right after it ends, or at once on the calling thread
 * when it has ended already. fn must be quick and must not block on kolo
 * (hand real work to a thread of your own); it may call kolo_wait (which
 * then returns at once with the result), kolo_handle_output and
 * kolo_release on this handle. One callback per handle: a second is
 * KOLO_ERR_INVALID_ARGUMENT. For frameworks whose kernels complete through
 * a callback (TensorFlow's AsyncOpKernel). */
typedef void (*kolo_done_fn)(void* arg);
int kolo_handle_notify(kolo_handle handle, kolo_done_fn fn, void* arg);

/* --- tools --------------------------------------------------------------- */
/* Chrome trace (Perfetto) of set 0's operations as this rank sees them,
 * written to `path` by the calling rank (ranks sharing a file system give
 * different paths, or only rank 0 calls it). Replaces a running timeline;
 * ends at kolo_stop_timeline or kolo_finalize. */
int kolo_start_timeline(const char* path);
int kolo_stop_timeline(void);

/* Spans of a framework's own phases on the running timeline (e.g. a
 * pipeline stage's FORWARD of micro-batch 3): kolo_timeline_begin opens
 * `phase` on the track named `track` of this rank (the track is made at its
 * first event), with `num_args` string fields (arg_keys[i]: arg_values[i])
 * as the event's args; kolo_timeline_end closes the track's innermost open
 * span. Timestamps are taken at the call. Without a running timeline both
 * do nothing and return KOLO_OK; *active of kolo_timeline_active says
 * whether one runs (to skip building the arguments). Empty or null
 * track/phase, or num_args < 0, is KOLO_ERR_INVALID_ARGUMENT. */
int kolo_timeline_begin(const char* track, const char* phase, const char* const* arg_keys,
                        const char* const* arg_values, int num_args);
int kolo_timeline_end(const char* track);
int kolo_timeline_active(int* active);

typedef struct {
  int64_t operations;      /* operations this rank took part in */
  int64_t times_last;      /* ... in which it arrived last */
  double mean_lag_seconds; /* by how long, on average, when last */
  double max_lag_seconds;
} kolo_rank_lag;

/* Fills lags[0..size-1] (size = the set's size) for process set `id`. */
int kolo_straggler_report(int process_set, kolo_rank_lag* lags, int size);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_RUNTIME_H_ */
