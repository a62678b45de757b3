// The point-to-point messages of a communicator (Communicator::send/recv/
// isend/irecv): tagged, typed messages between two ranks over the
// communicator's transport, matched by (channel, source, tag) in order.
//
// Wire: every message travels as a 32-byte header (magic, channel, tag,
// dtype, count) followed by its payload (when not empty), both on one
// transport tag, kPointToPointTag, which no collective uses (bit 63 set;
// the mpi transport carries such tags on a communicator of their own). The
// transport keeps the two in order per (source, tag), and completes a send
// once the receiver's transport makes progress, whether or not a receive is
// posted (every transport buffers such messages: tcp and shm all, mpi those
// with bit 63). This engine relies on it: it posts a payload's receive only
// after reading its header, and only while it runs (a wait or test).
//
// Matching (this class, not the transport): for each source rank the
// receives the caller posted wait in posting order. While one of them is
// unmatched, the engine keeps one header receive posted from that source;
// each header that arrives is matched with the first posted receive of its
// channel and tag: if count and dtype agree, the payload is received
// straight into the caller's buffer; if not, the payload is drained into
// scratch and the receive fails with Error(kMismatch) naming both ranks
// and both descriptions; with no posted receive, the payload goes to a
// buffer of its own (an unexpected message) that a later receive copies
// from. Messages from a source are read only while a receive from it is
// pending; until then they wait in the transport's own buffers.
//
// Contract
// - Thread safety: none; the owner serialises every call (the
//   communicator's operation queue) and uses the transport only so.
// - Ops: postSend/postRecv return an Op; it is done when its requests are
//   done (sends: both parts left this rank; receives: the buffer holds the
//   message). done()/error() may be read from any thread.
// - wait(op) drives the transport (Transport::wait, so a dead peer is
//   Error(kPeerLost) and a silent one Error(kTimeout), both naming it, and
//   thrown; a timeout on op's peer names op's message: count, dtype, tag)
//   until op is done, then rethrows op's own error (a mismatch).
// - failAll(error) fails every pending op (shutdown, a broken
//   communicator); it does not touch the transport.
#pragma once

#include <kolo/communicator.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace kolo::api {

inline constexpr transport::Tag kPointToPointTag = transport::kUserMessageBit;

class PointToPoint {
 public:
  class Op {
   public:
    bool done() const { return done_.load(std::memory_order_acquire); }
    // Set before done; null on success.
    std::exception_ptr error() const { return error_; }
    // Called once when the op ends, on the thread that ends it (the one
    // driving the transport); set before the op can end (at posting).
    std::function<void(std::exception_ptr)> onDone;

   private:
    friend class PointToPoint;
    void finish(std::exception_ptr error);

    bool send = false;
    uint32_t channel = 0;
    int peer = 0;
    int tag = 0;
    DataType dtype = DataType::kFloat32;
    size_t count = 0;
    void* data = nullptr;  // the caller's buffer
    uint8_t header[32] = {};
    transport::RequestPtr headerRequest, payloadRequest;  // sends
    std::exception_ptr error_;
    std::atomic<bool> done_{false};
  };
  using OpPtr = std::shared_ptr<Op>;

  // Errors name ranks as the transport's globalRank() gives them.
  explicit PointToPoint(transport::Transport& transport);

  // Arguments are checked by the caller (peer in range, tag >= 0, buffer).
  OpPtr postSend(const SendOptions& o, std::function<void(std::exception_ptr)> onDone);
  OpPtr postRecv(const RecvOptions& o, std::function<void(std::exception_ptr)> onDone);

  void wait(Op& op);
  // One progress pass; true when op is done.
  bool test(Op& op);
  void failAll(std::exception_ptr error);
  bool idle() const { return pending_ == 0; }

 private:
  // A message whose header arrived before any receive matched it.
  struct Unexpected {
    uint32_t channel = 0;
    int tag = 0;
    DataType dtype = DataType::kFloat32;
    uint64_t count = 0;
    std::vector<uint8_t> payload;
  };
  // What is read from one source rank.
  struct Source {
    std::deque<OpPtr> posted;  // unmatched receives, in posting order
    std::deque<Unexpected> unexpected;
    transport::RequestPtr header;  // pending header receive
    uint8_t headerBytes[32] = {};
    transport::RequestPtr payload;  // pending payload receive...
    OpPtr target;                   // ...into this receive's buffer, or
    Unexpected incoming;            // ...into incoming.payload
    std::exception_ptr mismatch;    // ...drained; target fails with it
  };

  // Moves everything that can move without blocking.
  void advance();
  void advanceSource(int rank);
  void onHeader(int rank, Source& s);
  void onPayload(Source& s);
  void finishSend(Op& op);
  void ended(Op& op, std::exception_ptr error);
  // The transport request `op` waits on now; null when none (done).
  transport::Request* blocker(Op& op);
  // Copies an unexpected message into `op` (or fails it); true when one
  // matched.
  bool takeUnexpected(Source& s, Op& op);
  std::exception_ptr mismatch(const Op& op, int rank, DataType dtype,
                              uint64_t count) const;
  // Error(kTimeout) naming op's peer and message.
  std::exception_ptr timedOut(const Op& op) const;

  transport::Transport& transport_;
  std::vector<Source> sources_;  // by rank
  std::vector<OpPtr> sends_;     // pending sends
  size_t pending_ = 0;           // ops not done
};

}  // namespace kolo::api
