// Small helpers of the store's wire format shared by its server
// (tcp_store.cc) and client (tcp_store_client.cc). Internal.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace kolo::rendezvous::wire {

// A GET's "forever": about 35 years.
inline constexpr int64_t kMaxWaitMs = int64_t{1} << 40;

inline void appendU32(std::string& s, uint32_t v) {
  s.append(reinterpret_cast<char*>(&v), 4);
}
inline void appendI64(std::string& s, int64_t v) {
  s.append(reinterpret_cast<char*>(&v), 8);
}

inline uint32_t readU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline int64_t readI64(const char* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

}  // namespace kolo::rendezvous::wire
