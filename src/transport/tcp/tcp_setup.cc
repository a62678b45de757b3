// TcpTransport's connection setup: listening, connecting, and the steps of
// the authenticated handshake (tcp_handshake.h) that link every pair of
// selected ranks (the order is in tcp_transport.h).
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
#include <fstream>
#include <sstream>
#include <thread>

#include "common/check.h"
#include "common/logging.h"
#include "common/rank_text.h"
#include "common/sha256.h"
#include "rendezvous/store.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_transport_impl.h"

namespace kolo::transport {
namespace tcp {

std::string errnoText(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

namespace {

long readSysctl(const char* path) {
  std::ifstream in(path);
  long v = 0;
  if (in >> v) return v;
  return 0;
}

}  // namespace

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

}  // namespace tcp

using namespace tcp;

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
  acceptHigher(listener.fd, missing, st);
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

// Step 3: accept the higher ranks. Every accepted connection is
// challenged at once and then read without blocking, all of them in one
// poll loop, each with its own deadline (kHandshakeWait): a silent stranger
// costs a rank nothing but a descriptor until its deadline, however many
// there are. At most kMaxPendingHandshakes wait at once; a newer one
// pushes out the oldest (a rank answers within a round trip, so the oldest
// is the likeliest stranger). A connection that proves the secret and is
// a missing higher rank is linked and answered; a stranger is closed and
// logged.
namespace {

// The connections accepted but not yet proven; closes what it still holds.
struct PendingHandshakes {
  std::vector<PendingHandshake> list;
  int refused = 0;
  ~PendingHandshakes() {
    for (auto& p : list) ::close(p.fd);
  }
  void drop(size_t i, int rank, const std::string& why) {
    KOLO_LOG(kWarning) << "tcp transport: rank " << rank
                       << " closed a connection that did not authenticate: " << why;
    ::close(list[i].fd);
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    ++refused;
  }
};

}  // namespace

void TcpTransport::Impl::acceptHigher(int lfd, std::vector<int>& missing,
                                      SetupState& st) {
  PendingHandshakes pending;
  auto pausedUntil = Clock::time_point::min();  // accept failed: out of descriptors
  while (!missing.empty()) {
    const auto now = Clock::now();
    if (now >= st.deadline) {
      KOLO_THROW_PEER(
          ErrorCode::kTimeout, missing.front(),
          "tcp transport: rank "
              << rank_ << " timed out after " << options_.connectTimeout.count() / 1000.0
              << " s waiting for " << rankList(missing) << " to connect (did they start?"
              << (pending.refused > 0
                      ? "; " + std::to_string(pending.refused) +
                            " connections that did not prove the job secret were closed "
                            "meanwhile"
                      : std::string())
              << ")");
    }
    auto wake = st.deadline;
    std::vector<pollfd> fds;
    const bool listening = now >= pausedUntil;
    fds.push_back({lfd, static_cast<short>(listening ? POLLIN : 0), 0});
    if (!listening) wake = std::min(wake, pausedUntil);
    for (auto& p : pending.list) {
      fds.push_back({p.fd, POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    if (::poll(fds.data(), fds.size(), millisLeft(wake)) < 0 && errno != EINTR) {
      KOLO_SYSCHECK(-1, "tcp transport: poll while accepting ranks");
    }
    // Read the pending ones first (fds[1 + i] is pending.list[i]).
    for (size_t i = pending.list.size(); i-- > 0;) {
      if (fds[1 + i].revents == 0) continue;
      PendingHandshake& p = pending.list[i];
      std::string why;
      if (!readHello(p, &why)) {
        pending.drop(i, rank_, why);
      } else if (p.in.size() == tcp::kHelloBytes) {
        const int fd = p.fd;
        const std::string na = p.na, msg = p.in;
        pending.list.erase(pending.list.begin() + static_cast<std::ptrdiff_t>(i));
        if (!linkHigher(fd, na, msg, missing, st)) ++pending.refused;
      }
    }
    for (size_t i = pending.list.size(); i-- > 0;) {
      if (Clock::now() >= pending.list[i].deadline)
        pending.drop(i, rank_,
                     "timed out (no handshake within " +
                         std::to_string(kHandshakeWait.count()) + " s)");
    }
    if (listening && (fds[0].revents & POLLIN)) {
      if (!acceptPending(lfd, pending.list, st)) {
        // Out of descriptors: give up the oldest stranger, or pause.
        if (!pending.list.empty()) {
          pending.drop(0, rank_, "pushed out: this rank is out of file descriptors");
        } else {
          pausedUntil = Clock::now() + std::chrono::milliseconds(50);
        }
      }
    }
  }
}

// Reads what a pending connection sent; false (and *why) when it closed or
// sent more than a Hello before our answer.
bool TcpTransport::Impl::readHello(PendingHandshake& p, std::string* why) {
  char buf[tcp::kHelloBytes];
  for (;;) {
    const size_t room = tcp::kHelloBytes - p.in.size();
    if (room == 0) return true;
    ssize_t n = ::recv(p.fd, buf, room, 0);
    if (n > 0) {
      p.in.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    *why = n == 0 ? "connection closed" : errnoText(errno);
    return false;
  }
}

// Accepts what waits on the listener and challenges each; false when
// accept failed for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM).
bool TcpTransport::Impl::acceptPending(int lfd, std::vector<PendingHandshake>& pending,
                                       SetupState& st) {
  for (;;) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM;
    }
    if (pending.size() >= kMaxPendingHandshakes) {
      KOLO_LOG(kWarning) << "tcp transport: rank " << rank_
                         << " closed a connection that did not authenticate: pushed out "
                            "by newer connections ("
                         << kMaxPendingHandshakes << " waiting)";
      ::close(pending.front().fd);
      pending.erase(pending.begin());
    }
    PendingHandshake p;
    p.fd = fd;
    p.na = randomBytes(tcp::kNonceBytes);
    p.deadline = std::min(st.deadline, Clock::now() + kHandshakeWait);
    const std::string challenge = tcp::encodeChallenge(p.na);
    // 40 bytes into a new socket's empty send buffer: sent at once.
    if (::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(challenge.size())) {
      KOLO_LOG(kWarning) << "tcp transport: rank " << rank_
                         << " closed a connection that did not authenticate: "
                         << errnoText(errno);
      ::close(fd);
      continue;
    }
    pending.push_back(std::move(p));
  }
}

// A complete Hello from a pending connection: a missing higher rank that
// proves the secret is linked and answered (true); a stranger is closed
// and logged (false); a proven rank that disagrees on the layout is an
// error.
bool TcpTransport::Impl::linkHigher(int fd, const std::string& na, const std::string& msg,
                                    std::vector<int>& missing, SetupState& st) {
  std::string why, nc;
  tcp::Hello hello{};
  if (!tcp::decodeHello(msg, na, options_.secret, &hello, &nc, &why)) {
    KOLO_LOG(kWarning) << "tcp transport: rank " << rank_
                       << " closed a connection that did not authenticate: " << why;
    ::close(fd);
    return false;
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
  return true;
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

}  // namespace kolo::transport
