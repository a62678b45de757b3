#include "rendezvous/store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <netinet/in.h>

#include <atomic>
#include <cstdlib>

#include "common/check.h"
#include "common/logging.h"
#include "rendezvous/file_store.h"
#include "rendezvous/tcp_store.h"

namespace kolo::rendezvous {
namespace {

// A client whose server lives in this process: the server outlives the
// client (members are destroyed in reverse order).
class HostedTcpStore : public Store {
 public:
  HostedTcpStore(std::unique_ptr<TcpStoreServer> server, std::unique_ptr<Store> client)
      : server_(std::move(server)), client_(std::move(client)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    client_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key,
                           std::chrono::milliseconds timeout) override {
    return client_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return client_->add(key, delta);
  }
  void stopServing() override { server_.reset(); }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<Store> client_;
};

// Where a store hosted for `host` listens: the address `host` names. A
// name that resolves to a loopback address other than 127.0.0.1 (Debian
// maps the machine's own name to 127.0.1.1) names this machine to ranks on
// other hosts, which reach it from outside: then every interface.
std::string listenAddressFor(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
    ::freeaddrinfo(res);
    return host;  // an IPv4 address
  }
  if (host.find(':') != std::string::npos) return host;  // an IPv6 address
  hints.ai_flags = 0;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return host;
  char text[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, text,
              sizeof(text));
  ::freeaddrinfo(res);
  const std::string ip = text;
  if (ip.starts_with("127.") && ip != "127.0.0.1") return "";
  return ip;
}

// Whether every address `host` names is a loopback address ("" is every
// interface; a name that does not resolve is not known to be loopback).
bool loopbackOnly(const std::string& host) {
  if (host.empty()) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool loopback = res != nullptr;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      loopback = loopback && (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      loopback = loopback && IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
    } else {
      loopback = false;
    }
  }
  ::freeaddrinfo(res);
  return loopback;
}

[[noreturn]] void malformed(const std::string& address, const std::string& why) {
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "malformed rendezvous address '"
                 << address << "': " << why
                 << " (expected tcp://HOST:PORT or file:///DIRECTORY)");
}

}  // namespace

std::unique_ptr<Store> openStore(const std::string& address, bool hostServer,
                                 std::chrono::milliseconds connectTimeout,
                                 const std::string& secret,
                                 const std::string& listenAddress) {
  constexpr std::string_view kTcp = "tcp://";
  constexpr std::string_view kFile = "file://";
  if (address.starts_with(kFile)) {
    std::string dir = address.substr(kFile.size());
    if (dir.empty() || dir[0] != '/')
      malformed(address, "the directory must be absolute");
    return std::make_unique<FileStore>(dir, secret);
  }
  if (!address.starts_with(kTcp)) malformed(address, "unknown scheme");

  // HOST:PORT, HOST may be a bracketed IPv6 address.
  std::string rest = address.substr(kTcp.size());
  std::string host;
  std::string portText;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() ||
        rest[close + 1] != ':') {
      malformed(address, "expected [IPV6]:PORT");
    }
    host = rest.substr(1, close - 1);
    portText = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos) malformed(address, "missing :PORT");
    host = rest.substr(0, colon);
    portText = rest.substr(colon + 1);
  }
  if (host.empty()) malformed(address, "missing host");
  char* end = nullptr;
  long port = std::strtol(portText.c_str(), &end, 10);
  if (portText.empty() || *end != '\0' || port < 1 || port > 65535) {
    malformed(address, "port '" + portText + "' is not a number in 1..65535");
  }

  if (!hostServer) {
    return TcpStore::connect(host, static_cast<int>(port), connectTimeout, secret);
  }
  // Listen where the other ranks are told to connect: HOST (127.0.0.1 stays
  // on loopback), unless the caller names the address (KOLO_IFACE).
  const std::string bindAddress =
      listenAddress.empty() ? listenAddressFor(host) : listenAddress;
  auto server = TcpStoreServer::start(bindAddress, static_cast<int>(port), secret);
  warnWhenUnauthenticated(bindAddress, static_cast<int>(port), secret);
  auto client = TcpStore::connect(host, static_cast<int>(port), connectTimeout, secret);
  return withHostedServer(std::move(server), std::move(client));
}

void warnWhenUnauthenticated(const std::string& listenAddress, int port,
                             const std::string& secret) {
  static std::atomic<bool> warned{false};
  if (!secret.empty() || loopbackOnly(listenAddress) || warned.exchange(true)) return;
  KOLO_LOG(kWarning)
      << "the rendezvous store listens on "
      << (listenAddress.empty() ? std::string("every interface")
                                : "'" + listenAddress + "'")
      << " (port " << port
      << ") without a job secret: any process that reaches it can read and change "
         "this job's keys and take a rank's place (docs/security.md). To authenticate "
         "the job, start every rank with the same secret, e.g. before the launcher: "
         "export KOLO_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')";
}

std::unique_ptr<Store> withHostedServer(std::unique_ptr<TcpStoreServer> server,
                                        std::unique_ptr<Store> client) {
  return std::make_unique<HostedTcpStore>(std::move(server), std::move(client));
}

}  // namespace kolo::rendezvous
