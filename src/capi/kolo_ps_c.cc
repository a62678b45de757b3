// The parameter servers' part of kolo_init and kolo_finalize, and the C
// calls of include/kolo/ps.h: translations to ps::Job (ps/job.h), which
// runs the job (docs/parameter_server.md, "Roles").
//
// Locking: kolo_c.cc's mutex is held by the callers of formWorld and
// leaveJob (init and finalize); the kolo_ps_* calls come from one thread.
#include <kolo/kolo.h>
#include <kolo/ps.h>

#include <algorithm>
#include <memory>
#include <string>

#include "capi/capi_internal.h"
#include "common/check.h"
#include "common/settings.h"
#include "ps/job.h"

namespace kolo::capi {
namespace {

std::unique_ptr<ps::Job> gJob;  // a worker's job with servers, from formWorld

}  // namespace

std::shared_ptr<Communicator> formWorld() {
  return ps::Job::formWorld(Settings::fromEnvironment(), gJob);
}

void leaveJob() {
  std::unique_ptr<ps::Job> job = std::move(gJob);
  if (job) job->leave();
}

}  // namespace kolo::capi

// ---- include/kolo/ps.h ----------------------------------------------------------

namespace {

using kolo::capi::gJob;

template <typename Fn>
int psCall(const char* fn, bool needClient, Fn&& body) {
  try {
    if (!gJob) {
      return kolo::capi::fail(
          KOLO_ERR_INVALID_ARGUMENT,
          std::string(fn) +
              ": this process is not a worker of a job with parameter "
              "servers (kolorun --servers S, KOLO_SERVERS=S, then kolo_init)");
    }
    if (needClient && gJob->client() == nullptr) {
      return kolo::capi::fail(KOLO_ERR_INVALID_ARGUMENT,
                              std::string(fn) + " called before kolo_ps_start");
    }
    body();
    return KOLO_OK;
  } catch (const kolo::Error& e) {
    return kolo::capi::fail(static_cast<int>(e.code()),
                            std::string(fn) + ": " + e.what());
  } catch (const std::exception& e) {
    return kolo::capi::fail(KOLO_ERR_INTERNAL, std::string(fn) + ": " + e.what());
  }
}

kolo::ps::PsConfig toConfig(const kolo_ps_options& o, size_t tensors,
                            const uint64_t* counts) {
  kolo::ps::PsConfig c;
  c.mode = kolo::ps::parseMode(o.mode ? o.mode : "");
  c.optimizer.kind = kolo::ps::parseOptimizerKind(o.optimizer ? o.optimizer : "");
  c.optimizer.lr = o.lr;
  c.optimizer.weightDecay = o.weight_decay;
  c.optimizer.momentum = o.momentum;
  c.optimizer.dampening = o.dampening;
  c.optimizer.nesterov = o.nesterov != 0;
  c.optimizer.beta1 = o.beta1;
  c.optimizer.beta2 = o.beta2;
  c.optimizer.eps = o.eps;
  c.optimizer.alpha = o.alpha;
  c.optimizer.centered = o.centered != 0;
  c.stalenessBound = o.staleness_bound;
  c.backupWorkers = o.backup_workers;
  c.easgdAlpha = o.easgd_alpha;
  c.pushers = o.pushers;
  c.validators = o.validators;
  c.tensorElements.assign(counts, counts + tensors);
  return c;
}

}  // namespace

extern "C" {

int kolo_ps_servers(int* out) {
  *out = gJob ? gJob->serverCount() : 0;
  return KOLO_OK;
}

int kolo_ps_start(const kolo_ps_options* o, size_t tensors, float* const* params,
                  const uint64_t* counts) {
  return psCall("kolo_ps_start", false, [&] {
    kolo::ps::ClientOptions co;
    co.pushPeriod = o->push_period;
    co.pullPeriod = o->pull_period;
    co.easgdPeriod = o->easgd_period;
    gJob->start(toConfig(*o, tensors, counts), co,
                std::vector<float*>(params, params + tensors));
  });
}

int kolo_ps_step(float* const* params, const float* const* grads, float lr) {
  return psCall("kolo_ps_step", true, [&] {
    const size_t tensors = gJob->client()->tensorCount();
    gJob->client()->step(std::vector<float*>(params, params + tensors),
                         std::vector<const float*>(grads, grads + tensors), lr);
  });
}

int kolo_ps_pull(float* const* params) {
  return psCall("kolo_ps_pull", true, [&] {
    gJob->client()->pull(
        std::vector<float*>(params, params + gJob->client()->tensorCount()));
  });
}

int kolo_ps_exchange(float* const* params) {
  return psCall("kolo_ps_exchange", true, [&] {
    gJob->client()->exchange(
        std::vector<float*>(params, params + gJob->client()->tensorCount()));
  });
}

int kolo_ps_request_stop(void) {
  return psCall("kolo_ps_request_stop", true, [&] { gJob->client()->requestStop(); });
}

int kolo_ps_stop_requested(int* out) {
  return psCall("kolo_ps_stop_requested", true,
                [&] { *out = gJob->client()->stopRequested() ? 1 : 0; });
}

int kolo_ps_version(uint64_t* out) {
  return psCall("kolo_ps_version", true, [&] { *out = gJob->client()->version(); });
}

int kolo_ps_validators(int* out) {
  return psCall("kolo_ps_validators", false, [&] {
    *out = gJob->validators(kolo::Settings::fromEnvironment().validators);
  });
}

int kolo_ps_training_over(int* out) {
  return psCall("kolo_ps_training_over", true,
                [&] { *out = gJob->client()->trainingOver() ? 1 : 0; });
}

int kolo_ps_finish(void) {
  return psCall("kolo_ps_finish", true, [&] { gJob->client()->bye(); });
}

int kolo_ps_staleness(uint64_t* out) {
  return psCall("kolo_ps_staleness", true, [&] { *out = gJob->client()->staleness(); });
}

int kolo_ps_stats(uint64_t* out, size_t capacity, size_t* written) {
  return psCall("kolo_ps_stats", true, [&] {
    std::vector<uint64_t> all;
    for (const auto& s : gJob->client()->stats()) {
      all.insert(all.end(), {s.version, s.updates, s.rejected, s.maxStaleness});
      all.insert(all.end(), s.pushes.begin(), s.pushes.end());
      all.insert(all.end(), s.pulls.begin(), s.pulls.end());
    }
    *written = all.size();
    if (all.size() > capacity) {
      KOLO_THROW(kolo::ErrorCode::kInvalidArgument,
                 "kolo_ps_stats: " << all.size() << " values, capacity " << capacity);
    }
    std::copy(all.begin(), all.end(), out);
  });
}

int kolo_ps_save(const char* path) {
  return psCall("kolo_ps_save", true, [&] { gJob->client()->save(path ? path : ""); });
}

int kolo_ps_load(const char* path, float* const* params) {
  return psCall("kolo_ps_load", true, [&] {
    gJob->client()->load(
        path ? path : "",
        std::vector<float*>(params, params + gJob->client()->tensorCount()));
  });
}

}  // extern "C"
