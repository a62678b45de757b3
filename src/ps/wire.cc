// Encoding is explicit byte by byte (little-endian), so the layout does not
// depend on the compiler's struct padding or the host's byte order.
#include "ps/wire.h"

#include <cstring>

#include "common/check.h"

namespace kolo::ps {
namespace {

template <typename T>
void put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename T>
T get(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}

bool payloadIsShard(MessageType t) {
  return t == MessageType::kSeed || t == MessageType::kPush ||
         t == MessageType::kPullReply || t == MessageType::kExchange ||
         t == MessageType::kExchangeReply;
}

}  // namespace

const char* messageTypeName(MessageType t) {
  switch (t) {
    case MessageType::kSeed: return "seed";
    case MessageType::kPush: return "push";
    case MessageType::kPushReply: return "push-reply";
    case MessageType::kPull: return "pull";
    case MessageType::kPullReply: return "pull-reply";
    case MessageType::kExchange: return "exchange";
    case MessageType::kExchangeReply: return "exchange-reply";
    case MessageType::kBye: return "bye";
    case MessageType::kError: return "error";
  }
  return "unknown";
}

HeaderBytes encodeHeader(const Header& h) {
  HeaderBytes b{};
  uint32_t lrBits;
  std::memcpy(&lrBits, &h.lr, sizeof(lrBits));
  put<uint32_t>(&b[0], kMagic);
  put<uint16_t>(&b[4], static_cast<uint16_t>(h.type));
  put<uint16_t>(&b[6], h.flags);
  put<uint32_t>(&b[8], h.worker);
  put<uint32_t>(&b[12], h.shard);
  put<uint64_t>(&b[16], h.version);
  put<uint64_t>(&b[24], h.payloadBytes);
  put<uint32_t>(&b[32], lrBits);
  put<uint32_t>(&b[36], 0);
  return b;
}

Header decodeHeader(const uint8_t* bytes, size_t size, const WireLimits& limits,
                    int from) {
  if (size != kHeaderBytes) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server header from rank "
                                         << from << ": " << size << " bytes, expected "
                                         << kHeaderBytes);
  }
  const uint32_t magic = get<uint32_t>(bytes);
  if (magic != kMagic) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server header from rank "
                                         << from << ": magic 0x" << std::hex << magic
                                         << ", expected 0x" << kMagic);
  }
  Header h;
  const uint16_t type = get<uint16_t>(bytes + 4);
  if (type < 1 || type > static_cast<uint16_t>(MessageType::kError)) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server header from rank "
                                         << from << ": unknown message type " << type
                                         << " (expected 1.."
                                         << static_cast<int>(MessageType::kError) << ")");
  }
  h.type = static_cast<MessageType>(type);
  h.flags = get<uint16_t>(bytes + 6);
  h.worker = get<uint32_t>(bytes + 8);
  h.shard = get<uint32_t>(bytes + 12);
  h.version = get<uint64_t>(bytes + 16);
  h.payloadBytes = get<uint64_t>(bytes + 24);
  const uint32_t lrBits = get<uint32_t>(bytes + 32);
  std::memcpy(&h.lr, &lrBits, sizeof(h.lr));
  const char* name = messageTypeName(h.type);
  if (h.worker >= limits.workers) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server " << name << " from rank " << from
                                                         << ": worker " << h.worker
                                                         << " is not below the "
                                                         << limits.workers << " workers");
  }
  if (h.shard >= limits.shards) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server " << name << " from rank " << from
                                                         << ": shard " << h.shard
                                                         << " is not below the "
                                                         << limits.shards << " shards");
  }
  uint64_t expected = 0;
  bool exact = true;
  if (payloadIsShard(h.type)) {
    expected = limits.shardBytes[h.shard];
  } else if (h.type == MessageType::kError) {
    exact = false;
    expected = limits.maxErrorBytes;
  }
  if (h.payloadBytes > limits.maxPayloadBytes ||
      (exact ? h.payloadBytes != expected : h.payloadBytes > expected)) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server "
                                         << name << " from rank " << from << " for shard "
                                         << h.shard << ": payload of " << h.payloadBytes
                                         << " bytes, expected "
                                         << (exact ? "" : "at most ") << expected
                                         << " (limit " << limits.maxPayloadBytes << ")");
  }
  return h;
}

}  // namespace kolo::ps
