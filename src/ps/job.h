// kolo::ps::Job: a job with parameter servers (docs/parameter_server.md,
// "Roles"), as kolo_init and kolo_finalize run it.
//
// With KOLO_SERVERS=S > 0, formWorld() forms the job's communicator over all
// N ranks, agrees on the roles (every rank's host index, one allgather), and:
// - on a server, runs ps::Server until every worker has said goodbye, closes
//   the job communicator (its barrier meets the workers') and ends the
//   process with status 0 (1 when the server failed), never returning;
// - on a worker, splits the workers' team "ps/workers", which becomes the
//   world of kolo.h and of the runtimes, and returns a Job that keeps the
//   job communicator for the parameter-server traffic.
// leave(), on a worker, after the runtimes and the team are closed, says
// goodbye to every server and closes the job communicator.
//
// Contract
// - formWorld() is collective over the job's ranks; throws kolo::Error.
// - The client runs over the job communicator's point-to-point transport,
//   on which no collective runs once the team is split.
// - Not thread-safe: the caller serialises every call (the C API holds its
//   lock around init and finalize, and its users call kolo_ps_* from one
//   thread).
#pragma once

#include <kolo/communicator.h>

#include <memory>
#include <string>
#include <vector>

#include "common/settings.h"
#include "ps/client.h"
#include "ps/roles.h"

namespace kolo::api {
class CommunicatorImpl;
}

namespace kolo::ps {

class Job {
 public:
  // The world of kolo_init. Without servers (settings.servers == 0) the
  // job's communicator, and `job` stays null; on a worker the workers'
  // team, with `job` set; on a server never returns (see above).
  static std::shared_ptr<Communicator> formWorld(const Settings& settings,
                                                 std::unique_ptr<Job>& job);

  // Releases the client and the job communicator without a goodbye (a
  // process that exits without kolo_finalize).
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const Roles& roles() const { return roles_; }
  int serverCount() const { return static_cast<int>(roles_.servers.size()); }
  int workerIndex() const { return worker_; }

  // Creates and starts this worker's client (Client::start, collective in
  // effect over the workers). Error(kInvalidArgument) when called twice
  // (one parameter-server optimizer per job) or for a bad configuration.
  Client& start(PsConfig config, ClientOptions options,
                const std::vector<float*>& params);
  // The started client, or null before start().
  Client* client() { return client_.get(); }

  // The number of validating workers: `setting` (KOLO_VALIDATORS) as an
  // integer in [0, workers); 0 when empty. Error(kInvalidArgument) naming
  // the value and the bound otherwise.
  int validators(const std::string& setting) const;

  // Goodbye to every server (through the client, or a client of its own
  // when start() was never called), then the job communicator's closing
  // barrier with the servers. Never throws: a failed goodbye is logged.
  // Idempotent.
  void leave();

 private:
  Job(std::shared_ptr<api::CommunicatorImpl> job, Roles roles, int worker);
  // A server's life: serves until every worker left, then ends the process.
  [[noreturn]] static void serveAndExit(std::shared_ptr<api::CommunicatorImpl> job,
                                        const Roles& roles);

  std::shared_ptr<api::CommunicatorImpl> job_;
  Roles roles_;
  int worker_ = -1;
  std::unique_ptr<Client> client_;  // after start()
};

}  // namespace kolo::ps
