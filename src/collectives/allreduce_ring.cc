// Ring allreduce: a reduce-scatter followed by an allgather around a ring,
// pipelined in chunks.
//
// Nomenclature: n ranks, rank r sends to r+1 and receives from r-1 (mod n).
// The vector is cut into n segments (blockOf: nearly equal, possibly empty).
//
//   reduce-scatter, steps s = 0..n-2: r sends segment r-s (its partial sum)
//     and receives segment r-s-1, which it reduces with its own copy of that
//     segment. After n-1 steps rank r holds the full reduction of segment r+1.
//   allgather, steps s = 0..n-2: r sends segment r+1-s (fully reduced) and
//     receives segment r-s, which it stores. After n-1 steps every rank holds
//     every segment.
//
// Each rank sends and receives 2(n-1)/n of the vector: bandwidth-optimal.
// The two phases run as one pipeline (ring_pipeline.h): a segment is cut
// into chunks, the next chunks' receives are posted before the current one
// is reduced, and each chunk is forwarded as soon as it is reduced or stored.
//
// Out of place, the first step reads `send` and writes `recv`, so there is
// no initial copy. A buffer region is overwritten in the allgather only by
// the final value of its segment, which exists only after the next rank has
// received every partial of that segment we sent, so no send still reads it.
#include <cstring>

#include "collectives/partition.h"
#include "collectives/registry.h"
#include "collectives/ring_pipeline.h"
#include "common/check.h"

namespace kolo::collectives {

void allreduceRing(Context& ctx, const AllreduceArgs& args) {
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  const size_t es = elementSize(args.dtype);
  if (n == 1 || args.count == 0) {
    if (args.send != args.recv && args.count > 0) {
      std::memcpy(args.recv, args.send, args.count * es);
    }
    return;
  }
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);

  RingPlan plan;
  plan.transport = &t;
  plan.next = mod(r + 1, n);
  plan.prev = mod(r - 1, n);
  plan.dtype = args.dtype;
  plan.op = args.op;
  const Block mine = blockOf(args.count, n, r);
  plan.first = send + mine.offset * es;
  plan.firstCount = mine.count;
  for (int s = 0; s < n - 1; ++s) {
    const Block b = blockOf(args.count, n, mod(r - s - 1, n));
    plan.steps.push_back({b.count, recv + b.offset * es, send + b.offset * es,
                          ctx.tag + static_cast<transport::Tag>(s)});
  }
  for (int s = 0; s < n - 1; ++s) {
    const Block b = blockOf(args.count, n, mod(r - s, n));
    plan.steps.push_back({b.count, recv + b.offset * es, nullptr,
                          ctx.tag + static_cast<transport::Tag>(n - 1 + s)});
  }
  runRing(plan);
}

}  // namespace kolo::collectives
