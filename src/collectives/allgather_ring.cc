// Ring allgather with a count per rank (equal counts are the special case).
//
// Nomenclature: n ranks, block i = counts[i] elements from rank i, placed at
// displs[i] = counts[0] + ... + counts[i-1] in `recv`. Rank r first sends its
// own block; in step s = 0..n-2 it receives block r-s-1 from r-1 straight
// into its place in `recv` and (pipelined, chunk by chunk) forwards it to
// r+1. Empty blocks cost no message.
//
// In place: `send` points at recv + displs[r]; otherwise the own block is
// first copied into its place in `recv`.
#include <cstring>

#include "collectives/partition.h"
#include "collectives/registry.h"
#include "collectives/ring_pipeline.h"
#include "common/check.h"

namespace kolo::collectives {

void allgatherRing(Context& ctx, const AllgatherArgs& args) {
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  KOLO_CHECK_EQ(args.counts.size(), static_cast<size_t>(n));
  const size_t es = elementSize(args.dtype);
  std::vector<size_t> displs(n + 1, 0);
  for (int i = 0; i < n; ++i) displs[i + 1] = displs[i] + args.counts[i];
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);
  uint8_t* own = recv + displs[r] * es;
  if (send != own && args.counts[r] > 0) {
    std::memmove(own, send, args.counts[r] * es);
  }
  if (n == 1) return;

  RingPlan plan;
  plan.transport = &t;
  plan.next = mod(r + 1, n);
  plan.prev = mod(r - 1, n);
  plan.dtype = args.dtype;
  plan.first = own;
  plan.firstCount = args.counts[r];
  for (int s = 0; s < n - 1; ++s) {
    const int b = mod(r - s - 1, n);
    plan.steps.push_back({args.counts[b], recv + displs[b] * es, nullptr,
                          ctx.tag + static_cast<transport::Tag>(s)});
  }
  runRing(plan);
}

}  // namespace kolo::collectives
