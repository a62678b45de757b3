// TcpStoreServer and its client.
//
// Protocol (one TCP connection per client, requests answered in order):
//   frame    = u32 body length, body            (host byte order)
//   request  = u8 op, u32 key length, key, argument
//     SET    argument = value bytes (the rest of the body)
//     GET    argument = i64 timeout in ms; the server holds the request
//            until the key exists or the timeout passes
//     ADD    argument = i64 delta; the counter is kept as decimal text
//   response = u8 status (kOk, kNotFound after a GET timeout, kBad with a
//              message), then the value (GET) or the i64 result (ADD)
//
// The server is one thread running a poll() loop over the listening socket,
// an eventfd (shutdown) and the clients. A GET on a missing key parks the
// client with a deadline; a SET or ADD of that key answers every parked
// client; the poll timeout is the nearest deadline. While a client is
// parked its later requests wait in its input buffer.
#include "rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
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

namespace kolo::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kBad = 2 };
constexpr uint32_t kMaxFrame = 1u << 30;
constexpr int64_t kMaxWaitMs = int64_t{1} << 40;  // ~35 years: "forever"

void appendU32(std::string& s, uint32_t v) {
  s.append(reinterpret_cast<char*>(&v), 4);
}
void appendI64(std::string& s, int64_t v) {
  s.append(reinterpret_cast<char*>(&v), 8);
}

uint32_t readU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
int64_t readI64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
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
  Server(int listenFd, int wakeFd) : listenFd_(listenFd), wakeFd_(wakeFd) {
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
    for (auto& c : clients_) ::close(c.fd);
    ::close(listenFd_);
    ::close(wakeFd_);
  }

  int port() const override { return port_; }

 private:
  struct Client {
    int fd;
    std::string in;
    std::string out;
    bool parked = false;
    std::string parkedKey;
    Clock::time_point deadline;
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
      fds.clear();
      fds.push_back({wakeFd_, POLLIN, 0});
      fds.push_back({listenFd_, POLLIN, 0});
      int timeoutMs = -1;
      auto now = Clock::now();
      for (auto& c : clients_) {
        short events = POLLIN;
        if (!c.out.empty()) events |= POLLOUT;
        fds.push_back({c.fd, events, 0});
        if (c.parked) {
          auto ms =
              std::chrono::ceil<std::chrono::milliseconds>(c.deadline - now).count();
          ms = std::max<int64_t>(ms, 0);
          if (timeoutMs < 0 || ms < timeoutMs) timeoutMs = static_cast<int>(ms);
        }
      }
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
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
        if (!c.dead && (fds[i].revents & POLLOUT)) flush(c);
      }
      expireParked();
      std::erase_if(clients_, [](const Client& c) {
        if (c.dead) ::close(c.fd);
        return c.dead;
      });
    }
  }

  void acceptClients() {
    for (;;) {
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a transient error: try on the next event
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Client c;
      c.fd = fd;
      clients_.push_back(std::move(c));
    }
  }

  void readFrom(Client& c) {
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, n);
        if (static_cast<size_t>(n) < sizeof(buf)) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c.dead = true;  // EOF or error: the client left
      return;
    }
    handleInput(c);
  }

  // Answers the complete requests in c.in, stopping at a parked GET.
  void handleInput(Client& c) {
    while (!c.parked && !c.dead && c.in.size() >= 4) {
      uint32_t len = readU32(c.in.data());
      if (len > kMaxFrame || len < 5) {
        c.dead = true;  // not our protocol
        return;
      }
      if (c.in.size() < 4 + len) return;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + len);
      handleRequest(c, body);
    }
  }

  void handleRequest(Client& c, const std::string& body) {
    uint8_t op = static_cast<uint8_t>(body[0]);
    uint32_t keyLen = readU32(body.data() + 1);
    if (5 + static_cast<size_t>(keyLen) > body.size()) {
      c.dead = true;
      return;
    }
    std::string key = body.substr(5, keyLen);
    std::string arg = body.substr(5 + keyLen);
    switch (op) {
      case kSet:
        data_[key] = arg;
        reply(c, kOk, "");
        wakeParked(key);
        return;
      case kGet: {
        if (arg.size() != 8) break;
        auto it = data_.find(key);
        if (it != data_.end()) {
          reply(c, kOk, it->second);
          return;
        }
        c.parked = true;
        c.parkedKey = key;
        c.deadline = Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(
                                        readI64(arg.data()), 0, kMaxWaitMs));
        return;
      }
      case kAdd: {
        if (arg.size() != 8) break;
        int64_t value = 0;
        auto it = data_.find(key);
        if (it != data_.end() && !parseCounter(it->second, &value)) {
          reply(c, kBad, "key '" + key + "' holds a value that is not a counter");
          return;
        }
        value += readI64(arg.data());
        data_[key] = std::to_string(value);
        std::string out;
        appendI64(out, value);
        reply(c, kOk, out);
        wakeParked(key);
        return;
      }
      default: break;
    }
    reply(c, kBad, "malformed request (op " + std::to_string(op) + ")");
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
  }

  int listenFd_;
  int wakeFd_;
  int port_ = 0;
  std::vector<Client> clients_;  // only the server thread touches these
  std::map<std::string, std::string> data_;
  std::thread thread_;
};

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
  Client(std::string host, int port, std::chrono::milliseconds connectTimeout)
      : host_(std::move(host)), port_(port), connectTimeout_(connectTimeout) {
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
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rendezvous store at " << endpoint(host_, port_) << " refused key '" << key
                                      << "': " << reply.substr(1));
  }

  void reconnect() {
    auto deadline = Clock::now() + connectTimeout_;
    std::string why = "no attempt";
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      fd_ = connectOnce(host_, port_, deadline, &why);
      if (fd_ >= 0) return;
      if (Clock::now() + pause >= deadline) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
    KOLO_THROW(ErrorCode::kTimeout,
               "could not reach the rendezvous store at "
                   << endpoint(host_, port_) << " within "
                   << connectTimeout_.count() / 1000.0 << " s (last error: " << why
                   << "); is the process hosting it (kolorun or rank 0) running?");
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
  std::mutex mutex_;  // serialises requests on the one connection
  int fd_ = -1;       // guarded by mutex_
};

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& bindAddress,
                                                      int port) {
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
  return std::make_unique<Server>(fd, wake);
}

std::unique_ptr<TcpStore> TcpStore::connect(const std::string& host, int port,
                                            std::chrono::milliseconds connectTimeout) {
  return std::make_unique<Client>(host, port, connectTimeout);
}

}  // namespace kolo::rendezvous
