// TcpStore, the client of the rendezvous store (tcp_store.h): one blocking
// connection, authenticated at connect (store_protocol.h), requests
// serialised by a mutex.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/check.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/tcp_store.h"

namespace kolo::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using namespace protocol;
using namespace wire;

// Connects a blocking socket to host:port, trying every address of the host
// until `deadline`. Returns -1 (errno-like text in *why) when none answers.
int connectOnce(const std::string& host, int port, Clock::time_point deadline,
                std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *why = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    return -1;
  }
  int result = -1;
  for (addrinfo* ai = res; ai != nullptr && result < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      ai->ai_protocol);
    if (fd < 0) continue;
    int r = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (r < 0 && errno == EINPROGRESS) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd, POLLOUT, 0};
      int pr = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 1)));
      int err = ETIMEDOUT;
      if (pr > 0) {
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r == 0) {
      int flags = ::fcntl(fd, F_GETFL);
      ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      result = fd;
    } else {
      *why = detail::errnoString();
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  return result;
}

class Client : public TcpStore {
 public:
  Client(std::string host, int port, std::chrono::milliseconds connectTimeout,
         std::string secret)
      : host_(std::move(host)),
        port_(port),
        connectTimeout_(connectTimeout),
        secret_(std::move(secret)) {
    std::lock_guard<std::mutex> lock(mutex_);
    reconnect();
  }
  ~Client() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::string body = request(kSet, key);
    body.append(value.begin(), value.end());
    std::string reply = call(body, key, replyWait(connectTimeout_));
    checkStatus(reply, key);
  }

  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override {
    std::string body = request(kGet, key);
    appendI64(body, std::clamp<int64_t>(timeout.count(), 0, kMaxWaitMs));
    std::string reply = call(body, key, replyWait(timeout));
    if (static_cast<uint8_t>(reply[0]) == kNotFound) {
      KOLO_THROW(ErrorCode::kTimeout,
                 "timed out after " << timeout.count() / 1000.0 << " s waiting for key '"
                                    << key << "' in the rendezvous store at "
                                    << endpoint(host_, port_)
                                    << " (did every rank start?)");
    }
    checkStatus(reply, key);
    return std::vector<uint8_t>(reply.begin() + 1, reply.end());
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::string body = request(kAdd, key);
    appendI64(body, delta);
    std::string reply = call(body, key, replyWait(connectTimeout_));
    checkStatus(reply, key);
    if (reply.size() != 9) {
      KOLO_THROW(ErrorCode::kIo, "malformed reply to add('" << key << "') from the "
                                                            << "rendezvous store at "
                                                            << endpoint(host_, port_));
    }
    return readI64(reply.data() + 1);
  }

 private:
  // The server answers a GET by its timeout; allow slack for a busy host.
  static std::chrono::milliseconds replyWait(std::chrono::milliseconds t) {
    return std::chrono::milliseconds(std::clamp<int64_t>(t.count(), 0, kMaxWaitMs) +
                                     10000);
  }

  static std::string request(Op op, const std::string& key) {
    std::string body;
    body.push_back(static_cast<char>(op));
    appendU32(body, static_cast<uint32_t>(key.size()));
    body.append(key);
    return body;
  }

  void checkStatus(const std::string& reply, const std::string& key) {
    if (static_cast<uint8_t>(reply[0]) == kOk) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      drop();  // the server may close a refused connection: start the next clean
    }
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rendezvous store at " << endpoint(host_, port_) << " refused key '" << key
                                      << "': " << reply.substr(1));
  }

  // Connects and authenticates, retrying until connectTimeout while the
  // server is not there yet or cannot serve this connection (out of
  // descriptors: it closed it, or said why).
  void reconnect() {
    auto deadline = Clock::now() + connectTimeout_;
    std::string why = "no attempt";
    bool busy = false;
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      busy = false;
      fd_ = connectOnce(host_, port_, deadline, &why);
      if (fd_ >= 0) {
        if (authenticate(deadline, &why, &busy)) return;
      }
      if (Clock::now() + pause >= deadline) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
    KOLO_THROW(
        ErrorCode::kTimeout,
        "could not reach the rendezvous store at "
            << endpoint(host_, port_) << " within " << connectTimeout_.count() / 1000.0
            << " s (last error: " << why << ")"
            << (busy ? "" : "; is the process hosting it (kolorun or rank 0) running?"));
  }

  // Reads exactly n bytes before the deadline; false on EOF, error or time
  // (*got: how many came).
  bool readExact(char* p, size_t n, Clock::time_point deadline, size_t* got = nullptr) {
    size_t scratch = 0;
    size_t& done = got != nullptr ? *got : scratch;
    done = 0;
    while (done < n) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd pfd{fd_, POLLIN, 0};
      int pr = ::poll(&pfd, 1,
                      static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30)));
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) return false;
      ssize_t r = ::recv(fd_, p + done, n - done, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      done += static_cast<size_t>(r);
    }
    return true;
  }

  // The handshake of store_protocol.h: answers the server's challenge and
  // checks the server's own proof. Returns false (the connection dropped,
  // *why and *busy set) when the server could not serve it: closed before
  // its challenge or during the proof, or said "busy"; the caller retries.
  // Throws (and drops the connection) when it is not a kolo store, or
  // either side does not know the secret.
  bool authenticate(Clock::time_point deadline, std::string* why, bool* busy) {
    deadline = std::max(deadline, Clock::now() + std::chrono::seconds(10));
    const std::string where = endpoint(host_, port_);
    char challenge[kChallengeBytes];
    size_t got = 0;
    const bool magic = readExact(challenge, kMagic.size(), deadline, &got);
    if (magic && std::string_view(challenge, kBusyMagic.size()) == kBusyMagic) {
      *why = readBusy(deadline);
      *busy = true;
      drop();
      return false;
    }
    if (!magic && got == 0) {
      *why = "the store at " + where +
             " closed the connection (or sent nothing) before its challenge";
      drop();
      return false;
    }
    if (!magic || std::string_view(challenge, kMagic.size()) != kMagic ||
        !readExact(challenge + kMagic.size(), kNonceBytes, deadline)) {
      drop();
      KOLO_THROW(ErrorCode::kIo, "the process at " << where
                                                   << " is not a kolo rendezvous store "
                                                      "(no challenge from it)");
    }
    const std::string ns(challenge + kMagic.size(), kNonceBytes);
    const std::string nc = randomBytes(kNonceBytes);
    const Digest proof = clientProof(secret_, ns, nc);
    std::string hello = nc;
    hello.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    char head[4];
    bool ok = ::send(fd_, hello.data(), hello.size(), MSG_NOSIGNAL) ==
                  static_cast<ssize_t>(hello.size()) &&
              readExact(head, 4, deadline);
    const uint32_t len = ok ? readU32(head) : 0;
    std::string answer(ok && len >= 1 && len <= 4096 ? len : 0, '\0');
    if (!ok || answer.empty() || !readExact(answer.data(), answer.size(), deadline)) {
      *why = "the rendezvous store at " + where +
             " closed the connection during authentication";
      drop();
      return false;
    }
    if (static_cast<uint8_t>(answer[0]) != kOk) {
      drop();
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "the rendezvous store at "
                     << where << " refused this rank: " << answer.substr(1)
                     << ". Every rank of a job needs the same job secret (kolorun sets "
                        "it; else KOLO_JOB_SECRET or KOLO_JOB_SECRET_FILE)");
    }
    const Digest theirs = serverProof(secret_, ns, nc);
    if (answer.size() != 1 + theirs.size() ||
        !constantTimeEqual(theirs.data(), answer.data() + 1, theirs.size())) {
      drop();
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "the rendezvous store at "
                     << where
                     << " did not prove the job secret: it is another job's store, or "
                        "its job secret differs from this rank's (KOLO_JOB_SECRET)");
    }
    return true;
  }

  // The text after a "KOLOBUSY" (store_protocol.h), bounded.
  std::string readBusy(Clock::time_point deadline) {
    char head[4];
    std::string text;
    if (readExact(head, 4, deadline)) {
      text.resize(std::min<size_t>(readU32(head), kMaxBusyBytes));
      if (!readExact(text.data(), text.size(), deadline)) text.clear();
    }
    return text.empty() ? "the rendezvous store at " + endpoint(host_, port_) +
                              " cannot serve more connections"
                        : text;
  }

  // Sends one request and returns the reply body. On any failure the
  // connection is dropped so that the next call starts clean.
  std::string call(const std::string& body, const std::string& key,
                   std::chrono::milliseconds wait) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fd_ < 0) reconnect();
    std::string frame;
    appendU32(frame, static_cast<uint32_t>(body.size()));
    frame.append(body);
    size_t off = 0;
    while (off < frame.size()) {
      ssize_t n = ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) lost(key, detail::errnoString());
      off += n;
    }
    auto deadline = Clock::now() + wait;
    std::string in;
    size_t need = 4;
    char buf[65536];
    for (;;) {
      if (in.size() >= 4) need = 4 + static_cast<size_t>(readU32(in.data()));
      if (in.size() >= need && need > 4) break;
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        drop();
        KOLO_THROW(ErrorCode::kTimeout,
                   "the rendezvous store at "
                       << endpoint(host_, port_) << " did not answer a request for key '"
                       << key << "' within " << wait.count() / 1000.0 << " s");
      }
      pollfd p{fd_, POLLIN, 0};
      int pr = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (pr < 0 && errno != EINTR) lost(key, detail::errnoString());
      if (pr <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) lost(key, "connection closed");
      if (n < 0) lost(key, detail::errnoString());
      in.append(buf, n);
    }
    if (in.size() != need || need < 5) lost(key, "malformed reply");
    return in.substr(4);
  }

  void drop() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  [[noreturn]] void lost(const std::string& key, const std::string& why) {
    drop();
    KOLO_THROW(ErrorCode::kIo, "lost the rendezvous store at "
                                   << endpoint(host_, port_)
                                   << " during a request for key '" << key << "' (" << why
                                   << "); did the process hosting it exit?");
  }

  const std::string host_;
  const int port_;
  const std::chrono::milliseconds connectTimeout_;
  const std::string secret_;
  std::mutex mutex_;  // serialises requests on the one connection
  int fd_ = -1;       // guarded by mutex_
};
}  // namespace

std::unique_ptr<TcpStore> TcpStore::connect(const std::string& host, int port,
                                            std::chrono::milliseconds connectTimeout,
                                            const std::string& secret) {
  return std::make_unique<Client>(host, port, connectTimeout, secret);
}
}  // namespace kolo::rendezvous
