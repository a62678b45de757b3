// TcpTransport: tagged messages over one TCP connection per pair of ranks.
//
// Nomenclature
// - frame: a 16-byte Header (tag, byte count) followed by the payload. A
//   count with kControlBit set is a control frame (only kGoodbye today).
// - posted receive: an irecv waiting for its message (posted_, in posting
//   order). unexpected message: one that arrived before its receive was
//   posted (unexpected_, in arrival order), held in a pooled buffer.
// - in-flight: the frame a peer's socket is in the middle of delivering;
//   its payload goes to `target` (the receive's own buffer, an unexpected
//   buffer, or nowhere when discarded after a size mismatch).
//
// Receive path (readPeer): bytes come from the socket into a per-peer
// staging buffer, which lets one recv() pick up many small frames (each
// such read asks for the rest of the current small payload plus
// kLookaheadBytes); headers are parsed from it and matched at once against the
// posted receives (first match wins, so receives from one source with one
// tag complete in order). A payload with at least kDirectReadBytes left is
// read by recv() straight into its target: large messages are never
// copied by us. An irecv that matches an unexpected message still in
// flight takes over: what arrived so far is copied once and the rest lands
// in the caller's buffer.
//
// Send path (flushPeer): each peer has a FIFO of frames; isend writes at
// once when the FIFO is empty (usually completing small sends inside
// isend), and progress() writes queued frames with one sendmsg() of up to
// kMaxIov slices (header and payload of several frames).
//
// progress() makes no system call when nothing is pending. Otherwise it
// writes every peer's queue and reads every peer (directly with recv() for
// up to kDirectPollPeers peers, after a zero-timeout poll() beyond that),
// so both directions advance in one call. idle() blocks in ppoll() on all
// sockets (readable, and writable where sends are queued).
//
// Failure: EOF or a socket error from a peer that did not say goodbye is
// Error(kPeerLost) naming it; the transport breaks: every pending request
// fails with that error, progress() rethrows it, and later isend/irecv
// return requests already failed with it.
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <sstream>
#include <thread>

#include "common/check.h"
#include "common/logging.h"
#include "common/sha256.h"
#include "rendezvous/store.h"
#include "transport/tcp/tcp_handshake.h"

namespace kolo::transport {
namespace {

using Clock = std::chrono::steady_clock;

struct Header {
  uint64_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) == 16);

constexpr uint64_t kControlBit = uint64_t{1} << 63;
constexpr uint64_t kGoodbye = kControlBit | 1;
// A rank that fails tells its peers why (payload: AbortNotice + message,
// its length in the header's tag), so they name the rank really lost.
constexpr uint64_t kAbort = kControlBit | 2;
// Sent while a rank waits, so peers blocked on it know it is alive.
constexpr uint64_t kHeartbeat = kControlBit | 3;
constexpr size_t kMaxAbortBytes = 16 << 10;

struct AbortNotice {
  int32_t code;
  int32_t blamed;  // the rank the failure names, -1 for none
};
constexpr size_t kStagingBytes = 64 << 10;
constexpr size_t kDirectReadBytes = 32 << 10;
constexpr size_t kLookaheadBytes = 4 << 10;
constexpr int kMaxIov = 64;
constexpr size_t kDirectPollPeers = 2;
constexpr size_t kPoolMaxBytes = size_t{128} << 20;  // unexpected-message buffers kept

// How long an accepted connection may take to prove the secret: a rank
// greets at once, a stranger that stalls is dropped after this.
constexpr auto kHandshakeWait = std::chrono::seconds(5);

std::string errnoText(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

long readSysctl(const char* path) {
  std::ifstream in(path);
  long v = 0;
  if (in >> v) return v;
  return 0;
}

// SO_SNDBUF/SO_RCVBUF. Setting them switches off the kernel's buffer
// autotuning, which is worse than a capped value: only set them when the
// kernel allows the full size.
void setBufferSizes(int fd, size_t bytes) {
  static const long rmax = readSysctl("/proc/sys/net/core/rmem_max");
  static const long wmax = readSysctl("/proc/sys/net/core/wmem_max");
  int v = static_cast<int>(std::min<size_t>(bytes, 1 << 30));
  if (bytes > 0 && rmax >= v) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
  if (bytes > 0 && wmax >= v) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int millisLeft(Clock::time_point deadline) {
  auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Reads or writes exactly `n` bytes on a non-blocking socket before
// `deadline`; false on timeout, EOF or error (*why says which).
bool ioExact(int fd, void* buf, size_t n, bool write, Clock::time_point deadline,
             std::string* why) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = write ? ::send(fd, p + done, n - done, MSG_NOSIGNAL)
                      : ::recv(fd, p + done, n - done, 0);
    if (r > 0) {
      done += r;
      continue;
    }
    if (r == 0) {
      *why = "connection closed";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *why = errnoText(errno);
      return false;
    }
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    int left = millisLeft(deadline);
    if (left == 0 || ::poll(&pfd, 1, left) == 0) {
      *why = "timed out";
      return false;
    }
  }
  return true;
}

// "rank 3" or "ranks 1, 3".
std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

}  // namespace

class TcpTransport::Impl {
 public:
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
  void acceptHigher(int lfd, std::vector<int>& missing, SetupState& st);
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
    bool linked = false;   // selected by Options::connect and connected
    bool goodbye = false;  // the peer announced an orderly close
    bool closed = false;   // its socket reached EOF after goodbye
    // Our stream to it stopped in the middle of a frame when the transport
    // broke: nothing more can be framed on it.
    bool midFrame = false;
    Clock::time_point lastHeard = Clock::now();
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

  bool flushPeer(Peer& p);
  bool readPeer(Peer& p);
  void onHeader(Peer& p);
  void deliver(Peer& p, const uint8_t* src, size_t n);
  void finishPayload(Peer& p);
  void onEof(Peer& p);
  void onAbortNotice(Peer& p);
  void sendHeartbeats();

  [[noreturn]] void peerLost(Peer& p, const std::string& why);
  void breakWith(std::exception_ptr error);
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
  Clock::time_point lastHeartbeat_ = Clock::now();
};

// ---------------------------------------------------------------- setup

// Setup, in steps (the header says the order): listen and publish; greet
// every lower rank (read its challenge, send the proven Hello); accept every
// higher rank (challenge it, check its proof, answer with ours); check the
// lower ranks' answers. A connection that does not prove the secret is
// closed, logged once, and does not take a rank's place.
void TcpTransport::Impl::setup(rendezvous::Store& store) {
  SetupState st;
  st.deadline = Clock::now() + options_.connectTimeout;
  st.na.resize(size_);
  st.nc.resize(size_);
  ListenSocket listener = listenAndPublish(store);
  for (int r = 0; r < rank_; ++r) {
    if (wanted(r)) greetLower(r, store, st);
  }
  std::vector<int> missing;
  for (int r = rank_ + 1; r < size_; ++r) {
    if (wanted(r)) missing.push_back(r);
  }
  while (!missing.empty()) acceptHigher(listener.fd, missing, st);
  for (int r = 0; r < rank_; ++r) {
    if (wanted(r)) checkAnswer(r, st);
  }
  for (auto& p : peers_) {
    if (p.fd < 0) continue;
    setNoDelay(p.fd);
    p.linked = true;
    p.staging.reset(new uint8_t[kStagingBytes]);
    active_.push_back(&p);
  }
  rebuildPollSet();
}

bool TcpTransport::Impl::wanted(int r) const {
  return r != rank_ && (options_.connect.empty() || options_.connect[r]);
}

std::string TcpTransport::Impl::addrKey(int r) const {
  return options_.keyPrefix + "/addr/" + std::to_string(r);
}

// Listens on the advertised address (never every interface) at a free port
// and publishes "ip:port".
TcpTransport::Impl::ListenSocket TcpTransport::Impl::listenAndPublish(
    rendezvous::Store& store) {
  const std::string ip =
      options_.advertiseAddress.empty() ? "127.0.0.1" : options_.advertiseAddress;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: advertise address '" << ip << "' is not an IPv4 address");
  }
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  KOLO_SYSCHECK(lfd, "tcp transport: socket");
  ListenSocket listener{lfd};
  setBufferSizes(lfd, options_.socketBufferBytes);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0 ||
      ::listen(lfd, std::max(size_, 128)) < 0) {
    KOLO_THROW(ErrorCode::kIo, "tcp transport: rank " << rank_ << " cannot listen on "
                                                      << ip << ": "
                                                      << detail::errnoString());
  }
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  store.setString(addrKey(rank_), ip + ":" + std::to_string(ntohs(addr.sin_port)));
  return listener;
}

// Connects to `where` ("ip:port", rank r's), retrying until the deadline.
int TcpTransport::Impl::connectTo(int r, const std::string& where,
                                  Clock::time_point deadline) {
  size_t colon = where.rfind(':');
  sockaddr_in to{};
  to.sin_family = AF_INET;
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, where.substr(0, colon).c_str(), &to.sin_addr) != 1) {
    KOLO_THROW(ErrorCode::kIo, "tcp transport: rank " << r << " published a malformed "
                                                      << "address '" << where << "'");
  }
  to.sin_port = htons(static_cast<uint16_t>(std::atoi(where.c_str() + colon + 1)));
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    KOLO_SYSCHECK(fd, "tcp transport: socket");
    setBufferSizes(fd, options_.socketBufferBytes);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      err = ETIMEDOUT;
      if (::poll(&pfd, 1, millisLeft(deadline)) > 0) {
        socklen_t elen = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
      }
    }
    if (err == 0) return fd;
    ::close(fd);
    if (Clock::now() + pause >= deadline) {
      KOLO_THROW_PEER(ErrorCode::kTimeout, r,
                      "tcp transport: rank " << rank_ << " could not connect to rank "
                                             << r << " at " << where << " within "
                                             << options_.connectTimeout.count() / 1000.0
                                             << " s: " << errnoText(err));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

// Step 2: connect to lower rank r, read its challenge, send our proof.
void TcpTransport::Impl::greetLower(int r, rendezvous::Store& store, SetupState& st) {
  std::string where;
  try {
    where = store.getString(
        addrKey(r), std::chrono::milliseconds(std::max(millisLeft(st.deadline), 1)));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    KOLO_THROW_PEER(ErrorCode::kTimeout, r,
                    "tcp transport: rank "
                        << rank_ << " timed out waiting for rank " << r
                        << " to publish its address (did it start?): " << e.what());
  }
  const int fd = connectTo(r, where, st.deadline);
  peers_[r].fd = fd;
  std::string challenge(tcp::kChallengeBytes, '\0');
  std::string why;
  if (!ioExact(fd, challenge.data(), challenge.size(), false, st.deadline, &why) ||
      !tcp::decodeChallenge(challenge, &st.na[r], &why)) {
    KOLO_THROW_PEER(ErrorCode::kPeerLost, r,
                    "tcp transport: rank " << rank_ << " got no handshake from rank " << r
                                           << " at " << where << ": " << why);
  }
  st.nc[r] = randomBytes(tcp::kNonceBytes);
  tcp::Hello hello{tcp::kMagic, tcp::kVersion, rank_, r, size_, 0};
  std::string msg = tcp::encodeHello(hello, st.na[r], st.nc[r], options_.secret);
  if (!ioExact(fd, msg.data(), msg.size(), true, st.deadline, &why)) {
    KOLO_THROW_PEER(ErrorCode::kPeerLost, r,
                    "tcp transport: rank " << rank_ << " could not greet rank " << r
                                           << " at " << where << ": " << why);
  }
}

// Step 3: accept one connection; when it proves the secret and is a
// missing higher rank, link it and answer. A stranger is closed and logged.
void TcpTransport::Impl::acceptHigher(int lfd, std::vector<int>& missing,
                                      SetupState& st) {
  pollfd pfd{lfd, POLLIN, 0};
  int left = millisLeft(st.deadline);
  if (left == 0 || ::poll(&pfd, 1, left) == 0) {
    KOLO_THROW_PEER(ErrorCode::kTimeout, missing.front(),
                    "tcp transport: rank " << rank_ << " timed out after "
                                           << options_.connectTimeout.count() / 1000.0
                                           << " s waiting for " << rankList(missing)
                                           << " to connect (did they start?)");
  }
  int fd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  // A rank greets at once; a stranger may not: wait for it a bounded time.
  const auto wait = std::min(st.deadline, Clock::now() + kHandshakeWait);
  const std::string na = randomBytes(tcp::kNonceBytes);
  const std::string challenge = tcp::encodeChallenge(na);
  std::string msg(tcp::kHelloBytes, '\0');
  std::string why, nc;
  tcp::Hello hello{};
  if (!ioExact(fd, const_cast<char*>(challenge.data()), challenge.size(), true, wait,
               &why) ||
      !ioExact(fd, msg.data(), msg.size(), false, wait, &why) ||
      !tcp::decodeHello(msg, na, options_.secret, &hello, &nc, &why)) {
    KOLO_LOG(kWarning) << "tcp transport: rank " << rank_
                       << " closed a connection that did not authenticate: " << why;
    ::close(fd);
    return;
  }
  if (hello.to != rank_ || hello.size != size_ ||
      std::find(missing.begin(), missing.end(), hello.from) == missing.end()) {
    ::close(fd);
    KOLO_THROW_PEER(ErrorCode::kMismatch, hello.from,
                    "tcp transport: rank " << rank_ << " (of " << size_
                                           << ") got a handshake from rank " << hello.from
                                           << " addressed to rank " << hello.to
                                           << " of a world of " << hello.size
                                           << " (ranks disagree on the layout, or two "
                                              "jobs share a store prefix)");
  }
  peers_[hello.from].fd = fd;
  std::erase(missing, hello.from);
  tcp::Hello reply{tcp::kMagic, tcp::kVersion, rank_, hello.from, size_, 0};
  std::string answer = tcp::encodeAnswer(reply, na, nc, options_.secret);
  if (!ioExact(fd, answer.data(), answer.size(), true, st.deadline, &why)) {
    KOLO_THROW_PEER(ErrorCode::kPeerLost, hello.from,
                    "tcp transport: rank " << rank_ << " could not answer rank "
                                           << hello.from << ": " << why);
  }
}

// Step 4: lower rank r's answer must prove the secret and name us.
void TcpTransport::Impl::checkAnswer(int r, SetupState& st) {
  std::string answer(tcp::kAnswerBytes, '\0');
  std::string why;
  if (!ioExact(peers_[r].fd, answer.data(), answer.size(), false, st.deadline, &why)) {
    KOLO_THROW_PEER(ErrorCode::kPeerLost, r,
                    "tcp transport: rank "
                        << rank_ << " got no handshake answer from rank " << r << ": "
                        << why);
  }
  tcp::Hello reply{};
  if (!tcp::decodeAnswer(answer, st.na[r], st.nc[r], options_.secret, &reply, &why)) {
    KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                    "tcp transport: rank "
                        << rank_ << " connected to the address of rank " << r << " but "
                        << why);
  }
  if (reply.from != r || reply.to != rank_ || reply.size != size_) {
    KOLO_THROW_PEER(ErrorCode::kMismatch, r,
                    "tcp transport: rank "
                        << rank_ << " connected to the address of rank " << r
                        << " but was answered by rank " << reply.from << " of "
                        << reply.size);
  }
}

// --------------------------------------------------------------- posting

void TcpTransport::Impl::checkPeerArgument(int peer, const char* what,
                                           bool allowAny) const {
  if (allowAny && peer == kAnySource) return;
  if (peer < 0 || peer >= size_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: rank " << rank_ << " cannot " << what << " rank " << peer
                                      << " (world size " << size_ << ")");
  }
  if (peer != rank_ && !peers_[peer].linked) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: rank " << rank_ << " cannot " << what << " rank " << peer
                                      << ": no link to it (not selected in "
                                         "Options::connect)");
  }
}

RequestPtr TcpTransport::Impl::failedRequest(Request::Kind kind, int peer, Tag tag,
                                             size_t bytes) {
  auto r = std::make_shared<Request>(kind, peer, tag, bytes);
  r->fail(error_);
  return r;
}

RequestPtr TcpTransport::Impl::isend(int dst, Tag tag, const void* data, size_t bytes) {
  checkPeerArgument(dst, "send to", false);
  if (data == nullptr && bytes > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "tcp transport: rank "
                                                << rank_ << ": send of " << bytes
                                                << " bytes to rank " << dst
                                                << " from a null buffer");
  }
  if (bytes & kControlBit) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: message of " << bytes << " bytes");
  }
  if (error_) return failedRequest(Request::Kind::kSend, dst, tag, bytes);
  auto request = std::make_shared<Request>(Request::Kind::kSend, dst, tag, bytes);
  if (dst == rank_) {
    sendToSelf(request, data);
    return request;
  }
  Peer& p = peers_[dst];
  if (p.goodbye) {
    request->fail(std::make_exception_ptr(
        Error(ErrorCode::kPeerLost,
              "rank " + std::to_string(dst) + " has shut down its transport; rank " +
                  std::to_string(rank_) + " cannot send to it",
              dst)));
    return request;
  }
  p.sendQueue.push_back(SendItem{request, Header{tag, bytes},
                                 static_cast<const uint8_t*>(data),
                                 sizeof(Header) + bytes, 0});
  ++sendsPending_;
  if (p.sendQueue.size() == 1) {
    try {
      flushPeer(p);
    } catch (const Error&) {
      // The transport broke; `request` was failed with the error.
    }
  }
  return request;
}

void TcpTransport::Impl::sendToSelf(const RequestPtr& request, const void* data) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    Request& r = *it->request;
    if (r.tag != request->tag || (r.peer != rank_ && r.peer != kAnySource)) continue;
    if (r.bytes != request->bytes) {
      r.fail(mismatch(rank_, r.tag, request->bytes, r.bytes));
    } else {
      if (r.bytes > 0) std::memcpy(it->data, data, r.bytes);
      r.peer = rank_;
      r.complete();
    }
    --recvsPending_;
    posted_.erase(it);
    request->complete();
    return;
  }
  Buffer buffer = takeBuffer(request->bytes);
  if (request->bytes > 0) std::memcpy(buffer.data.get(), data, request->bytes);
  unexpected_.push_back(
      Unexpected{rank_, request->tag, request->bytes, request->bytes, std::move(buffer)});
  request->complete();
}

RequestPtr TcpTransport::Impl::irecv(int src, Tag tag, void* data, size_t bytes) {
  checkPeerArgument(src, "receive from", true);
  if (data == nullptr && bytes > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "tcp transport: rank "
                                                << rank_ << ": receive of " << bytes
                                                << " bytes from rank " << src
                                                << " into a null buffer");
  }
  if (error_) return failedRequest(Request::Kind::kRecv, src, tag, bytes);
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, bytes);
  auto* out = static_cast<uint8_t*>(data);

  // An unexpected message that arrived (or is arriving) first?
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->tag != tag || (src != kAnySource && it->source != src)) continue;
    const bool whole = it->received == it->bytes;
    Peer* p = it->source == rank_ ? nullptr : &peers_[it->source];
    request->peer = it->source;
    if (it->bytes != bytes) {
      request->fail(mismatch(it->source, tag, it->bytes, bytes));
      if (!whole) {  // the rest of its payload is discarded as it comes
        p->toUnexpected = false;
        p->target = nullptr;
      }
    } else if (whole) {
      if (bytes > 0) std::memcpy(out, it->buffer.data.get(), bytes);
      request->complete();
    } else {
      // Still arriving: take over, the rest goes straight to `out`.
      if (it->received > 0) std::memcpy(out, it->buffer.data.get(), it->received);
      p->toUnexpected = false;
      p->target = out;
      p->request = request;
      ++recvsPending_;
    }
    recycle(std::move(it->buffer));
    unexpected_.erase(it);
    return request;
  }

  if (src != kAnySource && src != rank_ && peers_[src].closed) {
    request->fail(std::make_exception_ptr(
        Error(ErrorCode::kPeerLost,
              "rank " + std::to_string(src) + " has shut down its transport; rank " +
                  std::to_string(rank_) + " cannot receive from it",
              src)));
    return request;
  }
  posted_.push_back(Posted{request, out});
  ++recvsPending_;
  return request;
}

// -------------------------------------------------------------- progress

bool TcpTransport::Impl::progress() {
  if (error_) std::rethrow_exception(error_);
  if (recvsPending_ == 0 && sendsPending_ == 0) return false;
  bool moved = false;
  if (sendsPending_ > 0) {
    for (Peer* p : active_) {
      if (!p->sendQueue.empty()) moved |= flushPeer(*p);
    }
  }
  if (active_.size() <= kDirectPollPeers) {
    for (size_t i = 0; i < active_.size(); ++i) moved |= readPeer(*active_[i]);
  } else {
    for (auto& pfd : pollSet_) pfd.events = POLLIN;
    int n = ::poll(pollSet_.data(), pollSet_.size(), 0);
    if (n > 0) {
      // readPeer may close a peer (orderly EOF) and rebuild the set: walk a
      // copy of the ready list.
      std::vector<Peer*> ready;
      for (size_t i = 0; i < pollSet_.size(); ++i) {
        if (pollSet_[i].revents != 0) ready.push_back(active_[i]);
      }
      for (Peer* p : ready) moved |= readPeer(*p);
    }
  }
  if (moved) {
    // A receive may have freed room on the other side; resume writing.
    for (Peer* p : active_) {
      if (!p->sendQueue.empty()) flushPeer(*p);
    }
  }
  return moved;
}

void TcpTransport::Impl::idle(std::chrono::microseconds max) {
  if (error_ || pollSet_.empty()) {
    std::this_thread::sleep_for(max);
    return;
  }
  sendHeartbeats();
  for (size_t i = 0; i < active_.size(); ++i) {
    pollSet_[i].events =
        static_cast<short>(POLLIN | (active_[i]->sendQueue.empty() ? 0 : POLLOUT));
  }
  timespec ts{static_cast<time_t>(max.count() / 1000000),
              static_cast<long>((max.count() % 1000000) * 1000)};
  ::ppoll(pollSet_.data(), pollSet_.size(), &ts, nullptr);
}

bool TcpTransport::Impl::flushPeer(Peer& p) {
  bool moved = false;
  iovec iov[kMaxIov];
  while (!p.sendQueue.empty()) {
    int n = 0;
    size_t attempted = 0;
    for (auto it = p.sendQueue.begin(); it != p.sendQueue.end() && n + 2 <= kMaxIov;
         ++it) {
      size_t done = it->done;
      if (done < sizeof(Header)) {
        iov[n++] = {reinterpret_cast<uint8_t*>(&it->header) + done,
                    sizeof(Header) - done};
        attempted += sizeof(Header) - done;
        done = sizeof(Header);
      }
      size_t payloadDone = done - sizeof(Header);
      size_t payloadLeft = it->total - done;
      if (payloadLeft > 0) {
        iov[n++] = {const_cast<uint8_t*>(it->data) + payloadDone, payloadLeft};
        attempted += payloadLeft;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = ::sendmsg(p.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      int e = errno;
      if (e == EPIPE || e == ECONNRESET) {
        // It may have said why before it went (an abort notice naming the
        // rank really lost, which arrived before its close): read what it
        // sent first, so that this rank reports what the others report.
        readPeer(p);
        peerLost(p, "rank " + std::to_string(p.rank) + " closed its connection to rank " +
                        std::to_string(rank_) + " (process exited?)");
      }
      peerLost(p, "rank " + std::to_string(p.rank) +
                      " is unreachable: send to it from "
                      "rank " +
                      std::to_string(rank_) + " failed with " + errnoText(e));
    }
    moved = true;
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      SendItem& item = p.sendQueue.front();
      size_t take = std::min(left, item.total - item.done);
      item.done += take;
      left -= take;
      if (item.done == item.total) {
        if (item.request) item.request->complete();
        p.sendQueue.pop_front();
        --sendsPending_;
      }
    }
    if (static_cast<size_t>(sent) < attempted) break;  // the socket is full
  }
  return moved;
}

bool TcpTransport::Impl::readPeer(Peer& p) {
  if (p.closed) return false;
  bool moved = false;
  bool drained = false;
  for (;;) {
    // Consume what the staging buffer holds.
    while (p.stagingBegin < p.stagingEnd) {
      size_t avail = p.stagingEnd - p.stagingBegin;
      const uint8_t* at = p.staging.get() + p.stagingBegin;
      if (!p.inPayload) {
        if (avail < sizeof(Header)) break;
        std::memcpy(&p.header, at, sizeof(Header));
        p.stagingBegin += sizeof(Header);
        onHeader(p);
      } else {
        size_t n = std::min(avail, p.remaining);
        deliver(p, at, n);
        p.stagingBegin += n;
      }
      moved = true;
    }
    if (p.stagingBegin == p.stagingEnd) {
      p.stagingBegin = p.stagingEnd = 0;
    } else if (p.stagingBegin > 0) {  // a partial header: move it to the front
      size_t avail = p.stagingEnd - p.stagingBegin;
      std::memmove(p.staging.get(), p.staging.get() + p.stagingBegin, avail);
      p.stagingBegin = 0;
      p.stagingEnd = avail;
    }
    if (drained) break;

    // Read more: straight into the target for a large payload, else into
    // the staging buffer.
    uint8_t* into;
    size_t want;
    const bool direct =
        p.inPayload && p.target != nullptr && p.remaining >= kDirectReadBytes;
    if (direct) {
      into = p.target + p.offset;
      want = p.remaining;
    } else {
      // The rest of a small payload plus a look-ahead for the next frames;
      // no more, or the start of a large payload would be copied twice.
      into = p.staging.get() + p.stagingEnd;
      want = std::min(kStagingBytes - p.stagingEnd,
                      (p.inPayload ? p.remaining : 0) + kLookaheadBytes);
    }
    ssize_t n = ::recv(p.fd, into, want, MSG_DONTWAIT);
    if (n > 0) {
      moved = true;
      p.lastHeard = Clock::now();
      if (direct) {
        deliver(p, nullptr, static_cast<size_t>(n));
      } else {
        p.stagingEnd += n;
      }
      // A short read means the socket is (probably) drained: consume what
      // came and stop without another recv() that would only say EAGAIN.
      drained = static_cast<size_t>(n) < want;
      continue;
    }
    if (n == 0) {
      onEof(p);
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    int e = errno;
    if (e == ECONNRESET && p.goodbye) {
      // It said goodbye and closed with our data unread: orderly too.
      onEof(p);
      return true;
    }
    if (e == ECONNRESET) {
      peerLost(p, "rank " + std::to_string(p.rank) + " closed its connection to rank " +
                      std::to_string(rank_) + " (process exited?)");
    }
    peerLost(p, "rank " + std::to_string(p.rank) +
                    " is unreachable: receive from it on "
                    "rank " +
                    std::to_string(rank_) + " failed with " + errnoText(e));
  }
  return moved;
}

void TcpTransport::Impl::onHeader(Peer& p) {
  const Header& h = p.header;
  if (h.bytes & kControlBit) {
    if (h.bytes == kGoodbye) {
      p.goodbye = true;
      return;
    }
    if (h.bytes == kHeartbeat) return;
    if (h.bytes == kAbort && h.tag >= sizeof(AbortNotice) && h.tag <= kMaxAbortBytes) {
      p.inPayload = true;
      p.offset = 0;
      p.remaining = h.tag;
      p.request.reset();
      p.toUnexpected = false;
      p.abortFrame = true;
      p.abortPayload.assign(h.tag, 0);
      p.target = p.abortPayload.data();
      return;
    }
    peerLost(p, "rank " + std::to_string(p.rank) + " sent a malformed frame to rank " +
                    std::to_string(rank_) + " (corrupt stream)");
  }
  p.inPayload = true;
  p.offset = 0;
  p.remaining = h.bytes;
  p.request.reset();
  p.toUnexpected = false;
  p.target = nullptr;
  auto it = std::find_if(posted_.begin(), posted_.end(), [&](const Posted& x) {
    return x.request->tag == h.tag &&
           (x.request->peer == p.rank || x.request->peer == kAnySource);
  });
  if (it != posted_.end()) {
    RequestPtr r = std::move(it->request);
    uint8_t* data = it->data;
    posted_.erase(it);
    r->peer = p.rank;
    if (r->bytes != h.bytes) {
      r->fail(mismatch(p.rank, h.tag, h.bytes, r->bytes));
      --recvsPending_;
    } else {
      p.request = std::move(r);
      p.target = data;
    }
  } else {
    Buffer buffer = takeBuffer(h.bytes);
    p.target = buffer.data.get();
    unexpected_.push_back(Unexpected{p.rank, h.tag, h.bytes, 0, std::move(buffer)});
    p.unexpected = std::prev(unexpected_.end());
    p.toUnexpected = true;
  }
  if (p.remaining == 0) finishPayload(p);
}

// Accounts n payload bytes; copies them from `src` unless they were read
// in place (src == nullptr).
void TcpTransport::Impl::deliver(Peer& p, const uint8_t* src, size_t n) {
  if (src != nullptr && p.target != nullptr) std::memcpy(p.target + p.offset, src, n);
  p.offset += n;
  p.remaining -= n;
  if (p.toUnexpected) p.unexpected->received = p.offset;
  if (p.remaining == 0) finishPayload(p);
}

void TcpTransport::Impl::finishPayload(Peer& p) {
  if (p.abortFrame) {
    onAbortNotice(p);
    return;
  }
  if (p.request) {
    p.request->complete();
    p.request.reset();
    --recvsPending_;
  }
  p.toUnexpected = false;
  p.target = nullptr;
  p.inPayload = false;
}

void TcpTransport::Impl::onEof(Peer& p) {
  if (!p.goodbye) {
    peerLost(p, "rank " + std::to_string(p.rank) + " closed its connection to rank " +
                    std::to_string(rank_) + " (process exited?)");
  }
  // An orderly close. Requests that still need this peer cannot finish.
  bool needed = p.inPayload || !p.sendQueue.empty() ||
                std::any_of(posted_.begin(), posted_.end(),
                            [&](const Posted& x) { return x.request->peer == p.rank; });
  if (needed) {
    peerLost(p, "rank " + std::to_string(p.rank) +
                    " shut down its transport while rank " + std::to_string(rank_) +
                    " still exchanged messages with it");
  }
  p.closed = true;
  ::close(p.fd);
  p.fd = -1;
  std::erase(active_, &p);
  rebuildPollSet();
}

void TcpTransport::Impl::onAbortNotice(Peer& p) {
  p.abortFrame = false;
  p.inPayload = false;
  p.target = nullptr;
  AbortNotice notice;
  std::memcpy(&notice, p.abortPayload.data(), sizeof(notice));
  std::string message(p.abortPayload.begin() + sizeof(notice), p.abortPayload.end());
  auto code = static_cast<ErrorCode>(notice.code);
  if (code != ErrorCode::kTimeout && code != ErrorCode::kPeerLost)
    code = ErrorCode::kPeerLost;
  breakWith(std::make_exception_ptr(
      Error(code, message + " (reported by rank " + std::to_string(p.rank) + ")",
            notice.blamed >= 0 ? notice.blamed : p.rank)));
  std::rethrow_exception(error_);
}

// Heartbeats go out only while this rank waits (idle), which is exactly
// when a peer may be blocked on it.
void TcpTransport::Impl::sendHeartbeats() {
  const auto now = Clock::now();
  const auto interval =
      std::clamp<Clock::duration>(options_.timeout / 4, std::chrono::milliseconds(50),
                                  std::chrono::milliseconds(1000));
  if (now - lastHeartbeat_ < interval) return;
  lastHeartbeat_ = now;
  for (Peer* p : active_) {
    // A peer we are still streaming to hears from us anyway.
    if (!p->sendQueue.empty() || p->goodbye) continue;
    Header h{0, kHeartbeat};
    // With an empty queue the stream is at a frame boundary; a partial write
    // is finished through the queue like any frame.
    ssize_t n = ::send(p->fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0 && static_cast<size_t>(n) < sizeof(h)) {
      p->sendQueue.push_back(
          SendItem{nullptr, h, nullptr, sizeof(Header), static_cast<size_t>(n)});
      ++sendsPending_;
    }
  }
}

std::optional<bool> TcpTransport::Impl::silentFor(int peer,
                                                  std::chrono::milliseconds d) const {
  if (peer < 0 || peer >= size_ || peer == rank_ || !peers_[peer].linked) {
    return std::nullopt;
  }
  return Clock::now() - peers_[peer].lastHeard >= d;
}

void TcpTransport::Impl::abort(const Error& cause) {
  if (!error_) breakWith(std::make_exception_ptr(cause));
  std::string message = cause.what();
  if (message.size() > kMaxAbortBytes - sizeof(AbortNotice)) {
    message.resize(kMaxAbortBytes - sizeof(AbortNotice));
  }
  std::vector<uint8_t> frame(sizeof(Header) + sizeof(AbortNotice) + message.size());
  Header h{sizeof(AbortNotice) + message.size(), kAbort};
  AbortNotice notice{static_cast<int32_t>(cause.code()), cause.peer()};
  std::memcpy(frame.data(), &h, sizeof(h));
  std::memcpy(frame.data() + sizeof(h), &notice, sizeof(notice));
  std::memcpy(frame.data() + sizeof(h) + sizeof(notice), message.data(), message.size());
  // Bounded: a peer that does not drain its socket is not waited for.
  const auto deadline = Clock::now() + std::chrono::milliseconds(200);
  for (Peer* p : active_) {
    if (p->midFrame || p->goodbye || p->fd < 0) continue;
    size_t done = 0;
    while (done < frame.size() && Clock::now() < deadline) {
      ssize_t n = ::send(p->fd, frame.data() + done, frame.size() - done,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        pollfd pfd{p->fd, POLLOUT, 0};
        ::poll(&pfd, 1, 10);
        continue;
      }
      break;  // the peer is gone: nothing to tell it
    }
    if (done > 0 && done < frame.size()) p->midFrame = true;
  }
}

void TcpTransport::Impl::peerLost(Peer& p, const std::string& why) {
  breakWith(std::make_exception_ptr(Error(ErrorCode::kPeerLost, why, p.rank)));
  std::rethrow_exception(error_);
}

void TcpTransport::Impl::breakWith(std::exception_ptr error) {
  if (error_) return;
  error_ = error;
  for (auto& x : posted_) x.request->fail(error_);
  posted_.clear();
  for (Peer& p : peers_) {
    p.midFrame = !p.sendQueue.empty() && p.sendQueue.front().done > 0;
    for (auto& item : p.sendQueue) {
      if (item.request) item.request->fail(error_);
    }
    p.sendQueue.clear();
    if (p.request) p.request->fail(error_);
    p.request.reset();
  }
  recvsPending_ = 0;
  sendsPending_ = 0;
}

std::exception_ptr TcpTransport::Impl::mismatch(int source, Tag tag, size_t sent,
                                                size_t expected) const {
  std::ostringstream os;
  os << "size mismatch: rank " << source << " sent " << sent << " bytes with tag " << tag
     << " but rank " << rank_ << " posted a receive of " << expected << " bytes";
  return std::make_exception_ptr(Error(ErrorCode::kMismatch, os.str(), source));
}

// ------------------------------------------------------------ utilities

TcpTransport::Impl::Buffer TcpTransport::Impl::takeBuffer(size_t bytes) {
  if (bytes == 0) return Buffer{};
  auto best = pool_.end();
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->capacity >= bytes && (best == pool_.end() || it->capacity < best->capacity)) {
      best = it;
    }
  }
  if (best != pool_.end()) {
    Buffer b = std::move(*best);
    pool_.erase(best);
    poolBytes_ -= b.capacity;
    return b;
  }
  return Buffer{std::unique_ptr<uint8_t[]>(new uint8_t[bytes]), bytes};
}

void TcpTransport::Impl::recycle(Buffer&& buffer) {
  if (buffer.capacity == 0 || buffer.capacity > kPoolMaxBytes) return;
  while (!pool_.empty() && poolBytes_ + buffer.capacity > kPoolMaxBytes) {
    poolBytes_ -= pool_.front().capacity;
    pool_.erase(pool_.begin());
  }
  poolBytes_ += buffer.capacity;
  pool_.push_back(std::move(buffer));
}

void TcpTransport::Impl::rebuildPollSet() {
  pollSet_.clear();
  for (Peer* p : active_) pollSet_.push_back({p->fd, POLLIN, 0});
}

// Orderly close: flush what is queued plus a goodbye frame to each peer,
// bounded in time, reading meanwhile so that peers flushing to us advance.
void TcpTransport::Impl::shutdown() {
  if (error_) return;
  for (Peer* p : active_) {
    if (p->goodbye) continue;  // it is closing: nothing more to tell it
    p->sendQueue.push_back(
        SendItem{nullptr, Header{0, kGoodbye}, nullptr, sizeof(Header), 0});
    ++sendsPending_;
  }
  const auto deadline =
      Clock::now() + std::min<Clock::duration>(options_.timeout, std::chrono::seconds(2));
  try {
    while (sendsPending_ > 0 && Clock::now() < deadline) {
      if (!progress()) idle(std::chrono::microseconds(1000));
    }
  } catch (const Error&) {
    // A peer died meanwhile: nothing more to deliver.
  }
}

// ---------------------------------------------------------------- facade

std::optional<bool> TcpTransport::silentFor(int peer, std::chrono::milliseconds d) const {
  return impl_->silentFor(peer, d);
}

void TcpTransport::abort(const Error& cause) {
  impl_->abort(cause);
}

std::unique_ptr<TcpTransport> TcpTransport::create(const Options& options,
                                                   rendezvous::Store& store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: rank " << options.rank << " of size " << options.size);
  }
  if (!options.connect.empty() &&
      options.connect.size() != static_cast<size_t>(options.size)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "tcp transport: Options::connect has "
                                                << options.connect.size()
                                                << " entries for " << options.size
                                                << " ranks");
  }
  auto impl = std::make_unique<Impl>(options);
  impl->setup(store);
  std::unique_ptr<TcpTransport> transport(new TcpTransport(std::move(impl)));
  transport->spin_ = options.spin;
  return transport;
}

TcpTransport::TcpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpTransport::~TcpTransport() = default;

int TcpTransport::rank() const {
  return impl_->rank();
}
int TcpTransport::size() const {
  return impl_->size();
}
RequestPtr TcpTransport::isend(int dst, Tag tag, const void* data, size_t bytes) {
  return impl_->isend(dst, tag, data, bytes);
}
RequestPtr TcpTransport::irecv(int src, Tag tag, void* data, size_t bytes) {
  return impl_->irecv(src, tag, data, bytes);
}
bool TcpTransport::progress() {
  return impl_->progress();
}
void TcpTransport::idle(std::chrono::microseconds max) {
  impl_->idle(max);
}
std::chrono::milliseconds TcpTransport::timeout() const {
  return impl_->timeout();
}
bool TcpTransport::connected(int peer) const {
  return impl_->connected(peer);
}

}  // namespace kolo::transport
