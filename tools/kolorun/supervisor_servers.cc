// The supervisor's part for jobs with parameter servers (supervisor.h,
// server_job.h): which ranks are servers, a lost worker's line, the window
// the servers have once every worker has exited, and the closing summary.
#include <signal.h>

#include <chrono>
#include <sstream>

#include "kolo/error.h"
#include "rendezvous/study_declaration.h"
#include "rendezvous/tcp_store.h"
#include "supervisor.h"

namespace kolo::kolorun {

bool Supervisor::planServers(const std::vector<Placement>& placements) {
  std::vector<int> hostOfRank;
  for (const Placement& p : placements) hostOfRank.push_back(p.crossRank);
  try {
    serverJob_ = options_.hpo ? ServerJob::study(static_cast<int>(hostOfRank.size()))
                              : ServerJob(hostOfRank, serversOfJob(options_));
  } catch (const Error& e) {
    return failLaunch(e.what(), 1);
  }
  return true;
}

void Supervisor::noteLostWorker(const RankProcess& rank) {
  if (serverJob_.isStudy()) {
    output_.note(rankName(rank.rank(), rank.pid()) + " " + describeExit(rank) +
                 "; the job runs a kolo.hpo study" + (options_.hpo ? " (--hpo)" : "") +
                 ": its team's trial fails, the study goes on");
    return;
  }
  output_.note(rankName(rank.rank(), rank.pid()) + " " + describeExit(rank) +
               "; it is a worker and the job has parameter servers: they decide whether "
               "the training goes on without it");
}

// A client of kolorun's own store, as the elastic driver's; a store that
// cannot be read leaves the failure to end the job, as without a study.
bool Supervisor::declaredStudy(int rank) {
  if (elastic_ || !store_) return false;
  try {
    if (!storeClient_) {
      storeClient_ = rendezvous::TcpStore::connect("127.0.0.1", store_->port(),
                                                   std::chrono::seconds(5), job_.secret);
    }
    return rendezvous::studyDeclared(*storeClient_, rank);
  } catch (const std::exception& e) {
    storeClient_.reset();
    output_.note("cannot read " + rankName(rank) +
                 "'s kolo.hpo study declaration from the store: " + e.what());
    return false;
  }
}

// Every worker has exited, one at least with 0: the servers have nothing
// left to serve. A server exits once it has had every worker's goodbye or
// noticed its loss (a process that is gone: at once) and passed its closing
// barrier (two collectives, each failing within KOLO_TIMEOUT when a peer is
// lost), so 2 x KOLO_TIMEOUT + 5 s is ample; a server still running then is
// stuck (say, on a worker whose host fell silent).
void Supervisor::openServersWindow() {
  serversWindowSeconds_ = 2 * koloTimeoutSeconds(options_.exports) + 5;
  serversDeadline_ =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(serversWindowSeconds_));
}

void Supervisor::checkServersWindow(Clock::time_point now) {
  if (reason_ != EndReason::kNone || !serversDeadline_ || now < *serversDeadline_) return;
  std::string stuck;
  for (const auto& rank : ranks_) {
    if (rank->running() && serverJob_.isServer(rank->rank())) {
      stuck += (stuck.empty() ? "" : ", ") + rankName(rank->rank());
    }
  }
  serversDeadline_.reset();
  if (stuck.empty()) return;
  std::ostringstream os;
  os << "every worker has exited, but these parameter servers still run "
     << serversWindowSeconds_ << " s later (2 x KOLO_TIMEOUT + 5 s): " << stuck
     << "; ending the job";
  output_.note(os.str());
  abortJob(EndReason::kServersStuck, SIGTERM);
}

// The workers lost on the way; when the job otherwise finished (exit 0, the
// servers having gone on without them), this line is the only sign of them.
void Supervisor::reportLostWorkers() {
  const std::vector<int>& lost = serverJob_.lostWorkers();
  if (lost.empty()) return;
  std::string list;
  for (int r : lost) {
    const RankProcess& rank = *ranks_[r];
    list +=
        (list.empty() ? "" : "; ") + rankName(r, rank.pid()) + " " + describeExit(rank);
  }
  const std::string count = std::to_string(lost.size()) + " worker(s)";
  const char* went = serverJob_.isStudy()
                         ? " that failed on the way (the study went on): "
                         : " that failed on the way (the parameter "
                           "servers went on): ";
  output_.note(reason_ == EndReason::kNone
                   ? "the job finished without " + count + went + list
                   : count + " had failed before the job ended: " + list);
}

}  // namespace kolo::kolorun
