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
// - submit(id, spec, slotHint): an operation pending on this rank; `id` is
//   the runtime's token for it (opaque here). Throws
//   Error(kInvalidArgument) when a pending operation already has that name.
//   `slotHint` (optional, in and out): the cache slot where the caller last
//   found this name; when that slot still holds the name, the name is not
//   hashed. On return it holds the name's slot now (kNoSlot: not cached).
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
// - Joined ranks: an operation is ready when at least one rank submitted it
//   and every live (not joined) rank did; ranks that did not submit it
//   (joined) take part with zeros (ReadyOp::submitted tells who).
// - Groups: a group's members are held back until all of them are ready;
//   a member that fails (mismatch) fails the rest of its group as they come.
//   A group needs at most cacheCapacity members.
// - Cache capacity must be the same on every rank (the fixed part's size
//   depends on it); a difference is an Error(kMismatch) from process().
// - Not thread-safe (the background thread owns it).
//
// Wire format (little endian). Fixed part: u8 version, u8 flags (1 shutdown,
// 2 joined, 4 stall shutdown), u16 zero, u32 bytes of the variable part,
// i64 fusion threshold, f64 cycle time ms, then capacity/8 (rounded up)
// bytes of slot bits (bit s%8 of byte s/8: this rank has slot s pending).
// Variable part (empty when there is nothing to say): u32 spec count, the
// specs (OpSpec::encode), u32 length + text of the stall shutdown message.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
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

// A ready operation. `submitted` and `arrivals` are views into the Outcome
// that holds the operation (one buffer each per cycle, not two allocations
// per operation): valid while that Outcome lives (moving it keeps them).
struct ReadyOp {
  using TimePoint = std::chrono::steady_clock::time_point;
  // The agreed spec (the lowest submitting rank's), shared with the
  // response cache.
  std::shared_ptr<const OpSpec> spec;
  std::optional<OpId> localId;         // nullopt: this rank joined, contributes zeros
  std::vector<int64_t> firstDims;      // allgather, alltoall: each rank's first
                                       // dimension (0 for a rank that did not submit)
  std::vector<int32_t> devices;        // device memory (spec->onDevice): each rank's
                                       // CUDA device (-1 for a rank that did not submit)
  std::span<const uint8_t> submitted;  // per rank: 1 submitted it (else zeros)
  // Per rank: the local time of the cycle that first saw its submission;
  // time_point::min() for a rank that did not submit.
  std::span<const TimePoint> arrivals;
  int contributors() const;  // ranks that submitted
};

struct OpError {
  OpId localId;
  std::string name;
  std::string message;
};

// Move-only: the ready operations' views point into it.
struct Outcome {
  Outcome() = default;
  Outcome(Outcome&&) = default;
  Outcome& operator=(Outcome&&) = default;
  Outcome(const Outcome&) = delete;
  Outcome& operator=(const Outcome&) = delete;

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

  // Storage of the ready operations' `submitted` and `arrivals` (rank-major
  // per operation, in ready order).
  std::vector<uint8_t> submittedBits;
  std::vector<std::chrono::steady_clock::time_point> arrivalTimes;
};

class Negotiator {
 public:
  Negotiator(int rank, int size, size_t cacheCapacity = 1024);

  static constexpr size_t kNoSlot = static_cast<size_t>(-1);
  // The spec is copied into reused storage.
  void submit(OpId id, const OpSpec& spec, size_t* slotHint = nullptr);
  Message prepare(const CycleFlags& flags);
  // Size of every rank's fixed part, and the variable part's size that a
  // fixed part announces (what the runtime's allgatherv needs).
  size_t fixedBytes() const;
  static size_t variableBytes(const std::vector<uint8_t>& fixed);
  Outcome process(
      const std::vector<std::vector<uint8_t>>& fixed,
      const std::vector<std::vector<uint8_t>>& variable,
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

  // Operations still pending on this rank (for shutdown: fail them).
  std::vector<OpId> pendingIds() const;
  size_t pendingCount() const;
  const ResponseCache& cache() const { return cache_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Local {
    OpId id;
    OpSpec spec;
    enum class State { kUnsent, kSent, kCached } state;
    size_t slot = 0;  // kCached
  };
  struct Candidate;
  // process()'s steps (negotiator.cc names them 1-6), over one cycle's
  // state.
  struct Cycle;
  void readMessages(Cycle& c, const std::vector<std::vector<uint8_t>>& fixed,
                    const std::vector<std::vector<uint8_t>>& variable);
  void readVariable(Cycle& c, int r, const std::vector<uint8_t>& part, bool stall);
  void collectHolders(Cycle& c, const std::vector<std::vector<uint8_t>>& fixed);
  void readNewSpecs(Cycle& c);
  void cachedCandidates(Cycle& c);
  void sentCandidates(Cycle& c);
  void resolveGroups(Cycle& c);
  void emitReady(Cycle& c);
  void followCache();
  void reportWaiting(Cycle& c);
  bool allLiveHave(const Cycle& c, const uint8_t* has) const;
  void failLocal(Cycle& c, const std::string& name, const std::string& message,
                 const Candidate* held = nullptr);
  OpId takeLocal(const Candidate& cand);
  void arrivalsInto(const Cycle& c, const std::string& name, const uint8_t* submitted,
                    Clock::time_point* a);
  void keepSeen(const Cycle& c, const std::string& name,
                const std::vector<bool>& submitted);
  // Per-cycle scratch of process(), kept for its capacity: each holder's or
  // candidate's per-rank bits (1 = has it) at an offset.
  std::vector<uint8_t> bits_;

  // This rank's pending operations. Those that hit the cache (kCached) sit
  // in cached_ at their slot, so the steady state (every operation cached)
  // finds them without hashing a name; the others (kUnsent, kSent) are in
  // pending_ by name (unordered: every decision goes by cache slot or by
  // the names of sent_). A cached_ element keeps its strings' memory for
  // the next operation of that slot.
  using Pending = std::unordered_map<std::string, Local>;
  Pending pending_;
  std::vector<Local> cached_;        // by slot; valid where cachedUsed_
  std::vector<uint8_t> cachedUsed_;  // by slot
  size_t cachedCount_ = 0;
  // This rank's operation `id` with `spec`, copied into reused storage:
  // placeCached at its cache slot (free), placeUnsent into pending_ as
  // kUnsent (false, nothing placed: the name is in pending_ already).
  void placeCached(size_t slot, OpId id, const OpSpec& spec);
  bool placeUnsent(OpId id, const OpSpec& spec);
  void releaseCached(size_t slot);
  // Nodes of decided operations, for reuse by submit() (at most
  // kSpareNodes).
  static constexpr size_t kSpareNodes = 4096;
  std::vector<Pending::node_type> spareNodes_;
  void release(Pending::iterator it);  // out of pending_, into spareNodes_
  // Names not (or no longer) cached: the spec each rank sent, kept by every
  // rank until the name is decided. Ordered, so decisions go by name.
  std::map<std::string, std::vector<std::optional<OpSpec>>> sent_;
  // Per name, per rank: the cycle time that first saw it submitted
  // (time_point::min(): not yet).
  std::map<std::string, std::vector<Clock::time_point>> firstSeen_;
  // Groups with a failed member: members still to be failed, and why.
  struct FailedGroup {
    uint32_t remaining;
    std::string message;
  };
  std::map<uint64_t, FailedGroup> failedGroups_;
  int rank_;
  int size_;
  ResponseCache cache_;
};

}  // namespace kolo::runtime
