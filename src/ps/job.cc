#include "ps/job.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "api/communicator_impl.h"
#include "common/check.h"
#include "common/logging.h"
#include "ps/server.h"

namespace kolo::ps {
namespace {

// Every rank's host index (Layout::crossRank), gathered, decides the roles
// (roles.h): each rank computes the same ones.
Roles agreeRoles(Communicator& job, int servers) {
  const int n = job.size();
  std::vector<int32_t> hosts(n);
  int32_t mine = job.layout().crossRank;
  AllgatherOptions o;
  o.send = &mine;
  o.recv = hosts.data();
  o.count = 1;
  o.dtype = DataType::kInt32;
  job.allgather(o);
  return assignRoles(std::vector<int>(hosts.begin(), hosts.end()), servers);
}

}  // namespace

std::shared_ptr<Communicator> Job::formWorld(const Settings& settings,
                                             std::unique_ptr<Job>& job) {
  job.reset();
  auto comm = api::CommunicatorImpl::fromEnvironment();
  if (settings.servers == 0) return comm;
  Roles roles = agreeRoles(*comm, static_cast<int>(settings.servers));
  if (roles.serverIndexOf(comm->rank()) >= 0) serveAndExit(std::move(comm), roles);
  auto workers = comm->split(roles.workers, "ps/workers");
  const int worker = roles.workerIndexOf(comm->rank());
  job.reset(new Job(std::move(comm), std::move(roles), worker));
  return workers;
}

Job::Job(std::shared_ptr<api::CommunicatorImpl> job, Roles roles, int worker)
    : job_(std::move(job)), roles_(std::move(roles)), worker_(worker) {}

Job::~Job() = default;

void Job::serveAndExit(std::shared_ptr<api::CommunicatorImpl> job, const Roles& roles) {
  const int index = roles.serverIndexOf(job->rank());
  int status = 0;
  try {
    Server(job->pointToPoint(), roles, index).run();
    job.reset();  // the closing barrier, with the workers' leave()
  } catch (const Error& e) {
    KOLO_LOG(kError) << "parameter server " << index << " (rank " << roles.servers[index]
                     << ") failed: " << e.what();
    status = 1;
  }
  std::fflush(nullptr);
  _exit(status);
}

Client& Job::start(PsConfig config, ClientOptions options,
                   const std::vector<float*>& params) {
  if (client_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "kolo_ps_start called twice (one parameter-server optimizer per job)");
  }
  auto client = std::make_unique<Client>(job_->pointToPoint(), roles_, worker_,
                                         std::move(config), options);
  client->start(params);
  client_ = std::move(client);
  return *client_;
}

int Job::validators(const std::string& setting) const {
  const int workers = static_cast<int>(roles_.workers.size());
  if (setting.empty()) return 0;
  char* end = nullptr;
  const long v = std::strtol(setting.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || v >= workers) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_VALIDATORS='" << setting << "' with " << workers
                                   << " workers (expected an integer in [0, " << workers
                                   << "): at least one worker trains)");
  }
  return static_cast<int>(v);
}

void Job::leave() {
  if (!job_) return;
  try {
    if (client_) {
      client_->bye();
    } else {
      PsConfig none;
      none.tensorElements = {};
      Client(job_->pointToPoint(), roles_, worker_, none).bye();
    }
  } catch (const Error& e) {
    KOLO_LOG(kWarning) << "worker " << worker_
                       << " could not say goodbye to the parameter servers: " << e.what();
  }
  client_.reset();
  job_.reset();  // the closing barrier, with the servers
}

}  // namespace kolo::ps
