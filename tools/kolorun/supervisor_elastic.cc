// The supervisor's elastic parts (supervisor.h): the elastic driver's
// polling, and --host-discovery-script: hosts listed later get workers (up
// to --max-np), hosts no longer listed lose theirs, and a host where a
// worker failed is blacklisted (host_discovery.h). The workers learn of a
// change through the store's host-update counters (elastic_membership.h)
// at their next commit, and re-form with the newcomers.
#include <signal.h>

#include <chrono>
#include <set>

#include "remote_launch.h"
#include "rendezvous/tcp_store.h"
#include "supervisor.h"

namespace kolo::kolorun {

// The elastic driver talks to kolorun's own store as a client. Its join
// window: the survivors of a failure notice it within KOLO_TIMEOUT of each
// other (a dead peer within about 2 s, a stopped one at the timeout).
bool Supervisor::startElasticDriver(JobIdentity& job) {
  job.elastic = true;
  job.elasticTimeoutSeconds = options_.elastic.timeoutSeconds;
  const double timeout = koloTimeoutSeconds(options_.exports);
  ElasticLimits limits;
  limits.minWorkers = options_.elastic.minRanks;
  limits.elasticTimeout = std::chrono::milliseconds(
      static_cast<int64_t>(options_.elastic.timeoutSeconds * 1000));
  limits.joinWindow = joinWindowFor(timeout);
  limits.resetLimit = options_.elastic.resetLimit;
  try {
    elastic_ = std::make_unique<ElasticDriver>(
        rendezvous::TcpStore::connect("127.0.0.1", store_->port(),
                                      std::chrono::milliseconds(10'000), job.secret),
        options_.numRanks, limits);
  } catch (const std::exception& e) {
    return failLaunch(std::string("elastic: cannot reach the store: ") + e.what(), 1);
  }
  return true;
}

void Supervisor::pollElastic() {
  ElasticDriver::Outcome out;
  try {
    out = elastic_->poll(ElasticDriver::Clock::now());
  } catch (const std::exception& e) {
    out.failure = std::string("the store failed: ") + e.what();
  }
  for (const auto& line : out.notes) {
    if (options_.verbose || elastic_->generation() > 1) output_.note(line);
  }
  for (int worker : out.remove) {
    output_.note("elastic: " + rankName(worker) +
                 " did not join the new world in time (stopped or cut off?); killing it");
    if (ranks_[worker]->running()) signalRank(*ranks_[worker], SIGKILL);
  }
  if (out.failure) {
    output_.note("elastic: " + *out.failure + "; ending the job");
    abortJob(EndReason::kElastic, SIGTERM);
  }
}

bool Supervisor::discoverInitialHosts() {
  const ElasticOptions& e = options_.elastic;
  discovery_ = std::make_unique<HostDiscovery>(e.discoveryScript, e.slotsPerHost,
                                               e.blacklistCooldown);
  std::vector<HostSlots> hosts;
  try {
    hosts = discovery_->discover();
  } catch (const std::exception& err) {
    return failLaunch(err.what(), 1);
  }
  if (hosts.empty()) {
    return failLaunch(
        "--host-discovery-script '" + e.discoveryScript + "' listed no host", 1);
  }
  long slots = 0;
  for (const auto& h : hosts) slots += h.slots;
  if (slots < options_.numRanks && !options_.oversubscribe) {
    return failLaunch(
        "-np " + std::to_string(options_.numRanks) + " is more ranks than the " +
            std::to_string(slots) +
            " slots --host-discovery-script lists; pass --oversubscribe or list "
            "more",
        2);
  }
  options_.hosts = hosts;
  nextDiscovery_ = Clock::now() + std::chrono::seconds(1);
  return true;
}

int Supervisor::liveOn(const std::string& host) const {
  int n = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (hostOf_[r] == host && ranks_[r]->running()) ++n;
  }
  return n;
}

// Runs the script about once a second; a failing script keeps the hosts
// known (said once per distinct error).
void Supervisor::refreshHosts(Clock::time_point now) {
  nextDiscovery_ = now + std::chrono::seconds(1);
  std::vector<HostSlots> hosts;
  try {
    hosts = discovery_->discover();
    lastDiscoveryError_.clear();
  } catch (const std::exception& e) {
    if (lastDiscoveryError_ != e.what()) {
      lastDiscoveryError_ = e.what();
      output_.note(std::string("elastic: ") + e.what() + "; keeping the hosts known");
    }
    return;
  }
  std::map<std::string, int> listed;
  for (const auto& h : hosts) listed[h.host] += h.slots;
  bool removed = false;
  std::set<std::string> gone;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r]->running() || listed.count(hostOf_[r]) != 0) continue;
    gone.insert(hostOf_[r]);
    endedByDiscovery_.insert(static_cast<int>(r));
    signalRank(*ranks_[r], SIGKILL);
    removed = true;
  }
  for (const auto& host : gone) {
    output_.note("elastic: host " + host +
                 " is no longer listed by the discovery script; its workers are ended");
  }
  // A worker that finished means the job is finishing: no newcomers then.
  bool added = false;
  for (const auto& h : anySucceeded_ ? std::vector<HostSlots>{} : hosts) {
    if (discovery_->blacklisted(h.host, now)) continue;
    int free = listed[h.host] - liveOn(h.host);
    while (free-- > 0 && elastic_->liveWorkers() < options_.elastic.maxRanks &&
           reason_ == EndReason::kNone) {
      startWorker(h.host);
      added = true;
    }
  }
  if (added || removed) {
    try {
      elastic_->publishHostChange(added);
    } catch (const std::exception& e) {
      output_.note(
          std::string("elastic: cannot tell the workers that the hosts changed: ") +
          e.what());
    }
  }
}

void Supervisor::startWorker(const std::string& host) {
  const int id = static_cast<int>(ranks_.size());
  Placement p;
  p.rank = id;
  p.size = id + 1;  // the worker's world comes through the store
  p.host = host;
  p.localRank = liveOn(host);
  p.localSize = p.localRank + 1;
  if (hostIsRemote_.count(host) == 0) hostIsRemote_[host] = !isLocalHost(host);
  const bool remote = hostIsRemote_[host];
  hostOf_.push_back(host);
  remote_.push_back(remote);
  exitTimes_.push_back(std::nullopt);
  try {
    if (remote && sshWords_.empty()) sshWords_ = splitCommandWords(options_.sshCommand);
    if (rendezvousOf_.count(host) == 0) {
      const std::string address =
          remote ? addressTowards(host, options_.networkInterface) : "127.0.0.1";
      rendezvousOf_[host] = "tcp://" + address + ":" + std::to_string(store_->port());
    }
  } catch (const std::exception& e) {
    output_.note("elastic: cannot start a worker on host " + host + ": " + e.what());
    hostOf_.pop_back();
    remote_.pop_back();
    exitTimes_.pop_back();
    discovery_->blacklist(host, Clock::now());
    return;
  }
  JobIdentity job = job_;
  job.rendezvous = rendezvousOf_[host];
  elastic_->addWorker();
  if (startRank(p, job, context_)) {
    output_.note("elastic: " + rankName(id) + " started on a discovered host");
  } else {
    elastic_->workerExited(id, false);
  }
}

void Supervisor::blacklistHostOf(int rank) {
  if (!discovery_ || hostOf_[rank].empty() || endedByDiscovery_.count(rank) != 0) return;
  discovery_->blacklist(hostOf_[rank], Clock::now());
  const auto& range = options_.elastic.blacklistCooldown;
  output_.note("elastic: host " + hostOf_[rank] + " is blacklisted " +
               (range ? "for " + std::to_string(static_cast<int>(range->first)) + " to " +
                            std::to_string(static_cast<int>(range->second)) + " s"
                      : std::string("for the rest of the job")));
}

}  // namespace kolo::kolorun
