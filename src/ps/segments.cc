// One pass over the pieces in shard order: a large piece closes the packed
// run before it and is a segment alone; small pieces extend the run.
#include "ps/segments.h"

namespace kolo::ps {

std::vector<Segment> segmentsOf(const std::vector<Piece>& pieces, uint64_t directBytes) {
  std::vector<Segment> out;
  bool packing = false;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    if (p.count == 0) continue;
    if (p.count * sizeof(float) >= directBytes) {
      out.push_back({p.shardOffset, p.count, true, k, 1});
      packing = false;
      continue;
    }
    if (!packing) {
      out.push_back({p.shardOffset, 0, false, k, 0});
      packing = true;
    }
    out.back().count += p.count;
    out.back().pieces = k + 1 - out.back().firstPiece;
  }
  return out;
}

}  // namespace kolo::ps
