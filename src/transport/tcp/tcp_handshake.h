// The tcp transport's connection handshake (docs/security.md), as pure
// encode/decode functions that the transport and a fuzz target share.
//
//   acceptor  -> connector  Challenge: magic, version, nonce Na    (40 bytes)
//   connector -> acceptor   Hello (from, to, size), nonce Nc,
//                           HMAC-SHA256(secret, "kolo tcp connect" Na Nc
//                           Hello)                                 (88 bytes)
//   acceptor  -> connector  Hello (from/to swapped),
//                           HMAC-SHA256(secret, "kolo tcp accept" Na Nc
//                           Hello)                                 (56 bytes)
//
// Each side proves the secret over a nonce the other chose, so a recorded
// handshake cannot be replayed and the secret never crosses the wire. The
// messages have fixed sizes: nothing a stranger sends makes the acceptor
// allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kolo::transport::tcp {

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t from;
  int32_t to;
  int32_t size;
  int32_t reserved;
};
static_assert(sizeof(Hello) == 24);

inline constexpr uint32_t kMagic = 0x6b6f6c6f;  // "kolo"
inline constexpr uint32_t kVersion = 2;         // 2: authenticated
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kChallengeBytes = 8 + kNonceBytes;
inline constexpr size_t kHelloBytes = sizeof(Hello) + kNonceBytes + 32;
inline constexpr size_t kAnswerBytes = sizeof(Hello) + 32;

std::string encodeChallenge(std::string_view nonce);
// Na from a challenge; false (and *why) when it is not kolo's of this version.
bool decodeChallenge(std::string_view bytes, std::string* nonce, std::string* why);

std::string encodeHello(const Hello& hello, std::string_view na, std::string_view nc,
                        std::string_view secret);
// The Hello and Nc of a connector's message; false (and *why) when it is not
// kolo's or does not prove the secret over Na.
bool decodeHello(std::string_view bytes, std::string_view na, std::string_view secret,
                 Hello* hello, std::string* nc, std::string* why);

std::string encodeAnswer(const Hello& reply, std::string_view na, std::string_view nc,
                         std::string_view secret);
// The acceptor's reply; false (and *why) when it does not prove the secret.
bool decodeAnswer(std::string_view bytes, std::string_view na, std::string_view nc,
                  std::string_view secret, Hello* reply, std::string* why);

}  // namespace kolo::transport::tcp
