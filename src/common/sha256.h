// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained, for the
// control plane's authentication (docs/security.md): kolo needs no crypto
// library on machines without a package registry.
//
// Contract
// - Sha256: feed bytes with update(), then finish() once; the object may
//   not be updated after finish(). Not thread-safe; cheap to copy.
// - hmacSha256(key, data): the 32-byte MAC; any key length (keys longer than
//   the 64-byte block are hashed first, as RFC 2104 says).
// - constantTimeEqual: compares two byte strings in time that depends only
//   on their lengths, so a verifier leaks nothing about where a MAC differs.
// - randomBytes: n bytes from /dev/urandom (getrandom); throws Error(kIo)
//   when the kernel gives none.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kolo {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(std::string_view data);
Digest hmacSha256(std::string_view key, std::string_view data);
bool constantTimeEqual(const void* a, const void* b, size_t n);
std::string randomBytes(size_t n);
std::string toHex(const void* data, size_t n);

}  // namespace kolo
