// Small helpers of the store's wire format shared by its server
// (tcp_store.cc) and client (tcp_store_client.cc). Internal.
#pragma once

#include <cstdint>
#include <string>

#include "common/byte_codec.h"

namespace kolo::rendezvous::wire {

// A GET's "forever": about 35 years.
inline constexpr int64_t kMaxWaitMs = int64_t{1} << 40;

// The store's frame fields, in its byte order (store_protocol.h).
inline constexpr ByteOrder kOrder = kHostOrder;

inline void appendU32(std::string& s, uint32_t v) {
  ByteWriter(s, kOrder).put(v);
}
inline void appendI64(std::string& s, int64_t v) {
  ByteWriter(s, kOrder).put(v);
}

// The value at p, whose 4 (8) bytes the caller has checked are there.
inline uint32_t readU32(const char* p) {
  return loadBytes<uint32_t>(reinterpret_cast<const uint8_t*>(p), kOrder);
}
inline int64_t readI64(const char* p) {
  return loadBytes<int64_t>(reinterpret_cast<const uint8_t*>(p), kOrder);
}

inline std::string endpoint(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

}  // namespace kolo::rendezvous::wire
