// How the parameters are sharded over the servers (docs/parameter_server.md,
// "Sharding").
//
// Contract
// - build(sizes, servers) is a pure function of its arguments: every worker
//   and server computes the same map from the same list, so no map is sent.
// - Every element of every tensor belongs to exactly one piece; a tensor
//   larger than the fair share ceil(total / servers) is split.
// - Errors: servers < 1, or a total that overflows, throw
//   Error(kInvalidArgument) naming the values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kolo::ps {

// `count` elements of tensor `tensor` from `offset`, stored in the shard at
// `shardOffset`.
struct Piece {
  size_t tensor = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t shardOffset = 0;
};

struct ShardMap {
  // shards[s]: the pieces of server s, in (tensor, offset) order.
  std::vector<std::vector<Piece>> shards;
  // Elements of each shard.
  std::vector<uint64_t> shardElements;

  static ShardMap build(const std::vector<uint64_t>& tensorElements, int servers);

  int servers() const { return static_cast<int>(shards.size()); }
};

}  // namespace kolo::ps
