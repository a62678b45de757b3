/* kolo's parameter servers, C API (docs/parameter_server.md). Used by
 * kolo.torch.ps. Every call returns a kolo_error code; kolo_last_error()
 * says why. Call from one thread; only on a worker of a job started with
 * servers (kolorun --servers S, KOLO_SERVERS=S), after kolo_init.
 *
 * One parameter-server client per process: kolo_ps_start makes it (sending
 * the configuration, worker 0 seeding the servers, every worker pulling),
 * and it lives until kolo_finalize. Tensors are float32 buffers given as
 * pointers with their element counts, in the same order on every worker. */
#ifndef KOLO_PS_H_
#define KOLO_PS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kolo_ps_options {
  const char* mode;      /* "sync", "downpour", "easgd" */
  const char* optimizer; /* "SGD", "Adam", "AdamW", "RMSprop" */
  float lr, weight_decay, momentum, dampening;
  int nesterov;
  float beta1, beta2, eps, alpha;
  int centered;
  int staleness_bound, backup_workers;
  float easgd_alpha;
  int push_period, pull_period, easgd_period;
  /* Workers that push: with groups (kolo.torch.ps group_size), the number of
   * group leaders, the only workers that push; 0: every worker. */
  int pushers;
  /* Validating workers, the last ones (kolo_ps_validators gives the job's
   * count, from kolorun --validators V / KOLO_VALIDATORS); 0: none. */
  int validators;
} kolo_ps_options;

/* Number of servers of this job (0: none). */
int kolo_ps_servers(int* out);
int kolo_ps_start(const kolo_ps_options* options, size_t tensors, float* const* params,
                  const uint64_t* counts);
/* The mode's step once grads hold this step's gradients; lr: this step's. */
int kolo_ps_step(float* const* params, const float* const* grads, float lr);
int kolo_ps_pull(float* const* params);
/* easgd: one elastic exchange of params with the center now, whatever
 * easgd_period says (params -= alpha * (params - center); the center moves
 * by as much). A group leader exchanges its group center this way. */
int kolo_ps_exchange(float* const* params);
int kolo_ps_staleness(uint64_t* out);
/* Per server s: version, updates, rejected, max staleness, then W push
 * counts and W pull counts; (4 + 2W) values per server. *written: the count
 * of values; capacity too small is KOLO_ERR_INVALID_ARGUMENT. */
int kolo_ps_stats(uint64_t* out, size_t capacity, size_t* written);
/* Checkpoints (docs/parameter_server.md, "Checkpoints"). kolo_ps_save: every
 * server writes its parameters, optimizer state and version into directory
 * `path` (created when missing; it must be visible to the servers), each to
 * a temporary file renamed into place, then this worker writes the manifest
 * naming the shard map, renamed last. kolo_ps_load: checks the manifest
 * against this job (an error names every difference), every server reads
 * and checks its file (a missing or torn file is an error naming it; the
 * servers are then left as they were), then pulls into params. Called on
 * one worker while the others wait between steps; after a load the others
 * pull (kolo_ps_pull) before their next step. */
int kolo_ps_save(const char* path);
/* Validation (docs/parameter_server.md, "Validation"). kolo_ps_request_stop:
 * asks the servers to stop the training; from then on (sync: from the next
 * version, so every worker stops after the same step) their replies say so
 * and kolo_ps_stop_requested gives 1 on every worker after its next step.
 * kolo_ps_version: the version of this worker's parameters (the smallest
 * over the shards). */
int kolo_ps_request_stop(void);
int kolo_ps_stop_requested(int* out);
int kolo_ps_version(uint64_t* out);
/* Validator ranks (kolorun --validators V, KOLO_VALIDATORS=V): the last V
 * workers validate instead of training. kolo_ps_validators: V (0 when
 * unset; a value that is not an integer in [0, workers) is an error naming
 * it). kolo_ps_training_over: 1 once every trainer has finished (seen at the
 * last exchange with the servers). kolo_ps_finish: this worker is done with
 * the servers (the goodbye kolo_finalize would send, sent now): trainers
 * call it at the end of training so the validators can end theirs. */
int kolo_ps_validators(int* out);
int kolo_ps_training_over(int* out);
int kolo_ps_finish(void);
int kolo_ps_load(const char* path, float* const* params);

#ifdef __cplusplus
}
#endif

#endif /* KOLO_PS_H_ */
