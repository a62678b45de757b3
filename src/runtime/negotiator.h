// One negotiation cycle: what this rank tells the others, and what every
// rank concludes from what all ranks told. See docs/runtime.md ("One
// cycle").
//
// The negotiator is pure bookkeeping: it never talks to other ranks. The
// runtime moves its messages (allgather of the fixed parts, allgatherv of
// the variable parts when any is non-empty), which lets the unit tests run
// several negotiators ("simulated ranks") in one thread by handing each the
// others' messages.
//
// Contract
// - submit(id, spec): an operation pending on this rank; `id` is the
//   runtime's token for it. Throws Error(kInvalidArgument) when a pending
//   operation already has that name.
// - prepare(flags) -> Message: this rank's message for the cycle. Every
//   rank must call prepare() then process() exactly once per cycle.
// - process(fixed, variable) -> Outcome: `fixed[r]` / `variable[r]` are rank
//   r's parts (variable may be empty for all ranks). Identical input gives
//   identical output on every rank, except `ready[i].localId`, which is
//   this rank's token (or nullopt when this rank has joined and only
//   contributes zeros).
// - Ready operations come in execution order; a group's members come
//   together and only when all are ready on all live ranks.
// - Mismatch: an error in `errors` for the operation on every rank that
//   submitted it, with the text of docs/runtime.md; the name leaves the
//   pending set everywhere.
// - Not thread-safe (the background thread owns it).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/op_spec.h"
#include "runtime/response_cache.h"

namespace kolo::runtime {

using OpId = uint64_t;

struct CycleFlags {
  bool shutdown = false;             // this rank is shutting down
  bool joined = false;               // this rank called join() and has no data
  std::string stallShutdown;         // non-empty: rank 0 ends the job with this
  int64_t fusionThresholdBytes = 0;  // rank 0's values are used by all
  double cycleTimeMs = 0;
};

struct Message {
  std::vector<uint8_t> fixed;     // same size on every rank
  std::vector<uint8_t> variable;  // new / changed specs, may be empty
};

struct ReadyOp {
  OpSpec spec;
  std::optional<OpId> localId;     // nullopt: this rank joined, contributes zeros
  std::vector<int64_t> firstDims;  // allgather: each rank's first dimension
  std::vector<std::chrono::steady_clock::time_point> arrivals;  // per rank
};

struct OpError {
  OpId localId;
  std::string message;
};

struct Outcome {
  std::vector<ReadyOp> ready;
  std::vector<OpError> errors;
  std::vector<int> shutdownRanks;    // ranks that announced shutdown
  std::vector<int> joinedRanks;      // ranks joined (all: join completes)
  std::string stallShutdown;         // from rank 0's flags
  int64_t fusionThresholdBytes = 0;  // rank 0's
  double cycleTimeMs = 0;
  // Names pending somewhere but not ready, with who has submitted them
  // (stall inspector input).
  struct Waiting {
    std::string name;
    OpKind kind;
    std::vector<bool> submitted;
  };
  std::vector<Waiting> waiting;
};

class Negotiator {
 public:
  Negotiator(int rank, int size, size_t cacheCapacity = 1024);

  void submit(OpId id, const OpSpec& spec);
  Message prepare(const CycleFlags& flags);
  Outcome process(
      const std::vector<std::vector<uint8_t>>& fixed,
      const std::vector<std::vector<uint8_t>>& variable,
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

  // Operations still pending on this rank (for shutdown: fail them).
  std::vector<OpId> pendingIds() const;
  size_t pendingCount() const;
  const ResponseCache& cache() const { return cache_; }

 private:
  // (implementation state: pending ops by name with their cache slot or
  // "send as new" mark; per-name per-rank specs of uncached names; per-name
  // per-rank first-seen times.)
  int rank_;
  int size_;
  ResponseCache cache_;
};

}  // namespace kolo::runtime
