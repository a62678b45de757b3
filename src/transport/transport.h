// Point-to-point messaging between the ranks of a group: the one interface
// every collective algorithm sees (algorithms never see a concrete
// transport).
//
// Semantics
// - Messages are tagged. Between one sender and one receiver, messages with
//   the same tag are received in the order they were sent. A receive names a
//   source rank or kAnySource.
// - Sizes must match exactly: a message of n bytes matches a receive of n
//   bytes. A different size fails the receive with Error(kMismatch) naming
//   the sender, the tag and both sizes.
// - isend/irecv never block; the returned Request completes as progress()
//   runs. wait()/waitAll() drive progress() of this transport (and, for a
//   composite transport, of all its parts) until done, so waiting on one
//   request also advances all others posted on the same transport.
// - A send's buffer may be reused once its request is done; a receive's
//   buffer holds the data once its request is done.
// - A send of a message with kUserMessageBit completes as the receiver's
//   transport makes progress, whether or not the receive is posted yet (the
//   receiver buffers it; api/point_to_point.h relies on this). tcp and shm
//   buffer every message so; mpi only these (its other sends above MPI's
//   eager limit wait for the matching receive).
// - Failure: a peer whose process died or whose link closed is an
//   Error(kPeerLost) naming it, raised from progress()/wait() within about
//   2 s. A peer that stays silent while we wait for it longer than
//   timeout() is an Error(kTimeout) naming it. After a failure the transport
//   is broken: every pending and later request fails with that error. A
//   lost peer that no pending request needs (its messages all delivered)
//   may break the transport only when a later request needs it.
// - Per-peer failure isolation (opt-in, setIsolatePeerFailures(true)): a
//   lost peer fails only the requests to and from it, pending and later,
//   with Error(kPeerLost) naming it; receives from kAnySource that are
//   pending when it is lost fail with that error too (the caller's notice
//   of the loss; later ones match the remaining peers). progress() does
//   not throw for it, and every other peer goes on. A peer whose transport
//   aborted (abort()) counts as lost. For point-to-point users such as the
//   parameter servers; collectives keep the default (any loss breaks the
//   communicator). Timeouts are unchanged: wait() throws Error(kTimeout).
// - Thread safety: one thread at a time uses a transport (the caller
//   serialises); it need not be the same thread every time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <kolo/error.h>

#include "common/backoff.h"

namespace kolo::transport {

using Tag = uint64_t;
inline constexpr int kAnySource = -1;
// Tags with this bit carry the point-to-point messages of the public API
// (api/point_to_point.h); collectives never set it (their tags are
// operation sequence * 65536 + step).
inline constexpr Tag kUserMessageBit = Tag{1} << 63;

// State of one posted send or receive. Transports fill it; callers read it
// after completion.
struct Request {
  enum class Kind : uint8_t { kSend, kRecv };

  Request(Kind k, int p, Tag t, size_t n) : kind(k), peer(p), tag(t), bytes(n) {}

  bool done() const { return done_.load(std::memory_order_acquire); }
  void complete() { done_.store(true, std::memory_order_release); }
  void fail(std::exception_ptr e) {
    error = std::move(e);
    complete();
  }

  const Kind kind;
  int peer;  // for a receive from kAnySource: the actual source once done
  const Tag tag;
  const size_t bytes;
  std::exception_ptr error;  // set when the operation failed

 private:
  std::atomic<bool> done_{false};
};

using RequestPtr = std::shared_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes) = 0;
  virtual RequestPtr irecv(int src, Tag tag, void* data, size_t bytes) = 0;

  // Advances pending operations without blocking. Returns true when
  // anything moved. Throws Error(kPeerLost) when a peer is gone.
  virtual bool progress() = 0;

  // Called by wait loops when progress() found nothing to do: may block up
  // to `max` (e.g. in poll()) for an event that could make progress.
  virtual void idle(std::chrono::microseconds max);

  // True when idle() sleeps until an event that can make progress (poll on
  // sockets), so wait loops go to it straight after spinning instead of
  // yielding the core repeatedly first.
  virtual bool blocksInIdle() const { return false; }

  // The silent-peer timeout that wait() enforces.
  virtual std::chrono::milliseconds timeout() const = 0;

  // Whether nothing at all (data or heartbeat) has come from `peer` for at
  // least `d`. wait() fails a request with kTimeout only when its peer is
  // silent: a peer that is itself blocked waiting on a third rank keeps
  // sending heartbeats, so only the ranks next to the stopped one time out,
  // and they name it. Transports without heartbeats answer nullopt: wait()
  // then times out after `timeout` without progress on the transport.
  virtual std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const {
    return std::nullopt;
  }

  // Best effort and bounded (well under a second): tells every peer that
  // this rank fails with `cause`, so they fail with the same diagnosis
  // (naming the rank really lost) rather than only seeing this rank go. The
  // transport is broken afterwards. Default: nothing to tell.
  virtual void abort(const Error& cause) {}

  // Switches per-peer failure isolation (above) on or off; call it before
  // traffic starts or between operations. Throws Error(kInvalidArgument)
  // when the transport cannot isolate (the default; the mpi transport).
  virtual void setIsolatePeerFailures(bool on);
  virtual bool isolatesPeerFailures() const { return false; }

  // Whether `peer`'s link failed (its process died, it closed without a
  // goodbye, it aborted, or it closed while a request still needed it).
  // An orderly goodbye is not a loss. False for out-of-range ranks.
  virtual bool peerLost(int peer) const { return false; }
  // Every lost peer, ascending.
  std::vector<int> lostPeers() const;

  // The job-wide rank of `rank` (a rank of this transport), used when an
  // error names a rank. Identity unless the transport is a view of a subset
  // of ranks (GroupTransport).
  virtual int globalRank(int rank) const { return rank; }

  // Blocks until the request is done; rethrows its error. A request that
  // stays pending for timeout() with no progress on this transport is
  // failed with Error(kTimeout) naming its peer.
  void wait(Request& request);
  void wait(const RequestPtr& request) { wait(*request); }
  void waitAll(std::span<const RequestPtr> requests);

  // Blocking conveniences.
  void send(int dst, Tag tag, const void* data, size_t bytes);
  void recv(int src, Tag tag, void* data, size_t bytes);
  // Sends to dst and receives from src at once (no deadlock when both
  // sides call it); the ring step of most algorithms.
  void sendRecv(int dst, const void* sendData, size_t sendBytes, int src, void* recvData,
                size_t recvBytes, Tag tag);

 protected:
  // Spin budget of wait loops; transports set it from settings and the
  // number of ranks sharing this host.
  std::chrono::microseconds spin_{100};
};

}  // namespace kolo::transport
