// The wire format of the rendezvous store (tcp_store.cc), as pure functions
// that a fuzz target can call without sockets.
//
// Connection set-up (authentication, docs/security.md):
//   server -> client   kChallengeBytes: magic "KOLOSTR1", 32-byte nonce Ns
//   client -> server   kProofBytes: 32-byte nonce Nc,
//                      HMAC-SHA256(secret, "kolo store client" Ns Nc)
//   server -> client   a reply frame: kOk + HMAC-SHA256(secret,
//                      "kolo store server" Ns Nc), or kBad + why (then close)
// A server out of file descriptors answers a connection it cannot serve
// with "KOLOBUSY", u32 length, why (at most kMaxBusyBytes) instead of the
// challenge, and closes it; the client retries until its connect timeout.
// Then requests, one frame each, answered in order:
//   frame    = u32 body length, body            (host byte order)
//   request  = u8 op, u32 key length, key, argument
//     SET    argument = value bytes (the rest of the body)
//     GET    argument = i64 timeout in ms
//     ADD    argument = i64 delta
//   response = u8 status (kOk, kNotFound after a GET timeout, kBad with a
//              message), then the value (GET) or the i64 result (ADD)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/sha256.h"

namespace kolo::rendezvous::protocol {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kBad = 2 };

inline constexpr std::string_view kMagic = "KOLOSTR1";
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kChallengeBytes = 8 + kNonceBytes;
inline constexpr size_t kProofBytes = kNonceBytes + 32;
inline constexpr std::string_view kBusyMagic = "KOLOBUSY";
inline constexpr size_t kMaxBusyBytes = 1024;

// Limits of the server (docs/security.md says why these values).
struct Limits {
  // Largest request body. The largest value kolo stores is a team's rank
  // list (4 bytes per rank: 4 MiB is a team of a million ranks); keys are
  // names of a few dozen bytes.
  size_t maxFrameBytes = size_t{4} << 20;
  // Sum of the sizes of every key and value held.
  size_t maxStoreBytes = size_t{64} << 20;
  // A connection that holds a partial frame (or has not authenticated)
  // this long without sending more is dropped.
  int64_t idleMillis = 10000;
  // Connections that have not yet proven the secret (or were refused and
  // are draining) held at once; a newer one makes the server close the
  // oldest. 0: a quarter of the process's descriptor limit
  // (RLIMIT_NOFILE), at least 16, so that strangers never take the
  // descriptors that the ranks (and a rank hosting the store) need.
  size_t maxUnauthenticated = 0;
};

// One decoded request; key and arg view into the body.
struct Request {
  Op op;
  std::string_view key;
  std::string_view arg;
  int64_t number = 0;  // GET's timeout or ADD's delta
};

// Decodes a request body; false (and *why) when it is malformed.
bool decodeRequest(std::string_view body, Request* out, std::string* why);

// The body length a frame header declares; false (and *why) when the
// length is outside [min, limit].
bool decodeFrameLength(std::string_view header4, size_t minBytes, size_t limit,
                       uint32_t* out, std::string* why);

// The two proofs of the handshake.
Digest clientProof(std::string_view secret, std::string_view ns, std::string_view nc);
Digest serverProof(std::string_view secret, std::string_view ns, std::string_view nc);

}  // namespace kolo::rendezvous::protocol
