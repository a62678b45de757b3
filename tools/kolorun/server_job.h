// How a rank's exit bears on the job, when the job may have parameter
// servers (KOLO_SERVERS = S, docs/parameter_server.md; docs/launching.md,
// "Jobs with parameter servers").
//
// kolorun cannot know the parameter servers' mode (the program chooses it),
// but the servers know it: in downpour, easgd and sync with backup workers
// they go on without a dead worker; in plain sync they fail every other
// worker with an error naming it. So kolorun leaves a worker's death to
// them. Policy (onExit):
// - without servers (S = 0), the first rank that fails ends the job;
// - a server that fails ends the job;
// - a worker that fails is recorded as lost and the job goes on;
// - when the last worker has exited: if none of them exited 0, the job has
//   failed, blamed on the first worker lost (the others' failures follow
//   from it, as in plain sync); else the workers are gone and the servers
//   should exit by themselves (the supervisor gives them a window).
//
// A kolo.hpo study (--hpo, docs/hpo.md) is the same with rank 0, the
// study's owner, as the only "server" and no end for the workers: a worker
// that fails is recorded as lost (its team's trial fails, the study goes
// on), and the job ends when its ranks have exited, as any job.
//
// Without --hpo, a job without servers becomes such a study rank by rank:
// a rank other than 0 that fails while it holds a study declaration
// (rendezvous/study_declaration.h: it was inside kolo.hpo's
// Study.optimize or PBT.run) is recorded as lost and the job goes on; any
// other failure ends the job as above. The supervisor reads the
// declaration only when wantsDeclaration() says the verdict depends on it.
//
// Roles: kolorun computes them before the ranks start, as kolo_init does
// (ps::assignRoles over each rank's host index, a pure function), so both
// agree on which ranks are servers.
//
// Contract: single-threaded; ranks are 0..N-1 (with S = 0 any rank, elastic
// workers started later included); each rank's exit is reported once.
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace kolo::kolorun {

class ServerJob {
 public:
  // hostOfRank[r]: the host index of rank r (any numbering); servers: S.
  // Throws kolo::Error (kInvalidArgument) when S < 0 or S >= N.
  ServerJob(const std::vector<int>& hostOfRank, int servers);

  // The policy of a kolo.hpo study of numRanks ranks (see above).
  static ServerJob study(int numRanks);

  bool hasServers() const { return !isServer_.empty(); }
  // --hpo, or a rank was lost inside a declared study.
  bool isStudy() const { return study_ || declaredLoss_; }
  bool isServer(int rank) const {
    return rank >= 0 && rank < static_cast<int>(isServer_.size()) && isServer_[rank];
  }

  struct Verdict {
    bool endJob = false;  // the job has failed: end it, naming failedRank
    int failedRank = -1;
    bool workerLost = false;   // a worker failed; the job goes on unless endJob
    bool workersGone = false;  // that was the last worker and the job goes on
  };
  // inStudy: the rank held a study declaration when it exited (see above).
  Verdict onExit(int rank, bool success, bool inStudy = false);
  // Whether onExit's verdict for this exit depends on inStudy.
  bool wantsDeclaration(int rank, bool success) const {
    return !success && rank != 0 && !hasServers();
  }

  // The workers that failed, in the order of their exits.
  const std::vector<int>& lostWorkers() const { return lost_; }

 private:
  std::vector<bool> isServer_;  // empty without servers
  bool study_ = false;
  bool declaredLoss_ = false;  // a rank was lost inside a declared study
  int workersLeft_ = 0;
  bool anyWorkerFinished_ = false;
  std::vector<int> lost_;
};

// The job's number of parameter servers: --servers, else KOLO_SERVERS as
// the ranks will see it (jobVariable); 0 when neither is a count below -np
// (the ranks then report a bad value themselves), and 0 in an elastic job
// (kolorun refuses --servers there; its driver handles every failure).
int serversOfJob(const LaunchOptions& options);

}  // namespace kolo::kolorun
