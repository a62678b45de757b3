// TcpStoreServer (its client is in tcp_store_client.cc). The wire format is
// in store_protocol.h.
//
// The server is one thread running a poll() loop over the listening socket,
// an eventfd (shutdown) and the clients. Each client first answers the
// server's challenge (store_protocol.h); until it has, nothing it sends is
// read as a request. A GET on a missing key parks the client with a
// deadline; a SET or ADD of that key answers every parked client; the poll
// timeout is the nearest deadline (a parked GET's, or a stalled
// connection's idle limit). While a client is parked its later requests
// wait in its input buffer, which is bounded: a client over a limit gets a
// kBad reply naming it, one log line, and is closed once the reply is out.
//
// Descriptors (docs/security.md). Connections that have not proven the
// secret (and refused ones still draining) are capped at
// Limits::maxUnauthenticated: one more makes the server close the oldest
// of them, so strangers can never hold every descriptor the ranks need.
// When accept() still fails for want of descriptors, the server first
// closes such a connection and accepts again; with none to close it spends
// a reserve descriptor (/dev/null, opened at start) to accept the waiting
// connection and answer it "KOLOBUSY" with the cause, so the listening
// socket is never left ready and unserved (which made poll() return at
// once: a spin). Any other accept failure pauses accepting for 100 ms.
#include "rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/check.h"
#include "common/logging.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/store_wire.h"

namespace kolo::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using namespace protocol;
using namespace wire;

constexpr int kMaxLoggedRefusals = 10;  // then one "and more" line
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// Out of descriptors, an unproven connection is closed for a newer one only
// once it had this long to prove the secret (a rank needs a round trip), so
// that ranks arriving together do not push each other out.
constexpr auto kShedAge = std::chrono::milliseconds(250);

// The process's descriptor limit (RLIMIT_NOFILE's soft value).
size_t descriptorLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return 1 << 20;
  return static_cast<size_t>(rl.rlim_cur);
}

// Why accept() failed with `err`, for the log and for the client told busy.
std::string acceptFailure(int err, size_t open) {
  std::string why;
  if (err == EMFILE) {
    why = "out of file descriptors (limit " + std::to_string(descriptorLimit()) +
          ", RLIMIT_NOFILE; raise it with ulimit -n)";
  } else if (err == ENFILE) {
    why = "the system is out of file descriptors (fs.file-max)";
  } else {
    why = "cannot accept connections: " + std::string(std::strerror(err));
  }
  return why + " with " + std::to_string(open) + " connections open";
}

// "ip:port" of a connected socket's peer, for log lines.
std::string peerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  }
  return endpoint(host, port);
}

// Parses decimal counter text; false when it is not a number.
bool parseCounter(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

class Server : public TcpStoreServer {
 public:
  Server(int listenFd, int wakeFd, std::string secret, Limits limits)
      : listenFd_(listenFd),
        wakeFd_(wakeFd),
        secret_(std::move(secret)),
        limits_(limits),
        maxUnauthenticated_(limits.maxUnauthenticated > 0
                                ? limits.maxUnauthenticated
                                : std::max<size_t>(16, descriptorLimit() / 4)),
        reserveFd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    ::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = addr.ss_family == AF_INET6
                ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    thread_ = std::thread([this] { run(); });
  }

  ~Server() override {
    uint64_t one = 1;
    ssize_t n = ::write(wakeFd_, &one, sizeof(one));
    (void)n;
    thread_.join();
    for (auto& c : clients_)
      if (c.fd >= 0) ::close(c.fd);
    if (reserveFd_ >= 0) ::close(reserveFd_);
    ::close(listenFd_);
    ::close(wakeFd_);
  }

  int port() const override { return port_; }
  Usage usage() const override {
    std::lock_guard<std::mutex> lock(usageMutex_);
    return usage_;
  }

 private:
  struct Client {
    int fd;
    std::string peer;   // "ip:port", for log lines
    std::string nonce;  // Ns, the challenge sent at accept
    bool authed = false;
    std::string in;
    std::string out;
    bool parked = false;
    std::string parkedKey;
    Clock::time_point deadline;
    Clock::time_point lastInput;  // for the idle limit
    Clock::time_point accepted;
    bool closing = false;       // refused: see refuse()
    bool shutWr = false;        // closing and the refusal is out
    Clock::time_point closeBy;  // closing: the drain ends here at the latest
    bool dead = false;
  };

  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      KOLO_LOG(kError) << "rendezvous store server on port " << port_
                       << " stopped: " << e.what();
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      int timeoutMs = buildPollSet(fds);
      int n = ::poll(fds.data(), fds.size(), timeoutMs);
      if (n < 0) {
        if (errno == EINTR) continue;
        KOLO_SYSCHECK(n, "poll in the rendezvous store server");
      }
      if (fds[0].revents != 0) return;  // shutdown
      if (fds[1].revents & POLLIN) acceptClients();
      // fds[2 + i] is clients_[i] for the clients present before accept.
      for (size_t i = 2; i < fds.size(); ++i) {
        Client& c = clients_[i - 2];
        if (c.dead) continue;  // shed by acceptClients: its fd is closed
        const bool reading = (fds[i].events & POLLIN) != 0;
        if (!reading && (fds[i].revents & (POLLHUP | POLLERR))) c.dead = true;
        if (reading && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) readFrom(c);
        if (!c.dead && (fds[i].revents & POLLOUT)) flush(c);
      }
      expireParked();
      dropIdle();
      removeDead();
    }
  }

  // Fills `fds` (wake, listener, then one per client) and returns the poll
  // timeout: the nearest parked GET's deadline or stalled client's limit.
  int buildPollSet(std::vector<pollfd>& fds) {
    fds.clear();
    fds.push_back({wakeFd_, POLLIN, 0});
    int64_t timeoutMs = -1;
    auto now = Clock::now();
    auto consider = [&](Clock::time_point when) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
      ms = std::max<int64_t>(ms, 0);
      if (timeoutMs < 0 || ms < timeoutMs) timeoutMs = ms;
    };
    const bool accepting = now >= acceptPausedUntil_;
    fds.push_back({listenFd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    if (!accepting) consider(acceptPausedUntil_);
    for (auto& c : clients_) {
      short events = 0;
      if (c.closing ||
          (c.in.size() < inputLimit(c) && c.out.size() <= limits_.maxFrameBytes)) {
        events |= POLLIN;
      }
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      if (c.parked) consider(c.deadline);
      if (c.closing) consider(c.closeBy);
      if (stalled(c))
        consider(c.lastInput + std::chrono::milliseconds(limits_.idleMillis));
    }
    return static_cast<int>(std::min<int64_t>(timeoutMs, 1 << 30));
  }

  // A client the idle limit applies to: one that owes the server bytes.
  static bool stalled(const Client& c) {
    return !c.dead && !c.closing && (!c.authed || (!c.in.empty() && !c.parked));
  }

  // Accepts every waiting connection (see the file comment for what
  // happens when descriptors run out).
  void acceptClients() {
    if (reserveFd_ < 0) reserveFd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (;;) {
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        addClient(fd);
        if (unauthenticated() > maxUnauthenticated_) {
          shedOldest(Clock::duration::zero(),
                     "more than " + std::to_string(maxUnauthenticated_) +
                         " connections have not proven the job secret");
        }
        continue;
      }
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EINTR || err == ECONNABORTED) continue;
      const std::string why = acceptFailure(err, clients_.size());
      if (!loggedExhaustion_) {
        loggedExhaustion_ = true;
        KOLO_LOG(kWarning) << "rendezvous store on port " << port_ << ": " << why
                           << "; closing the oldest connections that have not proven "
                              "the job secret, and telling new ones when none is left "
                              "(not logged again)";
      }
      const bool outOfDescriptors =
          err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
      if (outOfDescriptors && !connectionWaiting()) return;
      if (outOfDescriptors && shedOldest(kShedAge, why)) continue;
      if (outOfDescriptors && refuseWithReserve(why)) continue;
      acceptPausedUntil_ = Clock::now() + kAcceptPause;
      return;
    }
  }

  void addClient(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Client c;
    c.fd = fd;
    c.peer = peerName(fd);
    c.nonce = randomBytes(kNonceBytes);
    c.lastInput = c.accepted = Clock::now();
    c.out.append(kMagic);
    c.out.append(c.nonce);
    clients_.push_back(std::move(c));
    flush(clients_.back());
  }

  // Connections that hold a descriptor without being a proven rank.
  size_t unauthenticated() const {
    return std::count_if(clients_.begin(), clients_.end(), [](const Client& c) {
      return !c.dead && (!c.authed || c.closing);
    });
  }

  // Closes the oldest refused (draining) connection, else the oldest that
  // has not proven the secret and was accepted at least minAge ago, at
  // once; false when there is none. Its Client stays (dead, fd -1) until
  // removeDead, so that indices into the poll set stay valid.
  bool shedOldest(Clock::duration minAge, const std::string& why) {
    const auto acceptedBy = Clock::now() - minAge;
    for (bool draining : {true, false}) {
      for (auto& c : clients_) {
        if (c.dead || (draining ? !c.closing : c.authed || c.accepted > acceptedBy))
          continue;
        if (!loggedShedding_) {
          loggedShedding_ = true;
          KOLO_LOG(kWarning) << "rendezvous store on port " << port_ << ": " << why
                             << ": closed the oldest such connection (from " << c.peer
                             << "); further ones are not logged";
        }
        ::close(c.fd);
        c.fd = -1;
        c.dead = true;
        std::lock_guard<std::mutex> lock(usageMutex_);
        ++usage_.shed;
        return true;
      }
    }
    return false;
  }

  // Whether a connection waits to be accepted (accept() fails for want of
  // a descriptor whether or not one does).
  bool connectionWaiting() const {
    pollfd p{listenFd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
  }

  // Out of descriptors with no stranger to close: spends the reserve
  // descriptor to accept the waiting connection and tell it why it is not
  // served. False when there is no reserve or nothing was waiting.
  bool refuseWithReserve(const std::string& why) {
    if (reserveFd_ < 0) return false;
    ::close(reserveFd_);
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      const std::string text =
          ("the rendezvous store is " + why).substr(0, kMaxBusyBytes);
      std::string busy(kBusyMagic);
      appendU32(busy, static_cast<uint32_t>(text.size()));
      busy.append(text);
      ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
      (void)n;  // best effort: the client retries either way
      ::close(fd);
      std::lock_guard<std::mutex> lock(usageMutex_);
      ++usage_.shed;
    }
    reserveFd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
  }

  // The most bytes a client may have buffered: a whole frame before it is
  // handled, or the proof before authentication.
  size_t inputLimit(const Client& c) const {
    return c.authed ? 4 + limits_.maxFrameBytes : kProofBytes;
  }

  void readFrom(Client& c) {
    if (c.closing) return drain(c);
    char buf[65536];
    while (!c.dead && !c.closing) {
      size_t room = inputLimit(c) - std::min(c.in.size(), inputLimit(c));
      if (room == 0) break;  // handleInput decides what the full buffer is
      ssize_t n = ::recv(c.fd, buf, std::min(room, sizeof(buf)), 0);
      if (n > 0) {
        c.in.append(buf, n);
        c.lastInput = Clock::now();
        if (c.authed && c.in.size() >= 4 &&
            readU32(c.in.data()) > limits_.maxFrameBytes) {
          break;  // refused below, before more of it is read
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c.dead = true;  // EOF or error: the client left
      return;
    }
    handleInput(c);
  }

  // Reads and discards what a refused client still sends, so that closing
  // does not reset the connection before it has read the refusal.
  void drain(Client& c) {
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;  // EOF: the client has read the refusal and left
      return;
    }
  }

  // Checks the client's proof of the secret and answers with the server's.
  void authenticate(Client& c) {
    const std::string nc = c.in.substr(0, kNonceBytes);
    const Digest expected = clientProof(secret_, c.nonce, nc);
    if (!constantTimeEqual(expected.data(), c.in.data() + kNonceBytes, expected.size())) {
      refuse(c,
             "the client did not prove the job secret (KOLO_JOB_SECRET differs, or "
             "it is not a rank of this job)");
      return;
    }
    c.in.erase(0, kProofBytes);
    c.authed = true;
    const Digest mine = serverProof(secret_, c.nonce, nc);
    reply(c, kOk, std::string(reinterpret_cast<const char*>(mine.data()), mine.size()));
  }

  // Answers the complete requests in c.in, stopping at a parked GET.
  void handleInput(Client& c) {
    if (!c.authed && !c.dead && !c.closing && c.in.size() >= kProofBytes) authenticate(c);
    while (c.authed && !c.parked && !c.dead && !c.closing && c.in.size() >= 4) {
      uint32_t len = 0;
      std::string why;
      if (!decodeFrameLength(c.in, 5, limits_.maxFrameBytes, &len, &why)) {
        refuse(c, why);
        return;
      }
      if (c.in.size() < 4 + len) return;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + len);
      handleRequest(c, body);
    }
  }

  void handleRequest(Client& c, const std::string& body) {
    Request r;
    std::string why;
    if (!decodeRequest(body, &r, &why)) {
      refuse(c, "malformed request: " + why);
      return;
    }
    const std::string key(r.key);
    switch (r.op) {
      case kSet: return handleSet(c, key, std::string(r.arg));
      case kGet: return handleGet(c, key, r.number);
      case kAdd: return handleAdd(c, key, r.number);
    }
  }

  // Stores key=value when the total stays within the limit.
  bool store(Client& c, const std::string& key, std::string value) {
    auto it = data_.find(key);
    const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
    const size_t total = storedBytes_ - old + key.size() + value.size();
    if (total > limits_.maxStoreBytes) {
      reply(c, kBad,
            "the store is full: setting key '" + key.substr(0, 200) + "' (" +
                std::to_string(value.size()) + " bytes) would hold " +
                std::to_string(total) + " bytes, over its limit of " +
                std::to_string(limits_.maxStoreBytes));
      KOLO_LOG(kWarning) << "rendezvous store: refused a SET of " << value.size()
                         << " bytes from " << c.peer << ": store full (" << storedBytes_
                         << " of " << limits_.maxStoreBytes << " bytes)";
      return false;
    }
    data_[key] = std::move(value);
    storedBytes_ = total;
    std::lock_guard<std::mutex> lock(usageMutex_);
    usage_.storedBytes = storedBytes_;
    usage_.keys = data_.size();
    return true;
  }

  void handleSet(Client& c, const std::string& key, std::string value) {
    if (!store(c, key, std::move(value))) return;
    reply(c, kOk, "");
    wakeParked(key);
  }

  void handleGet(Client& c, const std::string& key, int64_t timeoutMs) {
    auto it = data_.find(key);
    if (it != data_.end()) {
      reply(c, kOk, it->second);
      return;
    }
    c.parked = true;
    c.parkedKey = key;
    c.deadline = Clock::now() +
                 std::chrono::milliseconds(std::clamp<int64_t>(timeoutMs, 0, kMaxWaitMs));
  }

  void handleAdd(Client& c, const std::string& key, int64_t delta) {
    int64_t value = 0;
    auto it = data_.find(key);
    if (it != data_.end() && !parseCounter(it->second, &value)) {
      reply(c, kBad, "key '" + key + "' holds a value that is not a counter");
      return;
    }
    value = static_cast<int64_t>(static_cast<uint64_t>(value) +
                                 static_cast<uint64_t>(delta));  // wraps, no UB
    if (!store(c, key, std::to_string(value))) return;
    std::string out;
    appendI64(out, value);
    reply(c, kOk, out);
    wakeParked(key);
  }

  void wakeParked(const std::string& key) {
    const std::string& value = data_[key];
    for (auto& other : clients_) {
      if (other.parked && other.parkedKey == key) {
        other.parked = false;
        reply(other, kOk, value);
        handleInput(other);
      }
    }
  }

  void expireParked() {
    auto now = Clock::now();
    for (auto& c : clients_) {
      if (c.parked && now >= c.deadline) {
        c.parked = false;
        reply(c, kNotFound, "");
        handleInput(c);
      }
    }
  }

  void dropIdle() {
    const auto now = Clock::now();
    const auto limit = now - std::chrono::milliseconds(limits_.idleMillis);
    for (auto& c : clients_) {
      if (c.closing && now >= c.closeBy) c.dead = true;
      if (stalled(c) && c.lastInput <= limit) {
        refuse(c, std::string(c.authed ? "a partial request" : "no proof of the secret") +
                      " after " + std::to_string(limits_.idleMillis) +
                      " ms without more bytes (the idle limit)");
      }
    }
  }

  void removeDead() {
    std::erase_if(clients_, [](const Client& c) {
      if (c.dead && c.fd >= 0) ::close(c.fd);
      return c.dead;
    });
  }

  // Tells the client why it is dropped and logs it (the first few times).
  // Then the connection only drains: once the reply is out the server shuts
  // its side, and closes when the client does or after the idle limit.
  void refuse(Client& c, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(usageMutex_);
      ++usage_.refused;
    }
    if (++refusals_ <= kMaxLoggedRefusals) {
      KOLO_LOG(kWarning) << "rendezvous store on port " << port_ << ": closed the "
                         << "connection from " << c.peer << ": " << why
                         << (refusals_ == kMaxLoggedRefusals
                                 ? " (further refusals are not logged)"
                                 : "");
    }
    c.in.clear();
    c.in.shrink_to_fit();
    c.closing = true;
    c.closeBy = Clock::now() + std::chrono::milliseconds(limits_.idleMillis);
    reply(c, kBad, why);
  }

  void reply(Client& c, Status status, const std::string& payload) {
    appendU32(c.out, static_cast<uint32_t>(1 + payload.size()));
    c.out.push_back(static_cast<char>(status));
    c.out.append(payload);
    flush(c);
  }

  void flush(Client& c) {
    while (!c.out.empty() && !c.dead) {
      ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        c.dead = true;
      }
    }
    if (c.closing && c.out.empty() && !c.shutWr && !c.dead) {
      ::shutdown(c.fd, SHUT_WR);
      c.shutWr = true;
    }
  }

  int listenFd_;
  int wakeFd_;
  const std::string secret_;
  const Limits limits_;
  const size_t maxUnauthenticated_;
  int reserveFd_;  // /dev/null, given up to tell a client that descriptors ran out
  Clock::time_point acceptPausedUntil_{};
  bool loggedExhaustion_ = false;
  bool loggedShedding_ = false;
  int port_ = 0;
  std::vector<Client> clients_;  // only the server thread touches these
  std::map<std::string, std::string> data_;
  size_t storedBytes_ = 0;  // keys and values in data_
  int refusals_ = 0;
  mutable std::mutex usageMutex_;
  Usage usage_;  // guarded by usageMutex_; a copy for other threads
  std::thread thread_;
};

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& bindAddress,
                                                      int port, const std::string& secret,
                                                      const protocol::Limits& limits) {
  std::string where = endpoint(bindAddress.empty() ? "0.0.0.0" : bindAddress, port);
  if (port < 0 || port > 65535) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rendezvous store port " << port << " is out of range (0..65535)");
  }
  addrinfo hints{};
  hints.ai_family = bindAddress.empty() ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(bindAddress.empty() ? nullptr : bindAddress.c_str(),
                         std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    KOLO_THROW(ErrorCode::kIo, "cannot resolve the rendezvous store address "
                                   << where << ": " << ::gai_strerror(rc));
  }
  std::string why;
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  ai->ai_protocol);
    if (fd < 0) {
      why = detail::errnoString();
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || ::listen(fd, 1024) < 0) {
      why = detail::errnoString();
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    KOLO_THROW(ErrorCode::kIo,
               "cannot listen on " << where << " for the rendezvous store: " << why);
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    KOLO_SYSCHECK(wake, "eventfd for the rendezvous store server");
  }
  return std::make_unique<Server>(fd, wake, secret, limits);
}

}  // namespace kolo::rendezvous
