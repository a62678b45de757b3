#include "rendezvous/store_protocol.h"

#include <cstring>

namespace kolo::rendezvous::protocol {

bool decodeFrameLength(std::string_view header4, size_t minBytes, size_t limit,
                       uint32_t* out, std::string* why) {
  if (header4.size() < 4) {
    *why = "short frame header";
    return false;
  }
  uint32_t len;
  std::memcpy(&len, header4.data(), 4);
  if (len < minBytes || len > limit) {
    *why = "frame of " + std::to_string(len) + " bytes is outside the store's limits (" +
           std::to_string(minBytes) + ".." + std::to_string(limit) + " bytes)";
    return false;
  }
  *out = len;
  return true;
}

bool decodeRequest(std::string_view body, Request* out, std::string* why) {
  if (body.size() < 5) {
    *why = "request of " + std::to_string(body.size()) + " bytes (at least 5 expected)";
    return false;
  }
  const uint8_t op = static_cast<uint8_t>(body[0]);
  uint32_t keyLen;
  std::memcpy(&keyLen, body.data() + 1, 4);
  if (keyLen > body.size() - 5) {
    *why = "key length " + std::to_string(keyLen) + " exceeds the request's " +
           std::to_string(body.size() - 5) + " bytes";
    return false;
  }
  out->key = body.substr(5, keyLen);
  out->arg = body.substr(5 + keyLen);
  if (op != kSet && op != kGet && op != kAdd) {
    *why = "unknown op " + std::to_string(op);
    return false;
  }
  out->op = static_cast<Op>(op);
  if (op != kSet) {
    if (out->arg.size() != 8) {
      *why = std::string(op == kGet ? "GET" : "ADD") + " argument of " +
             std::to_string(out->arg.size()) + " bytes (8 expected)";
      return false;
    }
    std::memcpy(&out->number, out->arg.data(), 8);
  }
  return true;
}

namespace {
Digest proof(std::string_view label, std::string_view secret, std::string_view ns,
             std::string_view nc) {
  std::string msg(label);
  msg.append(ns);
  msg.append(nc);
  return hmacSha256(secret, msg);
}
}  // namespace

Digest clientProof(std::string_view secret, std::string_view ns, std::string_view nc) {
  return proof("kolo store client", secret, ns, nc);
}
Digest serverProof(std::string_view secret, std::string_view ns, std::string_view nc) {
  return proof("kolo store server", secret, ns, nc);
}

}  // namespace kolo::rendezvous::protocol
