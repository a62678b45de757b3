// The LPT (longest processing time first) rule over pieces: the pieces are
// placed largest first, each on the server that holds the fewest elements so
// far. Splitting tensors above the fair share F = ceil(total / S) first keeps
// every piece at most F, so the largest shard stays close to F.
#include "ps/shard_map.h"

#include <algorithm>
#include <limits>

#include "common/check.h"

namespace kolo::ps {

ShardMap ShardMap::build(const std::vector<uint64_t>& tensorElements, int servers) {
  if (servers < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "a shard map needs at least 1 server, got " << servers);
  }
  uint64_t total = 0;
  for (uint64_t n : tensorElements) {
    if (n > std::numeric_limits<uint64_t>::max() - total) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "parameter sizes overflow: total above " << total);
    }
    total += n;
  }
  const uint64_t share = std::max<uint64_t>(1, (total + servers - 1) / servers);

  // 1. Cut: a tensor larger than the share becomes k nearly equal pieces.
  std::vector<Piece> pieces;
  for (size_t t = 0; t < tensorElements.size(); ++t) {
    const uint64_t n = tensorElements[t];
    if (n == 0) continue;
    const uint64_t k = (n + share - 1) / share;
    uint64_t offset = 0;
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t count = n / k + (i < n % k ? 1 : 0);
      pieces.push_back(Piece{t, offset, count, 0});
      offset += count;
    }
  }
  // 2. Place largest first (ties: tensor, then offset) on the lightest server
  //    (ties: the lower index).
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return pieces[a].count > pieces[b].count; });
  ShardMap map;
  map.shards.resize(servers);
  map.shardElements.assign(servers, 0);
  for (size_t i : order) {
    const auto lightest =
        std::min_element(map.shardElements.begin(), map.shardElements.end());
    const size_t s = static_cast<size_t>(lightest - map.shardElements.begin());
    map.shards[s].push_back(pieces[i]);
    *lightest += pieces[i].count;
  }
  // 3. Within a shard, pieces in (tensor, offset) order, packed.
  for (auto& shard : map.shards) {
    std::sort(shard.begin(), shard.end(), [](const Piece& a, const Piece& b) {
      return a.tensor != b.tensor ? a.tensor < b.tensor : a.offset < b.offset;
    });
    uint64_t at = 0;
    for (auto& p : shard) {
      p.shardOffset = at;
      at += p.count;
    }
  }
  return map;
}

}  // namespace kolo::ps
