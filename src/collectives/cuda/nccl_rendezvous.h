// The store side of making an NCCL communicator (nccl_collectives.h): who
// has come, who failed, and the unique id rank 0 makes. Plain C++, no CUDA
// or NCCL needed: it runs (and is tested) on machines without a GPU.
//
// Keys, in the store:
//   <key>/nccl/uses   counter: each member adds 1 when it makes its
//                     NcclRendezvous; (value - 1) / size is the round, so
//                     that a key used again (the same communicator making
//                     its NCCL communicator anew) never reads an old round
//   and under "<key>/nccl/<round>/":
//   member/<r>  "joined", or "failed: <message>" when rank r failed
//   joined      counter: members that published "joined"
//   failed      counter: members that published a failure
//   id          the 128 bytes of the unique id (rank 0)
// Rounds stay aligned as long as every member of every earlier round made
// its NcclRendezvous (a member that never came leaves the counter short).
//
// Contract
// - Every wait ends by the deadline given to the constructor: a member
//   missing then is Error(kTimeout) naming this rank, the communicator's
//   key and every member that never joined (or, for the id, rank 0), with
//   peer() the first of them.
// - A member that published a failure makes every wait of the others
//   throw Error(kPeerLost) quoting that member's message (peer() its global
//   rank) at their next poll, instead of at the deadline.
// - Ranks in messages are global ranks (NcclGroup::globalRanks).
// - Polls the store's counters with add(key, 0), sleeping 1 ms growing to
//   50 ms between polls; the id is read with the store's own wait in slices.
// - One object per rank and communicator; not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "collectives/cuda/nccl_library.h"

namespace kolo::rendezvous {
class Store;
}

namespace kolo::collectives::cuda {

struct NcclGroup {
  int rank = 0;
  int size = 1;
  std::vector<int> globalRanks;          // empty: the group's own numbers
  std::string key;                       // unique per communicator and generation
  std::chrono::milliseconds timeout{0};  // KOLO_TIMEOUT, for messages

  int globalRank(int member) const;
  // "rank G" of this member, for the start of a message.
  std::string self() const;
};

class NcclRendezvous {
 public:
  using Clock = std::chrono::steady_clock;
  using MakeId = std::function<NcclLibrary::UniqueId()>;

  // Throws Error(kInvalidArgument) for a rank outside [0, size), a size
  // below 1, an empty key or a globalRanks list of another size. Counts
  // this member in <key>/nccl/uses (the store's error if that fails).
  NcclRendezvous(rendezvous::Store& store, NcclGroup group, Clock::time_point deadline);

  // Publishes this rank's arrival, then waits until every member arrived.
  void join();

  // Rank 0: makeId() (ncclGetUniqueId), published; the others: read.
  // Every member then holds the same bytes.
  NcclLibrary::UniqueId exchangeId(const MakeId& makeId);

  // Throws Error(kPeerLost) when a member published a failure; polls the
  // store at most once per `every` (cheap to call in a loop).
  void checkPeers(std::chrono::milliseconds every = std::chrono::milliseconds(100));

  // Publishes this rank's failure (once; later calls do nothing), so the
  // others fail at once. Never throws (a store that fails is ignored: the
  // others then time out).
  void fail(const std::string& message) noexcept;

  const NcclGroup& group() const { return group_; }
  Clock::time_point deadline() const { return deadline_; }

 private:
  std::string keyOf(const std::string& name) const;
  [[noreturn]] void throwPeerFailure();
  [[noreturn]] void throwMissing(bool forId);
  // Polls until done() or the deadline (false), checking for failures.
  bool pollUntil(const std::function<bool()>& done);

  rendezvous::Store& store_;
  NcclGroup group_;
  Clock::time_point deadline_;
  std::string prefix_;  // "<key>/nccl/<round>/"
  Clock::time_point lastCheck_{};
  bool failed_ = false;
};

}  // namespace kolo::collectives::cuda
