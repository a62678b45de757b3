// The shared-memory arena of the ranks on one host, for collectives that
// read each other's data in place (allreduce_shm.cc) rather than passing
// messages.
//
// Layout of the POSIX shared-memory segment (one per host group, created by
// local rank 0, opened by the others; names exchanged through the store):
//
//   [Header]                        magic, localSize, slot bytes, pids
//   [RankArea 0] ... [RankArea n-1] one per local rank, cache-line aligned:
//       control: monotonically increasing sequence counters, each on its own
//                cache line, written only by the owner; two inline lines
//       staging: two slots of slotBytes (double buffering by step parity)
//
// Synchronisation is by per-rank sequence counters: a rank publishes
// "I reached step s" with a release store; others wait with acquire loads
// until every rank's counter is >= s. No locks, no counter is written by
// two ranks.
//
// Waiting spins (Backoff), then yields, then sleeps on a futex in the
// waiter's own control area, which every publish rings when the waiter is
// asleep (see ringSleepers()); every ~100 ms of waiting it checks
// that the awaited ranks' processes are alive (a dead one that had not
// published the awaited value is Error(kPeerLost) naming its global rank;
// one that published it and then exited is not an error) and gives up
// after the timeout (Error(kTimeout)).
//
// Thread safety: one thread at a time per process uses a ShmGroup.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kolo::rendezvous {
class Store;
}

namespace kolo::shm {

class ShmGroup {
 public:
  struct Options {
    int localRank = 0;
    int localSize = 1;
    std::vector<int> globalRanks;  // global rank of each local rank (names in errors)
    size_t slotBytes = 1 << 20;    // per rank per slot
    std::chrono::milliseconds timeout{30000};
    std::chrono::microseconds spin{100};
    std::string name;  // unique per job and group, used in the segment name
  };

  // Collective over the local ranks: local rank 0 creates and sizes the
  // segment, publishes its name under `key` in the store; the others open it.
  // The segment is unlinked once everyone has mapped it, so nothing is left
  // in /dev/shm even if a process is killed.
  static std::unique_ptr<ShmGroup> create(const Options& options,
                                          rendezvous::Store& store);
  ~ShmGroup();

  int localRank() const { return options_.localRank; }
  int localSize() const { return options_.localSize; }
  size_t slotBytes() const { return options_.slotBytes; }

  // Staging slot `slot` (0 or 1) of local rank r.
  uint8_t* staging(int r, int slot) const;

  // Publishes this rank's counter `which` (0..kCounters-1) = value.
  void publish(int which, uint64_t value);
  // Waits until local rank r's counter `which` >= value.
  void waitFor(int r, int which, uint64_t value);
  // Waits until every local rank's counter `which` >= value.
  void waitForAll(int which, uint64_t value);
  uint64_t counter(int r, int which) const;

  static constexpr int kCounters = 4;

  // Inline lines: for tiny operations, data and descriptor travel in the
  // same cache line as the step number that publishes them, so a peer pays
  // one cache-line transfer per step (the idea of NCCL's LL protocol). Two
  // lines per rank, by step parity; a line is rewritten two steps later,
  // after every rank has arrived at the step in between.
  static constexpr size_t kInlineBytes = 56;
  // The payload of rank r's inline line for `parity`.
  uint8_t* inlinePayload(int r, int parity) const;
  // Publishes this rank's inline line (payload already written) as `step`.
  void publishInline(int parity, uint64_t step);
  // Waits until rank r published its inline line for `step`.
  void waitInline(int r, int parity, uint64_t step);

  // Monotonic step numbers owned by the algorithms using this group.
  uint64_t nextSequence() { return ++sequence_; }

 private:
  ShmGroup(const Options& options, void* base, size_t bytes);
  // Throws kPeerLost when local rank r's process is dead and *c < value.
  void checkPeer(int r, const std::atomic<uint64_t>* c, uint64_t value,
                 const char* what) const;
  void waitOn(const std::atomic<uint64_t>* c, int r, uint64_t value);
  void ringSleepers();  // wakes peers asleep in waitOn

  Options options_;
  void* base_;
  size_t bytes_;
  uint64_t sequence_ = 0;
};

}  // namespace kolo::shm
