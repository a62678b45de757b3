// The elastic driver: kolorun's side of elastic membership
// (rendezvous/elastic_membership.h) when the job runs with --min-np or
// --max-np.
//
// Workers are the ranks kolorun started, by id (their first rank). A
// worker is live until it exits; a failed worker does not end the job.
// poll(), called from the supervisor's loop, reads the workers' requests
// from the store and forms a world (a generation) when every live worker
// waits for one:
// - the first world: every worker started, ranked by id;
// - after a failure or an exit: the waiting workers, ranked by their rank
//   in the previous world. A live worker that has not asked within the join
//   window after the first request of a member of the last world (it is
//   stopped, or cut off) is removed: it is refused if it asks later, and
//   the supervisor kills it. Workers new to the job wait without a window
//   for the members, who come at their next host-update check.
// - fewer live workers than --min-np: no world is formed; after
//   --elastic-timeout without enough workers the job fails, and the waiting
//   workers are refused with that reason.
// - each world after the first is a reset; the one beyond --reset-limit
//   fails the job.
//
// Contract: single-threaded (the supervisor's loop); the store is a client
// of kolorun's own server. Failures are returned, never thrown.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::kolorun {

struct ElasticLimits {
  int minWorkers = 1;
  std::chrono::milliseconds elasticTimeout{600'000};
  std::chrono::milliseconds joinWindow{60'000};
  std::optional<int> resetLimit;  // worlds after the first; none: no limit
};

// The join window for a job whose KOLO_TIMEOUT is `timeoutSeconds`:
// 2 x KOLO_TIMEOUT + 5 s. The survivors of a failure ask for the next world
// within KOLO_TIMEOUT of each other (a dead peer is seen within about 2 s,
// a stopped one at the timeout, and their tear-down does not wait for it),
// so a stopped worker leaves the job about 3 x KOLO_TIMEOUT + 5 s after it
// stopped (docs/elastic.md).
std::chrono::milliseconds joinWindowFor(double timeoutSeconds);

class ElasticDriver {
 public:
  using Clock = std::chrono::steady_clock;

  ElasticDriver(std::unique_ptr<rendezvous::Store> store, int workers,
                ElasticLimits limits);

  void workerExited(int worker, bool success);
  // A worker started after the first world (a discovered host); its id is
  // the next one.
  void addWorker();
  // Tells the workers that the hosts changed (elastic_membership.h's
  // counters): each raises HostsUpdatedInterrupt at its next check.
  void publishHostChange(bool added);

  struct Outcome {
    std::vector<int> remove;             // live workers to kill (did not ask in time)
    std::optional<std::string> failure;  // the job cannot go on: why
    std::vector<std::string> notes;      // one line per world formed
  };
  Outcome poll(Clock::time_point now);

  // When poll() should run again at the latest.
  std::optional<Clock::time_point> nextDeadline() const;
  int64_t generation() const { return generation_; }
  int liveWorkers() const;

 private:
  enum class State { kLive, kExitedOk, kFailed, kRemoved };
  struct Worker {
    State state = State::kLive;
    int64_t asked = 0;   // requests made (elastic/want/<id>)
    int64_t served = 0;  // requests answered
    int lastRank = -1;   // rank in the last world it belonged to
  };

  void readRequests();
  bool waiting(const Worker& w) const { return w.asked > w.served; }
  void form(Outcome& out);
  void refuseWaiting(const std::string& reason);

  std::unique_ptr<rendezvous::Store> store_;
  ElasticLimits limits_;
  std::vector<Worker> workers_;
  int64_t lastTotal_ = 0;
  int64_t generation_ = 0;
  bool failed_ = false;
  bool finishing_ = false;                         // a worker exited 0: the job is ending
  std::optional<Clock::time_point> firstRequest_;  // of the world being formed
  std::optional<Clock::time_point> shortSince_;    // live < minWorkers since
};

}  // namespace kolo::kolorun
