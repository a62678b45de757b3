/* kolo C API: collectives for distributed training, in the style of MPI.
 *
 * Every call returns KOLO_OK (0) or a non-zero error code from kolo_error;
 * kolo_last_error() gives the message of the last failure on the calling
 * thread. Calls other than kolo_init, kolo_last_error and kolo_error_name
 * fail with KOLO_ERR_NOT_INITIALIZED before kolo_init has succeeded.
 *
 * Thread safety: the process has one communicator; calls on it are
 * serialised internally, so they may come from any thread.
 */
#ifndef KOLO_KOLO_H_
#define KOLO_KOLO_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  KOLO_FLOAT32,
  KOLO_FLOAT64,
  KOLO_FLOAT16,
  KOLO_BFLOAT16,
  KOLO_INT32,
  KOLO_INT64,
  KOLO_UINT8
} kolo_dtype;

typedef enum { KOLO_SUM, KOLO_AVG, KOLO_MIN, KOLO_MAX, KOLO_PROD } kolo_op;

#define KOLO_OK 0 /* every call returns KOLO_OK or a non-zero error code */

/* The non-zero codes; they match kolo::ErrorCode. */
typedef enum {
  KOLO_ERR_INVALID_ARGUMENT = 1, /* null buffer, bad dtype/op/root, overflow */
  KOLO_ERR_NOT_INITIALIZED = 2,  /* call before kolo_init or after finalize */
  KOLO_ERR_ALREADY_INITIALIZED = 3,
  KOLO_ERR_MISMATCH = 4,  /* ranks disagree on count, dtype, op, root */
  KOLO_ERR_PEER_LOST = 5, /* a peer process died or closed its link */
  KOLO_ERR_TIMEOUT = 6,   /* a peer stopped answering (KOLO_TIMEOUT) */
  KOLO_ERR_IO = 7,        /* socket, shared memory or file failure */
  KOLO_ERR_INTERNAL = 8   /* a broken invariant inside kolo */
} kolo_error;

int kolo_init(void); /* layout from the environment (kolorun, mpirun, srun, torchrun) */
int kolo_finalize(void);
int kolo_initialized(void); /* 1 after a successful kolo_init, else 0 */

int kolo_rank(void);
int kolo_size(void);
int kolo_local_rank(void);
int kolo_local_size(void);
int kolo_cross_rank(void);
int kolo_cross_size(void);

int kolo_allreduce(const void* send, void* recv, size_t count, kolo_dtype dtype,
                   kolo_op op); /* send == recv: in place */
int kolo_broadcast(void* buf, size_t count, kolo_dtype dtype, int root);
int kolo_allgather(const void* send, void* recv, size_t count,
                   kolo_dtype dtype); /* recv holds size*count */
/* Varying sizes: rank i contributes counts[i] elements; recv holds their sum. */
int kolo_allgatherv(const void* send, void* recv, const size_t* counts, kolo_dtype dtype);
int kolo_reduce_scatter(const void* send, void* recv, size_t recv_count, kolo_dtype dtype,
                        kolo_op op);
int kolo_alltoall(const void* send, void* recv, size_t count_per_rank, kolo_dtype dtype);
int kolo_barrier(void);

/* Point to point, blocking, among every rank (kolo_isend / kolo_irecv in
 * kolo/runtime.h: the contract, and process sets). Not collective.
 * kolo_send returns once `buf` may be reused, kolo_recv once it holds the
 * message; count and dtype must match the sender's (else
 * KOLO_ERR_MISMATCH naming both ranks). Tags >= 0, matched in order. */
int kolo_send(const void* buf, size_t count, kolo_dtype dtype, int peer, int tag);
int kolo_recv(void* buf, size_t count, kolo_dtype dtype, int peer, int tag);

/* Elastic jobs (kolorun --min-np, docs/elastic.md). kolo_elastic_world:
 * the generation of this process's world (1, 2, ... as the launcher forms
 * them; 0 outside an elastic job, before kolo_init or after kolo_finalize)
 * and the launcher's host-update counters when it formed that world.
 * kolo_elastic_host_updates: the counters now (how many times the
 * discovered hosts changed, and how many of those changes added a host; one
 * round trip to the launcher's store, KOLO_ERR_IO when it cannot be reached;
 * 0 and 0 where the generation is 0). Counters above the world's mean the
 * hosts changed since. */
int kolo_elastic_world(int64_t* generation, int64_t* updates, int64_t* additions);
int kolo_elastic_host_updates(int64_t* updates, int64_t* additions);

/* kolo.hpo studies (docs/hpo.md). kolo_study_declare(1) tells kolorun that
 * this rank now runs a study: while it holds, this rank's failure (other
 * than rank 0's) fails only its team's trial and does not end the job;
 * kolo_study_declare(0) withdraws it (declarations nest: a count). One
 * round trip to kolorun's store (KOLO_ERR_IO, ... when it cannot be
 * reached). *launcher_told (may be NULL): 1 when kolorun hosts the
 * store and was told, 0 when the job has no kolorun to tell (mpirun,
 * srun, torchrun, an elastic job): nothing is done then. */
int kolo_study_declare(int inside, int* launcher_told);

const char* kolo_last_error(void); /* why the last call on this thread failed */
const char* kolo_error_name(int code);

/* The layout queries (kolo_rank, kolo_size, ...) return -1 when not
 * initialized; they never change kolo_last_error(), whose string stays valid
 * until the next failing call (one that returns an error code) on the same
 * thread. */

#ifdef __cplusplus
}
#endif

#endif /* KOLO_KOLO_H_ */
