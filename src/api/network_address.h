// Which IP address this rank listens on and advertises for tcp links.
#pragma once

#include <string>

namespace kolo::api {

// `iface`: KOLO_IFACE, an interface name (eth0) or an IPv4 address; empty
// picks the source address of the route to the rendezvous host (so ranks
// on a loopback rendezvous use 127.0.0.1). Throws Error(kInvalidArgument)
// naming an interface that does not exist or has no IPv4 address.
std::string pickAdvertiseAddress(const std::string& iface, const std::string& rendezvous);

// The IPv4 source address the kernel would use to reach `host` (a name or an
// address; no packet is sent), or "" when the host does not resolve or has
// no route.
std::string routeSourceAddress(const std::string& host);

}  // namespace kolo::api
