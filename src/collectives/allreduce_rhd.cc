// Recursive halving-doubling allreduce ("rhd", Rabenseifner's algorithm):
// for medium vectors, log2(p) steps like recursive doubling but moving only
// 2(p-1)/p of the vector like the ring.
//
// Nomenclature: n ranks fold into p = 2^k new ranks (partition.h, Fold), and
// the vector is cut into p blocks (blockOf). Each new rank q keeps a window
// of blocks, initially all p.
//
//   reduce-scatter by recursive vector halving, for mask = p/2, p/4, .., 1:
//     the partner is q XOR mask; the window is halved, q keeps the lower
//     half when (q & mask) == 0 and the upper half otherwise, sends the
//     half it gives up and reduces the partner's copy of the half it keeps.
//     After k steps q's window is block q, fully reduced.
//   allgather by recursive doubling, for mask = 1, 2, .., p/2: q sends its
//     window to q XOR mask and receives the partner's (adjacent) window;
//     the window doubles. After k steps every new rank holds every block.
//
// Folded-out ranks get the result from their odd partner at the end.
// Reductions compute op(lower rank's data, higher rank's data); each block's
// final value is computed on one rank only and copied to the others.
#include <cstring>
#include <memory>

#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/scratch.h"
#include "common/check.h"

namespace kolo::collectives {

void allreduceHalvingDoubling(Context& ctx, const AllreduceArgs& args) {
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  const size_t es = elementSize(args.dtype);
  const size_t count = args.count;
  const size_t bytes = count * es;
  if (args.send != args.recv && bytes > 0) std::memcpy(args.recv, args.send, bytes);
  if (n == 1 || bytes == 0) return;
  auto* buf = static_cast<uint8_t*>(args.recv);

  const Fold fold = makeFold(r, n);
  const int partner = fold.partner(r);
  const transport::Tag foldTag = ctx.tag + kFoldInTag;
  const transport::Tag unfoldTag = ctx.tag + kFoldBackTag;
  const transport::Tag stepTag = ctx.tag + kFoldStepTag;
  if (sitOut(t, fold, ctx.tag, buf, bytes)) return;
  // The largest amount received at once: the whole vector when folding,
  // else half of it (rounded up to whole blocks).
  const size_t tmpBytes =
      partner >= 0 ? bytes : blockRange(count, fold.p, 0, fold.p / 2).count * es;
  uint8_t* tmp = scratch(ScratchUse::kHalvingDoubling, tmpBytes + 1);
  if (partner >= 0) {
    t.recv(partner, foldTag, tmp, bytes);
    reduce2(buf, tmp, buf, count, args.dtype, args.op);  // partner is lower
  }

  const int q = fold.newRank;
  const int p = fold.p;
  int lo = 0, hi = p;
  transport::Tag tag = stepTag;
  for (int mask = p / 2; mask >= 1; mask /= 2, ++tag) {
    const int peerNew = q ^ mask;
    const int peer = fold.realRank(peerNew);
    const int mid = lo + (hi - lo) / 2;
    const bool keepLower = (q & mask) == 0;
    const Block keep =
        keepLower ? blockRange(count, p, lo, mid) : blockRange(count, p, mid, hi);
    const Block give =
        keepLower ? blockRange(count, p, mid, hi) : blockRange(count, p, lo, mid);
    exchange(t, peer, buf + give.offset * es, give.count * es, tmp, keep.count * es, tag);
    uint8_t* mine = buf + keep.offset * es;
    if (keep.count > 0) {
      if (peerNew < q) {
        reduce2(mine, tmp, mine, keep.count, args.dtype, args.op);
      } else {
        reduce2(mine, mine, tmp, keep.count, args.dtype, args.op);
      }
    }
    if (keepLower) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  for (int mask = 1; mask < p; mask *= 2, ++tag) {
    const int peerNew = q ^ mask;
    const int peer = fold.realRank(peerNew);
    const int peerLo = lo ^ mask;  // windows are aligned to their size
    const Block mine = blockRange(count, p, lo, hi);
    const Block theirs = blockRange(count, p, peerLo, peerLo + (hi - lo));
    exchange(t, peer, buf + mine.offset * es, mine.count * es, buf + theirs.offset * es,
             theirs.count * es, tag);
    lo = std::min(lo, peerLo);
    hi = lo + 2 * mask;
  }
  if (partner >= 0) t.send(partner, unfoldTag, buf, bytes);
}

}  // namespace kolo::collectives
