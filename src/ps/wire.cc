// Encoding is explicit field by field (little-endian, common/byte_codec.h),
// so the layout does not depend on the compiler's struct padding or the
// host's byte order. Fixed layouts are written at their offsets after the
// caller checked the size.
#include "ps/wire.h"

#include "common/byte_codec.h"
#include "common/check.h"

namespace kolo::ps {
namespace {

// Every parameter-server message is little endian.
constexpr ByteOrder kOrder = ByteOrder::kLittle;

template <typename T>
void put(uint8_t* p, T v) {
  storeBytes<T>(p, v, kOrder);
}

template <typename T>
T get(const uint8_t* p) {
  return loadBytes<T>(p, kOrder);
}

}  // namespace

bool isShardPayload(MessageType t) {
  return t == MessageType::kSeed || t == MessageType::kPush ||
         t == MessageType::kPullReply || t == MessageType::kExchange ||
         t == MessageType::kExchangeReply;
}

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
    case MessageType::kConfig: return "config";
    case MessageType::kStats: return "stats";
    case MessageType::kStatsReply: return "stats-reply";
    case MessageType::kSave: return "save";
    case MessageType::kSaveReply: return "save-reply";
    case MessageType::kLoad: return "load";
    case MessageType::kLoadReply: return "load-reply";
    case MessageType::kStop: return "stop";
    case MessageType::kStopReply: return "stop-reply";
  }
  return "unknown";
}

HeaderBytes encodeHeader(const Header& h) {
  HeaderBytes b{};
  put<uint32_t>(&b[0], kMagic);
  put<uint16_t>(&b[4], static_cast<uint16_t>(h.type));
  put<uint16_t>(&b[6], h.flags);
  put<uint32_t>(&b[8], h.worker);
  put<uint32_t>(&b[12], h.shard);
  put<uint64_t>(&b[16], h.version);
  put<uint64_t>(&b[24], h.payloadBytes);
  put<float>(&b[32], h.lr);
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
  if (type < 1 || type > kLastMessageType) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter-server header from rank "
                                         << from << ": unknown message type " << type
                                         << " (expected 1.." << kLastMessageType << ")");
  }
  h.type = static_cast<MessageType>(type);
  h.flags = get<uint16_t>(bytes + 6);
  h.worker = get<uint32_t>(bytes + 8);
  h.shard = get<uint32_t>(bytes + 12);
  h.version = get<uint64_t>(bytes + 16);
  h.payloadBytes = get<uint64_t>(bytes + 24);
  h.lr = get<float>(bytes + 32);
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
  if (isShardPayload(h.type)) {
    if (limits.shardBytes == nullptr) {
      KOLO_THROW(ErrorCode::kMismatch, "parameter-server "
                                           << name << " from rank " << from
                                           << " before any configuration");
    }
    expected = limits.shardBytes[h.shard];
  } else if (h.type == MessageType::kError) {
    exact = false;
    expected = limits.maxErrorBytes;
  } else if (h.type == MessageType::kConfig) {
    exact = false;
    expected = limits.maxConfigBytes;
  } else if (h.type == MessageType::kStatsReply) {
    expected = statsBytes(limits.workers);
  } else if (h.type == MessageType::kSave) {
    exact = false;
    expected = limits.maxPathBytes;
  } else if (h.type == MessageType::kLoad) {
    exact = false;
    expected = kDigestBytes + limits.maxPathBytes;
  } else if (h.type == MessageType::kSaveReply) {
    expected = kDigestBytes;
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

// ---- configuration ------------------------------------------------------------

Mode parseMode(const std::string& name) {
  if (name == "sync") return Mode::kSync;
  if (name == "downpour") return Mode::kDownpour;
  if (name == "easgd") return Mode::kEasgd;
  KOLO_THROW(ErrorCode::kInvalidArgument, "unknown parameter-server mode '"
                                              << name
                                              << "' (supported: sync, downpour, easgd)");
}

const char* modeName(Mode m) {
  switch (m) {
    case Mode::kSync: return "sync";
    case Mode::kDownpour: return "downpour";
    case Mode::kEasgd: return "easgd";
  }
  return "?";
}

bool PsConfig::operator==(const PsConfig& o) const {
  return encodeConfig(*this) == encodeConfig(o);
}

int trainers(const PsConfig& c, int workers) {
  return c.pushers > 0 ? c.pushers : workers - c.validators;
}

void validate(const PsConfig& c, int workers) {
  if (c.stalenessBound < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "staleness_bound=" << c.stalenessBound << " (expected a value >= 0)");
  }
  if (c.pushers < 0 || c.pushers > workers) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "parameter-server groups: " << c.pushers << " pushing leaders for "
                                           << workers << " workers");
  }
  if (c.validators < 0 || c.validators >= workers) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_VALIDATORS=" << c.validators << " with " << workers
                                  << " workers (at least one worker must train)");
  }
  if (c.validators > 0 && c.pushers > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "validator ranks (KOLO_VALIDATORS="
                                                << c.validators
                                                << ") and groups (group_size) together "
                                                   "are not supported");
  }
  const int pushers = trainers(c, workers);
  if (c.backupWorkers < 0 || c.backupWorkers >= pushers) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "backup_workers=" << c.backupWorkers << " (expected 0 <= value < "
                                 << pushers
                                 << (c.pushers == 0 ? ", the number of workers)"
                                                    : ", the number of groups)"));
  }
  if (!(c.easgdAlpha > 0.0f && c.easgdAlpha <= 1.0f)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "easgd_alpha=" << c.easgdAlpha << " (expected 0 < alpha <= 1)");
  }
  validate(c.optimizer);
}

namespace {

constexpr size_t kConfigFixedBytes = 60;

}  // namespace

// Layout: u8 mode, u8 optimizer kind, u8 nesterov, u8 centered, i32 bound,
// i32 backup, f32 alpha, f32 x8 (lr, weight decay, momentum, dampening,
// beta1, beta2, eps, rmsprop alpha), u32 tensor count, i32 pushers, i32
// validators, u64 x count sizes.
std::vector<uint8_t> encodeConfig(const PsConfig& c) {
  std::vector<uint8_t> b(kConfigFixedBytes + 8 * c.tensorElements.size());
  const OptimizerConfig& o = c.optimizer;
  b[0] = static_cast<uint8_t>(c.mode);
  b[1] = static_cast<uint8_t>(o.kind);
  b[2] = o.nesterov ? 1 : 0;
  b[3] = o.centered ? 1 : 0;
  put<uint32_t>(&b[4], static_cast<uint32_t>(c.stalenessBound));
  put<uint32_t>(&b[8], static_cast<uint32_t>(c.backupWorkers));
  const float floats[] = {c.easgdAlpha, o.lr,    o.weightDecay, o.momentum, o.dampening,
                          o.beta1,      o.beta2, o.eps,         o.alpha};
  for (size_t i = 0; i < 9; ++i) put<float>(&b[12 + 4 * i], floats[i]);
  put<uint32_t>(&b[48], static_cast<uint32_t>(c.tensorElements.size()));
  put<uint32_t>(&b[52], static_cast<uint32_t>(c.pushers));
  put<uint32_t>(&b[56], static_cast<uint32_t>(c.validators));
  for (size_t i = 0; i < c.tensorElements.size(); ++i) {
    put<uint64_t>(&b[kConfigFixedBytes + 8 * i], c.tensorElements[i]);
  }
  return b;
}

PsConfig decodeConfig(const uint8_t* b, size_t size, int from, uint32_t maxTensors) {
  auto bad = [&](const std::string& what) {
    KOLO_THROW(ErrorCode::kMismatch,
               "parameter-server config from rank " << from << ": " << what);
  };
  if (size < kConfigFixedBytes) {
    bad(std::to_string(size) + " bytes, expected at least " +
        std::to_string(kConfigFixedBytes));
  }
  const uint32_t count = get<uint32_t>(b + 48);
  if (count > maxTensors) {
    bad(std::to_string(count) + " tensors, limit " + std::to_string(maxTensors));
  }
  if (size != kConfigFixedBytes + 8 * uint64_t{count}) {
    bad(std::to_string(size) + " bytes for " + std::to_string(count) +
        " tensors, expected " + std::to_string(kConfigFixedBytes + 8 * uint64_t{count}));
  }
  if (b[0] > static_cast<uint8_t>(Mode::kEasgd)) bad("mode " + std::to_string(b[0]));
  if (b[1] > static_cast<uint8_t>(OptimizerKind::kRmsprop)) {
    bad("optimizer " + std::to_string(b[1]));
  }
  if (b[2] > 1 || b[3] > 1) bad("flags other than 0 or 1");
  PsConfig c;
  OptimizerConfig& o = c.optimizer;
  c.mode = static_cast<Mode>(b[0]);
  o.kind = static_cast<OptimizerKind>(b[1]);
  o.nesterov = b[2] == 1;
  o.centered = b[3] == 1;
  c.stalenessBound = static_cast<int32_t>(get<uint32_t>(b + 4));
  c.backupWorkers = static_cast<int32_t>(get<uint32_t>(b + 8));
  c.pushers = static_cast<int32_t>(get<uint32_t>(b + 52));
  c.validators = static_cast<int32_t>(get<uint32_t>(b + 56));
  float* floats[] = {&c.easgdAlpha, &o.lr,    &o.weightDecay, &o.momentum, &o.dampening,
                     &o.beta1,      &o.beta2, &o.eps,         &o.alpha};
  for (size_t i = 0; i < 9; ++i) *floats[i] = get<float>(b + 12 + 4 * i);
  c.tensorElements.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    c.tensorElements[i] = get<uint64_t>(b + kConfigFixedBytes + 8 * i);
  }
  return c;
}

}  // namespace kolo::ps
