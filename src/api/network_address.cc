#include "api/network_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/check.h"

namespace kolo::api {
namespace {

std::string interfaceAddress(const std::string& name) {
  struct ifaddrs* list = nullptr;
  KOLO_SYSCHECK(getifaddrs(&list), "getifaddrs");
  std::string found;
  for (auto* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (name != a->ifa_name) continue;
    char buf[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
    found = buf;
    break;
  }
  freeifaddrs(list);
  if (found.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_IFACE='" << name << "' is not an interface with an IPv4 address");
  }
  return found;
}

}  // namespace

// connect() on a UDP socket only selects the route; nothing is sent.
std::string routeSourceAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
      out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

std::string pickAdvertiseAddress(const std::string& iface,
                                 const std::string& rendezvous) {
  if (!iface.empty()) {
    in_addr tmp{};
    if (inet_pton(AF_INET, iface.c_str(), &tmp) == 1) return iface;
    return interfaceAddress(iface);
  }
  const std::string prefix = "tcp://";
  if (rendezvous.rfind(prefix, 0) == 0) {
    std::string rest = rendezvous.substr(prefix.size());
    std::string host = rest.substr(0, rest.rfind(':'));
    std::string src = routeSourceAddress(host);
    if (!src.empty()) return src;
  }
  return "127.0.0.1";
}

}  // namespace kolo::api
