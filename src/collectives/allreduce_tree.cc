// Recursive-doubling allreduce ("tree"): the latency-oriented algorithm for
// small vectors, log2(p) steps each exchanging the whole vector.
//
// Nomenclature: n ranks fold into p = 2^k "new ranks" (partition.h, Fold):
// among the first 2*(n-p) ranks each even rank sends its vector to the odd
// rank above it, which reduces it in and takes part; the even one waits.
// In step j = 0..k-1, new rank q exchanges its whole partial vector with new
// rank q XOR 2^j and reduces. After k steps every new rank holds the full
// reduction; each odd folded rank then sends it to its even partner.
//
// Every reduction computes op(lower rank's data, higher rank's data), so
// both partners of a step produce bit-identical results and all ranks end
// with the same vector (also for floating point).
#include <cstring>
#include <memory>

#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/scratch.h"
#include "common/check.h"

namespace kolo::collectives {

void allreduceTree(Context& ctx, const AllreduceArgs& args) {
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  const size_t es = elementSize(args.dtype);
  const size_t bytes = args.count * es;
  if (args.send != args.recv && bytes > 0) std::memcpy(args.recv, args.send, bytes);
  if (n == 1 || bytes == 0) return;
  auto* buf = static_cast<uint8_t*>(args.recv);
  uint8_t* tmp = scratch(ScratchUse::kTree, bytes);

  const Fold fold = makeFold(r, n);
  const int partner = fold.partner(r);
  const transport::Tag foldTag = ctx.tag + kFoldInTag;
  const transport::Tag unfoldTag = ctx.tag + kFoldBackTag;
  const transport::Tag stepTag = ctx.tag + kFoldStepTag;
  if (sitOut(t, fold, ctx.tag, buf, bytes)) return;
  if (partner >= 0) {
    t.recv(partner, foldTag, tmp, bytes);
    reduce2(buf, tmp, buf, args.count, args.dtype, args.op);  // partner is lower
  }
  for (int mask = 1, j = 0; mask < fold.p; mask <<= 1, ++j) {
    const int peerNew = fold.newRank ^ mask;
    const int peer = fold.realRank(peerNew);
    t.sendRecv(peer, buf, bytes, peer, tmp, bytes,
               stepTag + static_cast<transport::Tag>(j));
    if (peerNew < fold.newRank) {
      reduce2(buf, tmp, buf, args.count, args.dtype, args.op);
    } else {
      reduce2(buf, buf, tmp, args.count, args.dtype, args.op);
    }
  }
  if (partner >= 0) t.send(partner, unfoldTag, buf, bytes);
}

}  // namespace kolo::collectives
