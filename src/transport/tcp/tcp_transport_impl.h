// TcpTransport's implementation class, shared by the files that implement
// it (one idea each):
//   tcp_setup.cc      connection setup: listen, connect, the handshake steps
//   tcp_frames.cc     the frame writer (flushPeer) and reader (readPeer) of
//                     one connection, and what each received frame does
//   tcp_transport.cc  posting (isend/irecv), the progress engine, liveness,
//                     failure, orderly shutdown and the public facade
//
// Nomenclature
// - frame: a 16-byte Header (tag, byte count) followed by the payload. A
//   count with kControlBit set is a control frame (goodbye, abort notice,
//   heartbeat).
// - posted receive: an irecv waiting for its message (posted_, in posting
//   order). unexpected message: one that arrived before its receive was
//   posted (unexpected_, in arrival order), held in a pooled buffer.
// - in-flight: the frame a peer's socket is in the middle of delivering;
//   its payload goes to `target` (the receive's own buffer, an unexpected
//   buffer, or nowhere when discarded after a size mismatch).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>

#include "common/heartbeat_schedule.h"
#include "transport/tcp/tcp_frame.h"
#include "transport/tcp/tcp_transport.h"

namespace kolo::transport::tcp {

using Clock = std::chrono::steady_clock;

constexpr size_t kStagingBytes = 64 << 10;
constexpr size_t kDirectReadBytes = 32 << 10;
constexpr size_t kLookaheadBytes = 4 << 10;
constexpr int kMaxIov = 64;
constexpr size_t kDirectPollPeers = 2;
constexpr size_t kPoolMaxBytes = size_t{128} << 20;  // unexpected-message buffers kept

// How long an accepted connection may take to prove the secret: a rank
// greets at once, a stranger that stalls is dropped after this.
constexpr auto kHandshakeWait = std::chrono::seconds(5);
// How many accepted connections may wait for their handshake at once
// (tcp_setup.cc): a newer one pushes out the oldest.
constexpr size_t kMaxPendingHandshakes = 64;

// Thrown by Impl::peerLost when the lost peer was only dropped (see
// tcp_failure.cc), to unwind to progress(), which carries on.
struct PeerDropped {};

// An accepted connection that has been challenged and not yet proven the
// secret (tcp_setup.cc).
struct PendingHandshake {
  int fd = -1;
  std::string na;  // our challenge's nonce
  std::string in;  // the Hello so far
  std::chrono::steady_clock::time_point deadline;
};

// "Message (errno N)".
std::string errnoText(int e);
// Milliseconds until `deadline`, clamped to [0, 2^30].
int millisLeft(Clock::time_point deadline);
// Reads or writes exactly `n` bytes on a non-blocking socket before
// `deadline`; false on timeout, EOF or error (*why says which).
bool ioExact(int fd, void* buf, size_t n, bool write, Clock::time_point deadline,
             std::string* why);
// SO_SNDBUF/SO_RCVBUF, only where the kernel allows the full size.
void setBufferSizes(int fd, size_t bytes);
void setNoDelay(int fd);

}  // namespace kolo::transport::tcp

namespace kolo::transport {

class TcpTransport::Impl {
 public:
  using Clock = tcp::Clock;
  using Header = tcp::Header;

  explicit Impl(const Options& options)
      : options_(options),
        rank_(options.rank),
        size_(options.size),
        peers_(options.size) {
    for (int r = 0; r < size_; ++r) peers_[r].rank = r;
  }

  ~Impl() {
    shutdown();
    for (auto& p : peers_) {
      if (p.fd >= 0) ::close(p.fd);
    }
  }

  void setup(rendezvous::Store& store);

 private:
  // The handshake's state between setup's steps (nonces by peer rank).
  struct SetupState {
    Clock::time_point deadline;
    std::vector<std::string> na;  // the lower rank's challenge
    std::vector<std::string> nc;  // our nonce to it
  };
  struct ListenSocket {
    int fd;
    ListenSocket(int f) : fd(f) {}
    ListenSocket(const ListenSocket&) = delete;
    ListenSocket(ListenSocket&& o) noexcept : fd(o.fd) { o.fd = -1; }
    ~ListenSocket() {
      if (fd >= 0) ::close(fd);
    }
  };
  bool wanted(int r) const;
  std::string addrKey(int r) const;
  ListenSocket listenAndPublish(rendezvous::Store& store);
  int connectTo(int r, const std::string& where, Clock::time_point deadline);
  void greetLower(int r, rendezvous::Store& store, SetupState& st);
  // Step 3 (tcp_setup.cc): until every missing higher rank is linked.
  void acceptHigher(int lfd, std::vector<int>& missing, SetupState& st);
  bool readHello(tcp::PendingHandshake& p, std::string* why);
  bool acceptPending(int lfd, std::vector<tcp::PendingHandshake>& pending,
                     SetupState& st);
  bool linkHigher(int fd, const std::string& na, const std::string& msg,
                  std::vector<int>& missing, SetupState& st);
  void checkAnswer(int r, SetupState& st);

 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const;
  void abort(const Error& cause);
  bool connected(int peer) const {
    return peer == rank_ || (peer >= 0 && peer < size_ && peers_[peer].linked);
  }

  void setIsolate(bool on) { isolate_ = on; }
  bool isolates() const { return isolate_; }
  bool lost(int peer) const {
    return peer >= 0 && peer < size_ && peers_[peer].lost != nullptr;
  }

  RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes);
  RequestPtr irecv(int src, Tag tag, void* data, size_t bytes);
  bool progress();
  void idle(std::chrono::microseconds max);

 private:
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
  };

  struct SendItem {
    RequestPtr request;  // null for control frames
    Header header;
    const uint8_t* data;
    size_t total;  // header + payload
    size_t done;
  };

  struct Posted {
    RequestPtr request;
    uint8_t* data;
  };

  struct Unexpected {
    int source;
    Tag tag;
    size_t bytes;
    size_t received;
    Buffer buffer;
  };

  struct Peer {
    int rank = -1;
    int fd = -1;
    bool linked = false;      // selected by Options::connect and connected
    bool goodbye = false;     // the peer announced an orderly close
    bool closed = false;      // its socket reached EOF after goodbye
    std::exception_ptr lost;  // why its link failed, once it was dropped
    // Our stream to it stopped in the middle of a frame when the transport
    // broke: nothing more can be framed on it.
    bool midFrame = false;
    bool abortFrame = false;  // the payload being read is an abort notice
    std::vector<uint8_t> abortPayload;
    std::deque<SendItem> sendQueue;
    // Receive side.
    std::unique_ptr<uint8_t[]> staging;
    size_t stagingBegin = 0;
    size_t stagingEnd = 0;
    bool inPayload = false;
    Header header{};
    uint8_t* target = nullptr;  // null: discard the payload
    size_t offset = 0;
    size_t remaining = 0;
    RequestPtr request;  // the receive being filled, if any
    bool toUnexpected = false;
    std::list<Unexpected>::iterator unexpected;
  };

  void checkPeerArgument(int peer, const char* what, bool allowAny) const;
  RequestPtr failedRequest(Request::Kind kind, int peer, Tag tag, size_t bytes);
  void sendToSelf(const RequestPtr& request, const void* data);

  bool moveAll();
  bool flushPeer(Peer& p);
  bool readPeer(Peer& p);
  bool consumeStaging(Peer& p);
  void onHeader(Peer& p);
  void deliver(Peer& p, const uint8_t* src, size_t n);
  void finishPayload(Peer& p);
  void onEof(Peer& p);
  void onAbortNotice(Peer& p);
  void sendHeartbeats();

  [[noreturn]] void peerLost(Peer& p, const std::string& why);
  void breakWith(std::exception_ptr error);
  bool needed(const Peer& p) const;  // a pending request needs p
  void dropPeer(Peer& p, std::exception_ptr error);
  RequestPtr lostRequest(Request::Kind kind, Peer& p, Tag tag, size_t bytes);
  std::exception_ptr firstLoss() const;  // null when no peer was lost
  std::exception_ptr mismatch(int source, Tag tag, size_t sent, size_t expected) const;

  Buffer takeBuffer(size_t bytes);
  void recycle(Buffer&& buffer);
  void rebuildPollSet();
  void shutdown();

  const Options options_;
  const int rank_;
  const int size_;
  std::vector<Peer> peers_;
  std::vector<Peer*> active_;    // linked peers whose sockets are open
  std::vector<pollfd> pollSet_;  // parallel to active_
  std::list<Posted> posted_;
  std::list<Unexpected> unexpected_;
  std::vector<Buffer> pool_;
  size_t poolBytes_ = 0;
  size_t recvsPending_ = 0;  // receives not yet done
  size_t sendsPending_ = 0;  // frames in send queues
  std::exception_ptr error_;
  bool isolate_ = false;  // per-peer failure isolation (transport.h)
  // When heartbeats go out, when each peer was last heard from.
  HeartbeatSchedule heartbeat_{options_.timeout, size_};
};

}  // namespace kolo::transport
