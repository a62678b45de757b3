// The parameter servers' part of kolo_init and kolo_finalize
// (docs/parameter_server.md, "Roles").
//
// With KOLO_SERVERS=S > 0, kolo_init forms the job's communicator over all N
// ranks, agrees on the roles (every rank's host index, one allgather), and:
// - on a server, runs ps::Server until every worker has said goodbye, closes
//   the job communicator (its barrier meets the workers') and ends the
//   process with status 0, never returning;
// - on a worker, splits the workers' team "ps/workers", which becomes the
//   world of kolo.h and of the runtimes, and keeps the job communicator for
//   the parameter-server traffic.
// kolo_finalize on a worker, after the runtimes and the team are closed,
// says goodbye to every server and closes the job communicator.
//
// Locking: kolo_c.cc's mutex is held by the callers (init and finalize).
#include <kolo/communicator.h>
#include <kolo/kolo.h>
#include <kolo/ps.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "api/communicator_impl.h"
#include "capi/capi_internal.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/settings.h"
#include "ps/client.h"
#include "ps/roles.h"
#include "ps/server.h"

namespace kolo::capi {
namespace {

struct PsJob {
  std::shared_ptr<Communicator> job;
  ps::Roles roles;
  int worker = -1;
  bool saidBye = false;
  std::unique_ptr<ps::Client> client;  // after kolo_ps_start
};

std::unique_ptr<PsJob> gJob;

ps::Roles agreeRoles(Communicator& job, int servers) {
  const int n = job.size();
  std::vector<int32_t> hosts(n);
  int32_t mine = job.layout().crossRank;
  AllgatherOptions o;
  o.send = &mine;
  o.recv = hosts.data();
  o.count = 1;
  o.dtype = DataType::kInt32;
  job.allgather(o);
  return ps::assignRoles(std::vector<int>(hosts.begin(), hosts.end()), servers);
}

[[noreturn]] void serveAndExit(std::shared_ptr<Communicator> job,
                               const ps::Roles& roles) {
  auto* impl = dynamic_cast<api::CommunicatorImpl*>(job.get());
  KOLO_CHECK(impl != nullptr);
  const int index = roles.serverIndexOf(job->rank());
  int status = 0;
  try {
    ps::Server(impl->pointToPoint(), roles, index).run();
    job.reset();  // the closing barrier, with the workers' kolo_finalize
  } catch (const Error& e) {
    KOLO_LOG(kError) << "parameter server " << index << " (rank " << roles.servers[index]
                     << ") failed: " << e.what();
    status = 1;
  }
  std::fflush(nullptr);
  _exit(status);
}

}  // namespace

std::shared_ptr<Communicator> formWorld() {
  const Settings settings = Settings::fromEnvironment();
  auto job = Communicator::fromEnvironment();
  if (settings.servers == 0) return job;
  ps::Roles roles = agreeRoles(*job, static_cast<int>(settings.servers));
  if (roles.serverIndexOf(job->rank()) >= 0) serveAndExit(std::move(job), roles);
  auto workers = job->split(roles.workers, "ps/workers");
  gJob = std::make_unique<PsJob>();
  gJob->worker = roles.workerIndexOf(job->rank());
  gJob->job = std::move(job);
  gJob->roles = std::move(roles);
  return workers;
}

void leaveJob() {
  if (!gJob) return;
  std::unique_ptr<PsJob> job = std::move(gJob);
  try {
    if (job->client) {
      job->client->bye();
    } else if (!job->saidBye) {
      auto* impl = dynamic_cast<api::CommunicatorImpl*>(job->job.get());
      ps::PsConfig none;
      none.tensorElements = {};
      ps::Client(impl->pointToPoint(), job->roles, job->worker, none).bye();
    }
  } catch (const Error& e) {
    KOLO_LOG(kWarning) << "worker " << job->worker
                       << " could not say goodbye to the parameter servers: " << e.what();
  }
  job->job.reset();  // the closing barrier, with the servers
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
    if (needClient && !gJob->client) {
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
  *out = gJob ? static_cast<int>(gJob->roles.servers.size()) : 0;
  return KOLO_OK;
}

int kolo_ps_start(const kolo_ps_options* o, size_t tensors, float* const* params,
                  const uint64_t* counts) {
  return psCall("kolo_ps_start", false, [&] {
    if (gJob->client) {
      KOLO_THROW(kolo::ErrorCode::kInvalidArgument,
                 "kolo_ps_start called twice (one parameter-server optimizer per job)");
    }
    kolo::ps::ClientOptions co;
    co.pushPeriod = o->push_period;
    co.pullPeriod = o->pull_period;
    co.easgdPeriod = o->easgd_period;
    auto* impl = dynamic_cast<kolo::api::CommunicatorImpl*>(gJob->job.get());
    auto client = std::make_unique<kolo::ps::Client>(impl->pointToPoint(), gJob->roles,
                                                     gJob->worker,
                                                     toConfig(*o, tensors, counts), co);
    client->start(std::vector<float*>(params, params + tensors));
    gJob->client = std::move(client);
  });
}

int kolo_ps_step(float* const* params, const float* const* grads, float lr) {
  return psCall("kolo_ps_step", true, [&] {
    const size_t tensors = gJob->client->tensorCount();
    gJob->client->step(std::vector<float*>(params, params + tensors),
                       std::vector<const float*>(grads, grads + tensors), lr);
  });
}

int kolo_ps_pull(float* const* params) {
  return psCall("kolo_ps_pull", true, [&] {
    gJob->client->pull(std::vector<float*>(params, params + gJob->client->tensorCount()));
  });
}

int kolo_ps_exchange(float* const* params) {
  return psCall("kolo_ps_exchange", true, [&] {
    gJob->client->exchange(
        std::vector<float*>(params, params + gJob->client->tensorCount()));
  });
}

int kolo_ps_request_stop(void) {
  return psCall("kolo_ps_request_stop", true, [&] { gJob->client->requestStop(); });
}

int kolo_ps_stop_requested(int* out) {
  return psCall("kolo_ps_stop_requested", true,
                [&] { *out = gJob->client->stopRequested() ? 1 : 0; });
}

int kolo_ps_version(uint64_t* out) {
  return psCall("kolo_ps_version", true, [&] { *out = gJob->client->version(); });
}

int kolo_ps_validators(int* out) {
  return psCall("kolo_ps_validators", false, [&] {
    const char* env = std::getenv("KOLO_VALIDATORS");
    const int workers = static_cast<int>(gJob->roles.workers.size());
    *out = 0;
    if (env == nullptr || *env == '\0') return;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 0 || v >= workers) {
      KOLO_THROW(kolo::ErrorCode::kInvalidArgument,
                 "KOLO_VALIDATORS='" << env << "' with " << workers
                                     << " workers (expected an integer in [0, " << workers
                                     << "): at least one worker trains)");
    }
    *out = static_cast<int>(v);
  });
}

int kolo_ps_training_over(int* out) {
  return psCall("kolo_ps_training_over", true,
                [&] { *out = gJob->client->trainingOver() ? 1 : 0; });
}

int kolo_ps_finish(void) {
  return psCall("kolo_ps_finish", true, [&] { gJob->client->bye(); });
}

int kolo_ps_staleness(uint64_t* out) {
  return psCall("kolo_ps_staleness", true, [&] { *out = gJob->client->staleness(); });
}

int kolo_ps_stats(uint64_t* out, size_t capacity, size_t* written) {
  return psCall("kolo_ps_stats", true, [&] {
    std::vector<uint64_t> all;
    for (const auto& s : gJob->client->stats()) {
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
  return psCall("kolo_ps_save", true, [&] { gJob->client->save(path ? path : ""); });
}

int kolo_ps_load(const char* path, float* const* params) {
  return psCall("kolo_ps_load", true, [&] {
    gJob->client->load(path ? path : "",
                       std::vector<float*>(params, params + gJob->client->tensorCount()));
  });
}

}  // extern "C"
