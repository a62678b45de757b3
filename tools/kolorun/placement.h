// Where each rank runs and what it is told about the job.
//
// planPlacement() maps ranks to hosts. Without a host list every rank is on
// this host (local rank == rank, one host). With one, ranks fill the hosts in
// the order listed, each up to its slots; with --oversubscribe the ranks
// beyond the slots are dealt one per host in turn. Ranks of one host are
// consecutive, so local rank = rank - first rank of the host. Hosts left
// without a rank are not part of the job (cross size counts hosts in use).
//
// rankEnvironment() is the environment a rank starts with: `base` (kolorun's
// own for a local rank; for a remote rank only the caller's variables that
// isForwarded() picks), then the -x exports (and tuning flags), then the
// layout variables (which always win).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "options.h"

namespace kolo::kolorun {

struct Placement {
  int rank = 0;
  int size = 1;
  std::string host;  // as given with -H / --hostfile; "" without a host list
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;  // index of the host among the job's hosts
  int crossSize = 1;
};

std::vector<Placement> planPlacement(const LaunchOptions& options);

struct JobIdentity {
  std::string rendezvous;        // tcp://HOST:PORT of the store kolorun hosts
  std::string jobId;             // unique per kolorun invocation
  std::string networkInterface;  // --network-interface, "" = none
  std::string secret;            // ensureJobSecret()
  // Elastic jobs: each rank gets KOLO_ELASTIC_WORKER (its first rank) and
  // KOLO_ELASTIC_TIMEOUT; its rank in each world comes through the store.
  bool elastic = false;
  double elasticTimeoutSeconds = 0;
};

// A job id unique on this host and, practically, across hosts:
// kolorun-<pid>-<time>-<random>.
std::string makeJobId();

// The job secret of this kolorun (docs/security.md): KOLO_JOB_SECRET or the
// file KOLO_JOB_SECRET_FILE names when the user set one, else a fresh one
// (32 random bytes as hex); this process then exports it as
// KOLO_JOB_SECRET so that every rank, local or launched by mpirun (-x by
// name) or ssh (through the control stream), inherits it. Throws
// kolo::Error naming an unreadable secret file.
std::string ensureJobSecret();

// Whether a NAME=VALUE entry of kolorun's environment goes to remote and
// mpirun-launched ranks: kolo's settings (KOLO_*) and Horovod's variables
// (HOROVOD_*), which the ranks read as aliases of kolo's settings.
bool isForwarded(const std::string& entry);

// The value a local rank sees for variable `name`: the last -x entry that
// names it (NAME=VALUE, or NAME: kolorun's own value), else kolorun's own
// environment; nullopt when unset.
std::optional<std::string> jobVariable(const std::vector<std::string>& exports,
                                       const std::string& name);

// KOLO_TIMEOUT as the ranks will see it (jobVariable), in seconds; kolo's
// default when unset or not a positive number.
double koloTimeoutSeconds(const std::vector<std::string>& exports);

// `base` is NAME=VALUE entries. Sets KOLO_HOST_ID to the host's name when
// the job has a host list (ranks on different hosts then never share memory,
// even when the "hosts" share a kernel, as network namespaces do).
std::vector<std::string> rankEnvironment(const std::vector<std::string>& base,
                                         const std::vector<std::string>& exports,
                                         const Placement& placement,
                                         const JobIdentity& job);

}  // namespace kolo::kolorun
