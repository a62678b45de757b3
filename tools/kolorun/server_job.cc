#include "server_job.h"

#include <cerrno>
#include <cstdlib>

#include "placement.h"
#include "ps/roles.h"

namespace kolo::kolorun {

ServerJob::ServerJob(const std::vector<int>& hostOfRank, int servers) {
  if (servers == 0) return;
  const ps::Roles roles = ps::assignRoles(hostOfRank, servers);
  isServer_.assign(hostOfRank.size(), false);
  for (int r : roles.servers) isServer_[r] = true;
  workersLeft_ = static_cast<int>(roles.workers.size());
}

ServerJob ServerJob::study(int numRanks) {
  ServerJob job({}, 0);
  job.study_ = true;
  job.isServer_.assign(static_cast<size_t>(numRanks), false);
  if (numRanks > 0) job.isServer_[0] = true;
  job.workersLeft_ = numRanks - 1;
  return job;
}

ServerJob::Verdict ServerJob::onExit(int rank, bool success, bool inStudy) {
  Verdict v;
  if (inStudy && wantsDeclaration(rank, success)) {
    declaredLoss_ = true;
    v.workerLost = true;
    lost_.push_back(rank);
    return v;
  }
  if (!hasServers() || isServer(rank)) {
    v.endJob = !success;
    v.failedRank = success ? -1 : rank;
    return v;
  }
  --workersLeft_;
  if (study_) {
    if (!success) {
      v.workerLost = true;
      lost_.push_back(rank);
    }
    return v;
  }
  if (success) {
    anyWorkerFinished_ = true;
  } else {
    v.workerLost = true;
    lost_.push_back(rank);
  }
  if (workersLeft_ > 0) return v;
  if (anyWorkerFinished_) {
    v.workersGone = true;
  } else {
    v.endJob = true;
    v.failedRank = lost_.front();
  }
  return v;
}

int serversOfJob(const LaunchOptions& options) {
  if (options.elastic.enabled) return 0;
  if (options.servers > 0) return options.servers;
  const auto value = jobVariable(options.exports, "KOLO_SERVERS");
  if (!value || value->empty()) return 0;
  char* end = nullptr;
  errno = 0;
  const long s = std::strtol(value->c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || s <= 0 || s >= options.numRanks) return 0;
  return static_cast<int>(s);
}

}  // namespace kolo::kolorun
