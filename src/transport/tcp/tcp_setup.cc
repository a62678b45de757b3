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

}  // namespace kolo::transport
