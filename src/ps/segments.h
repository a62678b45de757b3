// How a shard's payload travels (docs/parameter_server.md, "Wire
// protocol"): as segments, one message each on kPayloadTag, in order.
//
// A piece of at least `directBytes` bytes is a segment of its own, sent
// straight from the tensor's memory and received straight into it (no
// copy on the worker); consecutive smaller pieces are one packed segment,
// gathered into (and scattered from) a buffer, since a message per small
// tensor would cost more than the copy. Segments cover the shard's flat
// vector in order, so a server receives and sends them at their offsets in
// its contiguous values.
//
// Contract
// - segmentsOf is a pure function of the shard's pieces and directBytes:
//   worker and server compute the same segments.
// - The transport receives messages of one tag from one sender in the
//   order sent, so posting the segments' receives in order matches them.
// - Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "ps/shard_map.h"

namespace kolo::ps {

// 256 KiB: below this a message's fixed cost outweighs a memcpy.
inline constexpr uint64_t kDirectBytes = uint64_t{1} << 18;

struct Segment {
  uint64_t shardOffset = 0;  // first element in the shard's flat vector
  uint64_t count = 0;        // elements
  bool direct = false;       // one piece, straight from / into the tensor
  size_t firstPiece = 0;     // index into the shard's pieces
  size_t pieces = 0;         // how many pieces it covers
};

std::vector<Segment> segmentsOf(const std::vector<Piece>& pieces,
                                uint64_t directBytes = kDirectBytes);

}  // namespace kolo::ps
