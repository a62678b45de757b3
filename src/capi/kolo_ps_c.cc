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
#include <unistd.h>

#include <cstdio>
#include <memory>

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
    if (!job->saidBye) {
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
