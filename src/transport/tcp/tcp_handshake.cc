#include "transport/tcp/tcp_handshake.h"

#include <cstring>

#include "common/sha256.h"

namespace kolo::transport::tcp {
namespace {

Digest mac(std::string_view label, std::string_view secret, std::string_view na,
           std::string_view nc, const Hello& hello) {
  std::string msg(label);
  msg.append(na);
  msg.append(nc);
  msg.append(reinterpret_cast<const char*>(&hello), sizeof(hello));
  return hmacSha256(secret, msg);
}

void appendDigest(std::string& out, const Digest& d) {
  out.append(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace

std::string encodeChallenge(std::string_view nonce) {
  std::string out;
  out.append(reinterpret_cast<const char*>(&kMagic), 4);
  out.append(reinterpret_cast<const char*>(&kVersion), 4);
  out.append(nonce);
  return out;
}

bool decodeChallenge(std::string_view bytes, std::string* nonce, std::string* why) {
  uint32_t magic = 0, version = 0;
  if (bytes.size() != kChallengeBytes) {
    *why = "challenge of " + std::to_string(bytes.size()) + " bytes";
    return false;
  }
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&version, bytes.data() + 4, 4);
  if (magic != kMagic || version != kVersion) {
    *why = "not a kolo tcp link of version " + std::to_string(kVersion) + " (magic " +
           std::to_string(magic) + ", version " + std::to_string(version) + ")";
    return false;
  }
  *nonce = std::string(bytes.substr(8, kNonceBytes));
  return true;
}

std::string encodeHello(const Hello& hello, std::string_view na, std::string_view nc,
                        std::string_view secret) {
  std::string out(reinterpret_cast<const char*>(&hello), sizeof(hello));
  out.append(nc);
  appendDigest(out, mac("kolo tcp connect", secret, na, nc, hello));
  return out;
}

bool decodeHello(std::string_view bytes, std::string_view na, std::string_view secret,
                 Hello* hello, std::string* nc, std::string* why) {
  if (bytes.size() != kHelloBytes) {
    *why = "handshake of " + std::to_string(bytes.size()) + " bytes";
    return false;
  }
  std::memcpy(hello, bytes.data(), sizeof(Hello));
  if (hello->magic != kMagic || hello->version != kVersion) {
    *why = "not a kolo tcp handshake of version " + std::to_string(kVersion);
    return false;
  }
  *nc = std::string(bytes.substr(sizeof(Hello), kNonceBytes));
  const Digest expected = mac("kolo tcp connect", secret, na, *nc, *hello);
  if (!constantTimeEqual(expected.data(), bytes.data() + sizeof(Hello) + kNonceBytes,
                         expected.size())) {
    *why = "the connection claiming rank " + std::to_string(hello->from) +
           " did not prove the job secret";
    return false;
  }
  return true;
}

std::string encodeAnswer(const Hello& reply, std::string_view na, std::string_view nc,
                         std::string_view secret) {
  std::string out(reinterpret_cast<const char*>(&reply), sizeof(reply));
  appendDigest(out, mac("kolo tcp accept", secret, na, nc, reply));
  return out;
}

bool decodeAnswer(std::string_view bytes, std::string_view na, std::string_view nc,
                  std::string_view secret, Hello* reply, std::string* why) {
  if (bytes.size() != kAnswerBytes) {
    *why = "answer of " + std::to_string(bytes.size()) + " bytes";
    return false;
  }
  std::memcpy(reply, bytes.data(), sizeof(Hello));
  const Digest expected = mac("kolo tcp accept", secret, na, nc, *reply);
  if (reply->magic != kMagic || reply->version != kVersion ||
      !constantTimeEqual(expected.data(), bytes.data() + sizeof(Hello),
                         expected.size())) {
    *why =
        "it did not prove the job secret (another job's process, or a different "
        "KOLO_JOB_SECRET)";
    return false;
  }
  return true;
}

}  // namespace kolo::transport::tcp
