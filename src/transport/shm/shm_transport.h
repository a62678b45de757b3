// Point-to-point transport between the ranks of one host over POSIX shared
// memory.
//
// Layout
// - Every rank creates one segment holding its *inbound* rings: one
//   single-producer/single-consumer byte ring per local rank (itself
//   included, so self-sends work like any other), plus a doorbell (a futex
//   word) on which it sleeps when idle. Each rank maps every local rank's
//   segment: it consumes from the rings in its own segment and produces into
//   its ring in each peer's segment.
// - A ring's head (bytes ever written) is written only by the producer and
//   its tail (bytes ever consumed) only by the consumer, each on its own
//   cache line, with release stores and acquire loads.
//
// Set-up (create) is collective over the ranks in `localRanks`: each rank
// creates its segment, publishes "<pid> <name>" under
// "<keyPrefix>/g<n>/seg/<rank>" in the store (n: how many transports this
// rank has created under keyPrefix, counted in the store, so ranks that
// re-create their transports together can reuse a store), maps every local
// peer's segment, then joins a store counter barrier
// ("<keyPrefix>/g<n>/mapped/<first local rank>"); past the barrier every
// segment is shm_unlink'ed, so nothing is left in /dev/shm even when
// processes are killed later. Transports created at the same time on one
// store need distinct keyPrefixes.
//
// Contract
// - Semantics are those of Transport (transport.h): tagged messages, exact
//   size matching, FIFO per (source, tag), kAnySource, non-blocking
//   isend/irecv completed by progress().
// - A send is complete once its last byte is in the receiver's ring (the
//   buffer may then be reused), even if the receiver has not posted the
//   receive yet. Sends larger than the ring stream in chunks as the ring
//   drains.
// - Messages to ranks outside `localRanks` (or out of [0, size)) throw
//   Error(kInvalidArgument) from isend/irecv.
// - Failure: a local peer whose process died (gone, or a zombie) while we
//   wait for it is Error(kPeerLost) naming its global rank, detected within
//   about 100 ms of waiting; so is a peer that aborted (abort(): its error,
//   "(reported by rank R)"). After it the transport is broken and every
//   pending and later request fails with that error. A silent but living
//   peer is left to Transport::wait's timeout (Error(kTimeout)), which
//   silentFor() confines to peers that are really silent: every rank bumps
//   a pulse in its own segment whenever it waits (idle(), also while it
//   waits on another transport of a RouterTransport) or its progress()
//   moves data, so a local peer that is itself blocked on a third rank is
//   never blamed (HeartbeatSchedule's semantics, without messages). With
//   per-peer isolation (transport.h) only what needs the dead peer fails;
//   a send to a peer not yet known dead may still complete into its ring.
// - Thread safety: one thread at a time per ShmTransport (Transport's rule).
//   Distinct ShmTransports (e.g. ranks as threads of one process) are
//   independent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include "common/heartbeat_schedule.h"
#include "transport/transport.h"

namespace kolo::rendezvous {
class Store;
}

namespace kolo::transport {

class ShmTransport : public Transport {
 public:
  struct Options {
    int rank = 0;                 // global rank
    int size = 1;                 // world size
    std::vector<int> localRanks;  // global ranks on this host (includes rank), sorted
    std::chrono::milliseconds timeout{30000};
    std::chrono::milliseconds connectTimeout{60000};
    std::chrono::microseconds spin{100};
    size_t ringBytes = 1 << 20;     // per ordered pair; rounded up to a power of two
    std::string keyPrefix = "shm";  // store keys under this prefix
    std::string jobName;            // unique per job, used in segment names
  };

  // Collective over options.localRanks (see above). Throws
  // Error(kInvalidArgument) for inconsistent options, Error(kIo) when a
  // segment cannot be created or mapped, and the store's Error(kTimeout)
  // when a local rank does not show up within connectTimeout.
  static std::unique_ptr<ShmTransport> create(const Options& options,
                                              rendezvous::Store& store);
  ~ShmTransport() override;

  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int src, Tag tag, void* data, size_t bytes) override;
  bool progress() override;
  // Sleeps on this rank's doorbell (a futex that peers ring after giving it
  // data or ring space) for up to `max`.
  void idle(std::chrono::microseconds max) override;
  // Whether local peer `peer`'s pulse has not moved for at least `d` (as
  // far as this rank has watched it); nullopt for this rank itself and for
  // ranks not on this host.
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const override;
  void abort(const Error& cause) override;
  void setIsolatePeerFailures(bool on) override;
  bool isolatesPeerFailures() const override { return isolate_; }
  bool peerLost(int peer) const override;

  // Capacity of each ring in bytes (options.ringBytes rounded up).
  size_t ringBytes() const { return ringBytes_; }

 private:
  struct Segment;  // a mapped segment (shm_segment.h)
  struct RingCtl;  // head/tail of one ring, in shared memory

  struct Ring {
    RingCtl* ctl = nullptr;
    uint8_t* data = nullptr;
    uint64_t mask = 0;  // capacity - 1 (capacity is a power of two)
  };

  struct PendingSend {
    RequestPtr request;
    const uint8_t* data;
    uint64_t offset = 0;  // bytes of this message's wire form written
  };

  // Heap memory for unexpected messages; large ones are recycled (page
  // faults are expensive, and collectives see the same sizes again).
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
  };

  struct Unexpected {
    int src;  // local index
    Tag tag;
    size_t bytes;
    Buffer buffer;
    size_t received = 0;
  };

  struct PostedRecv {
    RequestPtr request;
    int src;  // local index, or kAnySource
    uint8_t* data;
  };

  // Per local peer: our inbound ring from it and outbound ring to it.
  struct Peer {
    int rank = -1;  // global
    pid_t pid = 0;
    Ring in;                   // in our segment, the peer produces
    Ring out;                  // in the peer's segment, we produce
    uint64_t inTail = 0;       // our copy of in.ctl->tail
    uint64_t outHead = 0;      // our copy of out.ctl->head
    uint64_t outTailSeen = 0;  // out.ctl->tail when a send last had to stop
    std::deque<PendingSend> sends;
    // The inbound message being read, if any.
    bool reading = false;
    Tag tag = 0;
    size_t bytes = 0;
    size_t received = 0;
    uint8_t* dst = nullptr;            // user buffer, unexpected buffer or null (discard)
    RequestPtr request;                // the matched receive, if any
    Unexpected* unexpected = nullptr;  // the buffering entry, if any
    std::exception_ptr lost;           // isolation: why it was dropped
  };

  explicit ShmTransport(const Options& options);
  void connect(rendezvous::Store& store);
  // connect()'s steps.
  std::unique_ptr<Segment> createOwnSegment();
  std::string publishSegment(rendezvous::Store& store);
  std::unique_ptr<Segment> mapPeerSegment(int j, const std::string& gen,
                                          rendezvous::Store& store);
  void waitAllMapped(const std::string& gen, rendezvous::Store& store);
  void unlinkAll();
  void unlinkOrphans();
  void linkRings();

  int localIndex(int rank, const char* what) const;
  bool pumpSend(Peer& peer, int me);
  bool pumpRecv(Peer& peer, int index);
  void startMessage(Peer& peer, int index, Tag tag, size_t bytes);
  void finishMessage(Peer& peer);
  void ringDoorbell(Segment& segment);
  bool anythingReady();
  void checkPeers();
  // Local peer j's abort notice (abort()) as its error; null when none.
  std::exception_ptr abortNoticeOf(int j) const;
  void dropPeer(int j, std::exception_ptr error);
  RequestPtr lostRequest(Request::Kind kind, const Peer& p, Tag tag, size_t bytes);
  [[noreturn]] void breakWith(std::exception_ptr error);
  Buffer takeBuffer(size_t bytes);
  void giveBuffer(Buffer buffer);
  RequestPtr failedRequest(Request::Kind kind, int peer, Tag tag, size_t bytes);
  // Pulses (shm_liveness.cc): start watching the peers' pulses (every peer
  // heard now) with ours at `own`; beat() bumps ours (one relaxed store to
  // a cache line of our own, no system call).
  void startPulses(std::atomic<uint64_t>* own);
  void beat() { pulse_->store(++pulses_, std::memory_order_relaxed); }

  Options options_;
  size_t ringBytes_ = 0;
  int me_ = 0;                                      // our local index
  std::vector<std::unique_ptr<Segment>> segments_;  // by local index
  std::vector<Peer> peers_;                         // by local index
  std::list<PostedRecv> posted_;                    // in posting order
  std::list<Unexpected> unexpected_;                // in arrival order
  std::vector<Buffer> spareBuffers_;
  size_t spareBytes_ = 0;
  std::exception_ptr broken_;
  bool isolate_ = false;  // per-peer failure isolation (transport.h)
  size_t pendingSends_ = 0;
  uint32_t progressCalls_ = 0;
  std::chrono::steady_clock::time_point lastLivenessCheck_;
  std::atomic<uint64_t>* pulse_ = nullptr;                // ours, in our segment's header
  uint64_t pulses_ = 0;                                   // our beats so far
  std::vector<const std::atomic<uint64_t>*> peerPulses_;  // by local index
  // Each peer's pulse as last read, and when it was last seen to move
  // (updated by silentFor, hence mutable).
  mutable std::vector<uint64_t> pulseSeen_;
  mutable std::optional<HeartbeatSchedule> heard_;
};

}  // namespace kolo::transport
