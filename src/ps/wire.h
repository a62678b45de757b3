// The parameter-server wire messages (docs/parameter_server.md, "Wire
// protocol"): one fixed 40-byte header, then an optional payload of
// exactly header.payloadBytes bytes on its own tag.
//
// Contract
// - encodeHeader writes the header little-endian into 40 bytes.
// - decodeHeader reads 40 bytes from another process and trusts none of
//   them: it checks the magic, the type, the worker and shard indices, and
//   the payload size against `limits` and, for typed payloads, against the
//   expected byte count. A violation throws Error(kMismatch) naming the
//   field, the sending rank and the expected and actual values. Nothing is
//   allocated before the checks pass.
// - Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ps/update_rule.h"

#include "transport/transport.h"

namespace kolo::ps {

inline constexpr uint32_t kMagic = 0x4b505331;  // "KPS1"
inline constexpr size_t kHeaderBytes = 40;
// Tags on the job's transport, far from the collectives' tag blocks.
inline constexpr transport::Tag kHeaderTag = 0x5053000000000001ull;
inline constexpr transport::Tag kPayloadTag = 0x5053000000000002ull;

enum class MessageType : uint16_t {
  kSeed = 1,
  kPush = 2,
  kPushReply = 3,
  kPull = 4,
  kPullReply = 5,
  kExchange = 6,
  kExchangeReply = 7,
  kBye = 8,
  kError = 9,
  kConfig = 10,
  kStats = 11,
  kStatsReply = 12,
  kSave = 13,
  kSaveReply = 14,
  kLoad = 15,
  kLoadReply = 16,
  kStop = 17,
  kStopReply = 18,
};
inline constexpr uint16_t kLastMessageType = 18;

// kPushReply flags bit 0: the push was too stale and was not applied.
inline constexpr uint16_t kFlagRejectedStale = 1;
// kLoad flags: none = read, check and stage the file; commit = apply the
// staged file; abort = drop it (docs/parameter_server.md, "Checkpoints").
inline constexpr uint16_t kFlagLoadCommit = 1;
inline constexpr uint16_t kFlagLoadAbort = 2;
// Any server reply: a worker asked the job to stop training (kStop) and the
// shard has reached the version where it stops (docs/parameter_server.md,
// "Validation").
inline constexpr uint16_t kFlagStop = 0x8000;
// Any server reply: every trainer (a worker that is not a validator) has
// finished; validators end their loop.
inline constexpr uint16_t kFlagTrainingOver = 0x4000;
// kError: the server stopped serving because a worker was lost (the text
// names it); the worker's error is kPeerLost.
inline constexpr uint16_t kFlagErrorPeerLost = 1;

const char* messageTypeName(MessageType t);

// kSeed, kPush, kPullReply, kExchange, kExchangeReply: the payload is the
// shard's floats, sent as its segments (segments.h).
bool isShardPayload(MessageType t);

struct Header {
  MessageType type = MessageType::kPull;
  uint16_t flags = 0;
  uint32_t worker = 0;
  uint32_t shard = 0;
  uint64_t version = 0;
  uint64_t payloadBytes = 0;
  float lr = 0.0f;
};

using HeaderBytes = std::array<uint8_t, kHeaderBytes>;

// What a decoder accepts. shardBytes[s] is shard s's size in bytes (floats),
// the exact payload of kSeed, kPush, kPullReply, kExchange, kExchangeReply;
// null before the configuration is known, when those messages are refused.
// kStatsReply carries exactly statsBytes(workers).
struct WireLimits {
  uint32_t workers = 0;
  const uint64_t* shardBytes = nullptr;  // one per shard, or null
  uint32_t shards = 0;
  uint64_t maxPayloadBytes = uint64_t{1} << 34;  // 16 GiB
  uint64_t maxErrorBytes = 4096;                 // kError text
  uint64_t maxConfigBytes = 1 << 20;             // kConfig
  uint64_t maxPathBytes = 4096;                  // kSave; kLoad adds a digest
};

// kSaveReply: the SHA-256 of the shard file written; kLoad: that digest,
// then the file's path.
inline constexpr uint64_t kDigestBytes = 32;

inline uint64_t statsBytes(uint32_t workers) {
  return (4 + 2 * uint64_t{workers}) * 8;
}

HeaderBytes encodeHeader(const Header& h);

// `from`: the job rank the bytes came from, for the error message.
Header decodeHeader(const uint8_t* bytes, size_t size, const WireLimits& limits,
                    int from);

// ---- the configuration (kConfig payload) --------------------------------------

enum class Mode : uint8_t { kSync = 0, kDownpour = 1, kEasgd = 2 };

// "sync", "downpour", "easgd"; anything else is Error(kInvalidArgument)
// naming the supported modes.
Mode parseMode(const std::string& name);
const char* modeName(Mode m);

// What every worker sends every server before its first message: the mode,
// its knobs, the optimizer and the parameter sizes (so each side builds the
// same ShardMap). Servers take the first one and refuse a different one.
struct PsConfig {
  Mode mode = Mode::kSync;
  int32_t stalenessBound = 0;  // downpour
  int32_t backupWorkers = 0;   // sync
  float easgdAlpha = 0.5f;     // easgd
  // Workers that push (with groups, the group leaders: docs/
  // parameter_server.md, "Groups"); 0: every worker. A sync round applies
  // once pushers - backupWorkers have pushed.
  int32_t pushers = 0;
  // Validating workers (kolorun --validators V): the last V worker indices.
  // They pull and never push; the others are the trainers, and a sync
  // round applies once trainers - backupWorkers have pushed. Not with groups.
  int32_t validators = 0;
  OptimizerConfig optimizer;  // sync, downpour
  std::vector<uint64_t> tensorElements;

  bool operator==(const PsConfig& o) const;
};

// Throws Error(kInvalidArgument) naming the value and what is accepted:
// negative staleness bound, pushers outside [0, workers], backup workers
// outside [0, pushers) (pushers 0 counting as workers), alpha
// outside (0, 1], an optimizer torch would reject.
void validate(const PsConfig& c, int workers);

// The workers that push: the group leaders, or the workers less the
// validators.
int trainers(const PsConfig& c, int workers);

std::vector<uint8_t> encodeConfig(const PsConfig& c);
// Checks the size against the tensor count it states (at most maxTensors)
// and every enumeration; Error(kMismatch) naming the sender otherwise.
PsConfig decodeConfig(const uint8_t* bytes, size_t size, int from,
                      uint32_t maxTensors = 1 << 20);

}  // namespace kolo::ps
