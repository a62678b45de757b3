#include "rendezvous/store_protocol.h"

#include "rendezvous/store_wire.h"

namespace kolo::rendezvous::protocol {

bool decodeFrameLength(std::string_view header4, size_t minBytes, size_t limit,
                       uint32_t* out, std::string* why) {
  ByteReader in(header4, wire::kOrder);
  const uint32_t len = in.get<uint32_t>();
  if (!in.ok()) {
    *why = "short frame header";
    return false;
  }
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
  ByteReader in(body, wire::kOrder);
  const uint8_t op = in.get<uint8_t>();
  const uint32_t keyLen = in.get<uint32_t>();
  if (keyLen > in.remaining()) {
    *why = "key length " + std::to_string(keyLen) + " exceeds the request's " +
           std::to_string(in.remaining()) + " bytes";
    return false;
  }
  out->key = in.bytes(keyLen);
  out->arg = in.rest();
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
    out->number = ByteReader(out->arg, wire::kOrder).get<int64_t>();
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
