// Where each rank runs and what it is told about the job.
//
// planPlacement() maps ranks to hosts; for now every rank is on this host
// (local rank == rank, one "cross" group). Multi-host launching (-H,
// --hostfile) will fill hosts from the options and assign ranks host by
// host; the rest of kolorun only reads the Placement.
//
// rankEnvironment() is the environment a rank starts with: kolorun's own,
// then the -x exports, then the KOLO_* layout variables (which always win).
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace kolo::kolorun {

struct Placement {
  int rank = 0;
  int size = 1;
  std::string host;  // "" = this host
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;  // index of the host among the job's hosts
  int crossSize = 1;
};

std::vector<Placement> planPlacement(const LaunchOptions& options);

struct JobIdentity {
  std::string rendezvous;  // tcp://HOST:PORT of the store kolorun hosts
  std::string jobId;       // unique per kolorun invocation
};

// A job id unique on this host and, practically, across hosts:
// kolorun-<pid>-<time>-<random>.
std::string makeJobId();

// `base` is NAME=VALUE entries (usually kolorun's environ).
std::vector<std::string> rankEnvironment(const std::vector<std::string>& base,
                                         const std::vector<std::string>& exports,
                                         const Placement& placement,
                                         const JobIdentity& job);

}  // namespace kolo::kolorun
