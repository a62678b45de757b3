// Ring reduce-scatter: the first half of the ring allreduce, arranged so
// that rank r ends with block r.
//
// Nomenclature: n ranks, block i = elements [i*recvCount, (i+1)*recvCount)
// of `send`. Rank r first sends its own copy of block r-1; in step
// s = 0..n-2 it receives the partial sum of block r-s-2 from r-1, reduces
// its own copy of that block into it and (pipelined, chunk by chunk) passes
// it on. The partial of step n-2 is block r, complete: it lands in `recv`.
//
// Intermediate partials live in two scratch blocks used alternately; before
// step s overwrites the block of step s-2, the sends forwarding that
// block's contents are waited for.
#include <cstring>
#include <memory>

#include "collectives/partition.h"
#include "collectives/registry.h"
#include "collectives/ring_pipeline.h"
#include "common/check.h"

namespace kolo::collectives {

void reduceScatterRing(Context& ctx, const ReduceScatterArgs& args) {
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  const size_t es = elementSize(args.dtype);
  const size_t bytes = args.recvCount * es;
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);
  if (bytes == 0) return;
  if (n == 1) {
    if (send != recv) std::memmove(recv, send, bytes);
    return;
  }

  // The receive scratch must not alias `send` (it is read throughout); with
  // recv inside send, the final step would overwrite a block still read, so
  // stage the result.
  const bool recvInSend = recv < send + n * bytes && send < recv + bytes;
  std::unique_ptr<uint8_t[]> scratch(
      new uint8_t[(n > 2 ? 2 : 0) * bytes + (recvInSend ? bytes : 0) + 1]);
  uint8_t* slots[2] = {scratch.get(), scratch.get() + bytes};
  uint8_t* out = recvInSend ? scratch.get() + (n > 2 ? 2 : 0) * bytes : recv;

  RingPlan plan;
  plan.transport = &t;
  plan.next = mod(r + 1, n);
  plan.prev = mod(r - 1, n);
  plan.dtype = args.dtype;
  plan.op = args.op;
  plan.first = send + static_cast<size_t>(mod(r - 1, n)) * bytes;
  plan.firstCount = args.recvCount;
  for (int s = 0; s < n - 1; ++s) {
    const size_t block = static_cast<size_t>(mod(r - s - 2, n));
    const bool last = s == n - 2;
    RingStep step{args.recvCount, last ? out : slots[s % 2], send + block * bytes,
                  ctx.tag + static_cast<transport::Tag>(s)};
    if (!last && s >= 2) step.reuses = s - 2;
    plan.steps.push_back(step);
  }
  runRing(plan);
  if (out != recv) std::memcpy(recv, out, bytes);
}

}  // namespace kolo::collectives
