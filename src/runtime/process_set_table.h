// The job's process sets and the handles of their operations: the one C++
// owner that the bindings (the C API, and through it Python) go through, so
// that a job that re-forms renumbers sets and handles in one place.
//
// State
// - Open between open() and close() (kolo_init and kolo_finalize). Holds
//   the world communicator (to split process sets from), the sets by id and
//   the handle table (handle_table.h; it outlives close(): its values are
//   never reused within the process).
// - Process set 0 is every rank. Its runtime runs on its own communicator,
//   `world->split(all ranks, "runtime/0")`, so the runtime's background
//   cycles and the synchronous calls on the world communicator never share
//   transports. open() starts it, on every rank at once.
// - Process set k > 0: `world->split(ranks, "set/<ranks>/<generation>")`
//   plus its own Runtime (the options without a timeline file: that is set
//   0's). The generation counts this process's earlier creations of the
//   same rank list, so the team name is fresh in the job (split requires
//   it) and the same on every member as long as members create and destroy
//   their sets in the same order (the contract). The id is agreed over the
//   new team: the maximum of the members' next free ids (one allgather), so
//   it is the same on every member and unused on each.
//
// Contract
// - Thread-safe. A call takes the table's lock briefly to look things up
//   and copy shared pointers; nothing blocks on other ranks while holding
//   it (split, allgather, wait and shutdown run unlocked). enqueue() holds
//   it across Runtime::enqueue (which never blocks), so the hot path copies
//   no shared pointer and finds set 0 without a map look-up.
// - Lock order: open/close's lifecycle lock, then the table's, then the
//   handle table's and the runtimes' own.
// - Failures: kClosed (not open) and kUnknown (an id this rank does not
//   know: never created here, destroyed, or this rank is not a member) are
//   returned for the binding to word; a communicator's or runtime's failure
//   is thrown (kolo::Error).
#pragma once

#include <kolo/communicator.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/handle_table.h"
#include "runtime/runtime.h"

namespace kolo::runtime {

class ProcessSetTable {
 public:
  struct ProcessSet {
    int id = 0;
    std::vector<int> ranks;  // world ranks, in the order given
    std::shared_ptr<Communicator> comm;
    std::unique_ptr<Runtime> runtime;
    std::atomic<int64_t> barriers{0};  // names of barriers submitted on it
  };
  using SetPtr = std::shared_ptr<ProcessSet>;

  enum class Status { kOk, kClosed, kUnknown };
  struct Lookup {
    Status status = Status::kClosed;
    SetPtr set;          // kOk
    int worldRank = -1;  // this rank in the world (for the binding's errors)
  };

  // Starts process set 0 with `options`. Collective over every rank of
  // `world`. Throws kolo::Error (the table stays closed then).
  void open(const std::shared_ptr<Communicator>& world, const RuntimeOptions& options);
  // Shuts down every runtime (pending handles fail; every member's runtime
  // stops in the same cycle), drops every handle and process set, then
  // releases the runtimes' communicators and `world` (the caller's
  // reference to the world, its last one at kolo_finalize) at once, a thread
  // each, as the exit goodbye does (api/exit_goodbye.h). Each release runs
  // that communicator's closing step, and those steps wait for different
  // peers: a peer that waits in a collective on the world meets the world's
  // closing step at once and fails naming this rank ("left the job
  // (finalized)"), while a set's closing step waits for that peer's own
  // finalize (or its timeout). One after the other, the world's goodbye
  // would come only after the sets' steps, a KOLO_TIMEOUT later.
  // Never throws. When closed: only releases `world`.
  void close(std::shared_ptr<Communicator> world = nullptr);

  Lookup find(int id);
  // Runtime::enqueue on set `id`; *worldRank is set for kUnknown's error.
  Status enqueue(int id, const OpRequest& request, HandlePtr* out, int* worldRank);
  // Collective over `ranks` (world ranks): a new set and its runtime; its
  // agreed id in *id.
  Status create(const std::vector<int>& ranks, int* id);
  // Takes set `id` (not 0) out of the table; retire() it outside any lock.
  Lookup detach(int id);
  // Shuts the set's runtime down (its pending handles fail) and releases
  // its communicator (a closing barrier over the members). Throws.
  static void retire(SetPtr set);
  // This rank's rank in set `id`; -1 when it is not a member (kOk).
  Status rankOf(int id, int* rank);

  HandleTable& handles() { return handles_; }

 private:
  struct State {
    std::shared_ptr<Communicator> world;
    RuntimeOptions options;        // for process sets (no timeline file)
    std::map<int, SetPtr> sets;    // id -> set; 0 always present
    ProcessSet* global = nullptr;  // sets[0], without a look-up
    int nextSetId = 1;
    std::map<std::vector<int>, int> generations;  // creations per rank list
  };

  std::mutex lifecycleMu_;        // serialises open() and close()
  std::mutex mu_;                 // guards state_ and everything in it
  std::unique_ptr<State> state_;  // null when closed
  HandleTable handles_;           // open while state_ is set
};

}  // namespace kolo::runtime
