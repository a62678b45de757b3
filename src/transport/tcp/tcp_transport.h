// Point-to-point messaging over TCP sockets: the transport between hosts
// (and, for tests and benchmarks, between ranks of one host over loopback).
//
// Setup (create): every rank listens on advertiseAddress:<free port> and
// publishes "ip:port" in the store under "<keyPrefix>/addr/<rank>". For each
// pair of connected ranks the higher rank connects to the lower one; the
// lower rank sends a challenge, the higher rank answers with a handshake
// naming both ranks and the world size and proving the job secret
// (tcp_handshake.h); the lower rank checks it and answers with its own
// rank and proof, which the higher rank checks. A connection that does not
// prove the secret is closed and logged, and never takes a rank's place;
// the lower rank handshakes every accepted connection at once, each with
// its own deadline, so silent ones do not delay the ranks (tcp_setup.cc).
// The result is a full mesh among the peers selected by Options::connect.
//
// Wire format per message: a 16-byte header (tag, byte count; the top bit of
// the count marks control frames: the goodbye sent on destruction, the
// heartbeat sent while waiting, the abort notice sent by a failing rank)
// followed by the payload; decoded by the pure functions of tcp_frame.h.
//
// Liveness: while a rank waits (idle()), it sends a heartbeat to every peer
// it is not already streaming to, every timeout/4 (50 ms..1 s). A peer is
// silent when nothing came from it for the timeout; only then does a wait
// on it time out. A rank that fails (abort()) sends each peer an abort
// notice carrying its error, so the peers fail naming the rank really lost.
//
// Contract (see transport.h for the shared semantics)
// - Ownership: the transport owns its sockets; buffers passed to isend/irecv
//   are borrowed until their request is done. create() borrows the store
//   only while it runs.
// - Thread safety: one thread at a time (the caller serialises).
// - Blocking: create() blocks until every selected peer is connected, up to
//   Options::connectTimeout (then Error(kTimeout) naming the missing ranks).
//   isend/irecv/progress never block; idle() blocks in poll() up to `max`.
// - Failure: EOF, ECONNRESET or EPIPE on a link is Error(kPeerLost) naming
//   the rank; it fails every pending request and every later call (when no
//   pending request needs that rank, only once one does; with per-peer
//   isolation only the requests to and from it: transport.h,
//   tcp_failure.cc). A size
//   mismatch fails only that receive with Error(kMismatch). isend/irecv to a
//   rank that is out of range or not selected by Options::connect throws
//   Error(kInvalidArgument). Sending to oneself is allowed (a memory copy).
// - Destruction: queued sends are flushed (bounded by the timeout unless the
//   transport is already broken), then a goodbye frame tells every peer
//   that this close is orderly; a peer that closes after its goodbye is only
//   an error for requests that still needed it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace kolo::rendezvous {
class Store;
}

namespace kolo::transport {

class TcpTransport : public Transport {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    // size entries: which peers to link with (others: isend/irecv throw
    // kInvalidArgument); empty = all. Must be symmetric across ranks.
    std::vector<bool> connect;
    // IP address to listen on and advertise; empty = 127.0.0.1.
    std::string advertiseAddress;
    std::chrono::milliseconds timeout{30000};  // silent-peer timeout
    std::chrono::milliseconds connectTimeout{60000};
    std::chrono::microseconds spin{100};
    size_t socketBufferBytes = 4 << 20;
    std::string keyPrefix = "tcp";  // store keys live under this prefix
    std::string secret;             // the job secret both ends prove
  };

  // Collective over the selected ranks (see the setup above).
  static std::unique_ptr<TcpTransport> create(const Options& options,
                                              rendezvous::Store& store);

  ~TcpTransport() override;

  int rank() const override;
  int size() const override;
  RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int src, Tag tag, void* data, size_t bytes) override;
  bool progress() override;
  void idle(std::chrono::microseconds max) override;
  std::chrono::milliseconds timeout() const override;
  bool blocksInIdle() const override { return true; }
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const override;
  void abort(const Error& cause) override;
  void setIsolatePeerFailures(bool on) override;
  bool isolatesPeerFailures() const override;
  bool peerLost(int peer) const override;

  // Whether this rank has a link to `peer` (itself included).
  bool connected(int peer) const;

 private:
  class Impl;
  explicit TcpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::transport
