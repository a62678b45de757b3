// Checkpoints of the parameter servers (docs/parameter_server.md,
// "Checkpoints"): one file per shard, written by its server, and a manifest
// written by the worker that asked for the save.
//
// Contract
// - A checkpoint is a directory. Its manifest (`manifest.kps`, text) names
//   the mode, the optimizer, the number of servers, every tensor's size,
//   the shard map's pieces, and per shard its file, element count, version
//   and SHA-256. Shard files are named `shard-<s>-of-<S>.<id>.kps`, with an
//   id fresh for each save, so a save never overwrites the files the
//   current manifest names.
// - Every file is written to a temporary name in the same directory,
//   flushed to disk (fsync) and renamed: a reader sees a whole file or the
//   previous one. The manifest is renamed last: it is the commit point, so
//   a save interrupted at any moment leaves the previous checkpoint whole.
// - A shard file is a fixed header, the values and the optimizer state
//   (little-endian floats), and a SHA-256 of everything before it. Reading
//   checks the size against the header (a shorter file is "torn"), the
//   checksum, the digest the manifest names, and the shard index, shard
//   count and element count the reader expects; any difference is an
//   Error(kMismatch) naming the file, the field and both values. A missing
//   file is Error(kIo) naming it.
// - Pure functions apart from the files they name; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "ps/shard_map.h"
#include "ps/update_rule.h"
#include "ps/wire.h"

namespace kolo::ps {

// What one server saves of its shard.
struct ShardState {
  uint32_t shard = 0;
  uint32_t shards = 0;
  Mode mode = Mode::kSync;
  bool hasRule = false;  // sync and downpour: the optimizer's state follows
  OptimizerKind kind = OptimizerKind::kSgd;
  uint64_t version = 0;
  uint64_t updates = 0;
  UpdateRule::State rule;
  std::vector<float> values;
};

// Writes `file` atomically; returns the SHA-256 the file ends with.
Digest writeShardFile(const std::string& file, const ShardState& s);

// Reads and checks `file` (see the contract). `expected`: the digest the
// manifest names, or null.
ShardState readShardFile(const std::string& file, const Digest* expected, uint32_t shard,
                         uint32_t shards, uint64_t elements);

struct ManifestShard {
  std::string file;  // name inside the checkpoint directory
  uint64_t elements = 0;
  uint64_t version = 0;
  Digest digest{};
  std::vector<Piece> pieces;  // the shard map's pieces of this shard
};

struct Manifest {
  Mode mode = Mode::kSync;
  std::string optimizer;  // optimizerKindName, or "none" for easgd
  std::vector<uint64_t> tensorElements;
  std::vector<ManifestShard> shards;  // by server index
};

std::string shardFileName(uint32_t shard, uint32_t shards, const std::string& id);
std::string manifestPath(const std::string& dir);

// Creates `dir` (and its parents) when missing; Error(kIo) naming it.
void makeCheckpointDirectory(const std::string& dir);
// Writes dir/manifest.kps atomically (the commit point).
void writeManifest(const std::string& dir, const Manifest& m);
// Error(kIo) when missing, Error(kMismatch) naming the line when malformed.
Manifest readManifest(const std::string& dir);
// The manifest against this job: mode, optimizer, server count, tensor
// count and sizes, and the shard map built from them; Error(kMismatch)
// naming the checkpoint, every field that differs and both values.
void checkManifest(const Manifest& m, const std::string& dir, const PsConfig& config,
                   int servers);
// Removes shard files in `dir` that `m` does not name (left by earlier
// saves). Best effort: errors are ignored.
void removeStaleShardFiles(const std::string& dir, const Manifest& m);

}  // namespace kolo::ps
