#include "transport/tcp/tcp_handshake.h"

#include "common/byte_codec.h"
#include "common/sha256.h"

namespace kolo::transport::tcp {
namespace {

// Both ends are one build of kolo: host byte order.
constexpr ByteOrder kOrder = kHostOrder;

void appendHello(std::string& out, const Hello& h) {
  ByteWriter(out, kOrder)
      .put(h.magic)
      .put(h.version)
      .put(h.from)
      .put(h.to)
      .put(h.size)
      .put(h.reserved);
}

// The caller checked that `in` holds sizeof(Hello) bytes.
Hello readHello(ByteReader& in) {
  Hello h;
  h.magic = in.get<uint32_t>();
  h.version = in.get<uint32_t>();
  h.from = in.get<int32_t>();
  h.to = in.get<int32_t>();
  h.size = in.get<int32_t>();
  h.reserved = in.get<int32_t>();
  return h;
}

Digest mac(std::string_view label, std::string_view secret, std::string_view na,
           std::string_view nc, const Hello& hello) {
  std::string msg(label);
  msg.append(na);
  msg.append(nc);
  appendHello(msg, hello);
  return hmacSha256(secret, msg);
}

void appendDigest(std::string& out, const Digest& d) {
  out.append(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace

std::string encodeChallenge(std::string_view nonce) {
  std::string out;
  ByteWriter(out, kOrder).put(kMagic).put(kVersion).bytes(nonce);
  return out;
}

bool decodeChallenge(std::string_view bytes, std::string* nonce, std::string* why) {
  if (bytes.size() != kChallengeBytes) {
    *why = "challenge of " + std::to_string(bytes.size()) + " bytes";
    return false;
  }
  ByteReader in(bytes, kOrder);
  const uint32_t magic = in.get<uint32_t>();
  const uint32_t version = in.get<uint32_t>();
  if (magic != kMagic || version != kVersion) {
    *why = "not a kolo tcp link of version " + std::to_string(kVersion) + " (magic " +
           std::to_string(magic) + ", version " + std::to_string(version) + ")";
    return false;
  }
  *nonce = std::string(in.bytes(kNonceBytes));
  return true;
}

std::string encodeHello(const Hello& hello, std::string_view na, std::string_view nc,
                        std::string_view secret) {
  std::string out;
  appendHello(out, hello);
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
  ByteReader in(bytes, kOrder);
  *hello = readHello(in);
  if (hello->magic != kMagic || hello->version != kVersion) {
    *why = "not a kolo tcp handshake of version " + std::to_string(kVersion);
    return false;
  }
  *nc = std::string(in.bytes(kNonceBytes));
  const Digest expected = mac("kolo tcp connect", secret, na, *nc, *hello);
  if (!constantTimeEqual(expected.data(), in.cursor(), expected.size())) {
    *why = "the connection claiming rank " + std::to_string(hello->from) +
           " did not prove the job secret";
    return false;
  }
  return true;
}

std::string encodeAnswer(const Hello& reply, std::string_view na, std::string_view nc,
                         std::string_view secret) {
  std::string out;
  appendHello(out, reply);
  appendDigest(out, mac("kolo tcp accept", secret, na, nc, reply));
  return out;
}

bool decodeAnswer(std::string_view bytes, std::string_view na, std::string_view nc,
                  std::string_view secret, Hello* reply, std::string* why) {
  if (bytes.size() != kAnswerBytes) {
    *why = "answer of " + std::to_string(bytes.size()) + " bytes";
    return false;
  }
  ByteReader in(bytes, kOrder);
  *reply = readHello(in);
  const Digest expected = mac("kolo tcp accept", secret, na, nc, *reply);
  if (reply->magic != kMagic || reply->version != kVersion ||
      !constantTimeEqual(expected.data(), in.cursor(), expected.size())) {
    *why =
        "it did not prove the job secret (another job's process, or a different "
        "KOLO_JOB_SECRET)";
    return false;
  }
  return true;
}

}  // namespace kolo::transport::tcp
