// Hierarchical allreduce ("hier") for ranks spread over several hosts: a
// schedule of flat collectives over the host's group (ctx.local, shared
// memory) and the group of local rank 0s (ctx.cross, the network).
//
//   1. reduce inside the host to local rank 0, into `recv`:
//        small vectors: binomial tree (ceil(log2 L) steps, whole vector);
//        large vectors: pipelined ring reduce-scatter (local rank q ends with
//        segment q+1 reduced) then a gather of the segments to local rank 0,
//        so each rank sends about one vector's worth instead of log2 L;
//   2. local rank 0 of every host allreduces across hosts over ctx.cross,
//      with the flat algorithm the selection picks for the size (one rank
//      per host: AllreduceSelector::crossHosts);
//   3. broadcast inside the host from local rank 0 (pipelined binomial).
//
// Only one rank per host sends across hosts, so the slow links carry each
// byte 2(H-1)/H times however many ranks a host has.
//
// Hosts may hold different numbers of ranks: only local rank 0 uses
// ctx.cross, which must then be the group of all local rank 0s (the group
// of ranks with the same local rank, built for every local rank that
// exists). Other ranks never touch their ctx.cross.
//
// Tags: step 1 uses ctx.tag + [0, kTagsPerOp/8), step 2 the next eighth,
// step 3 the third (the groups share one parent transport). The upper half
// of the block stays free for the caller's argument check.
#include <cstring>
#include <memory>

#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/ring_pipeline.h"
#include "collectives/selection.h"
#include "common/check.h"

namespace kolo::collectives {
namespace {

// Up to this size the local reduction is a binomial tree.
constexpr size_t kLocalTreeBytes = 64 * 1024;

// Binomial reduce to rank 0 of `t`, accumulating in buf (which holds this
// rank's contribution). Non-root ranks' buf is left with partial results.
void reduceBinomial(transport::Transport& t, transport::Tag tag, uint8_t* buf,
                    size_t count, DataType dtype, ReduceOp op) {
  const int n = t.size();
  const int r = t.rank();
  const size_t bytes = count * elementSize(dtype);
  std::unique_ptr<uint8_t[]> tmp;
  for (int mask = 1; mask < n; mask <<= 1, ++tag) {
    if (r & mask) {
      t.send(r - mask, tag, buf, bytes);
      return;
    }
    if (r + mask < n) {
      if (!tmp) tmp.reset(new uint8_t[bytes]);
      t.recv(r + mask, tag, tmp.get(), bytes);
      reduce2(buf, buf, tmp.get(), count, dtype, op);  // lower rank first
    }
  }
}

// Ring reduce-scatter (like allreduceRing's first half) then a gather of
// the reduced segments to rank 0 of `t`. Reads send, writes recv.
void reduceRingGather(transport::Transport& t, transport::Tag tag, const uint8_t* send,
                      uint8_t* recv, size_t count, DataType dtype, ReduceOp op) {
  const int n = t.size();
  const int r = t.rank();
  const size_t es = elementSize(dtype);
  RingPlan plan;
  plan.transport = &t;
  plan.next = mod(r + 1, n);
  plan.prev = mod(r - 1, n);
  plan.dtype = dtype;
  plan.op = op;
  const Block mine = blockOf(count, n, r);
  plan.first = send + mine.offset * es;
  plan.firstCount = mine.count;
  for (int s = 0; s < n - 1; ++s) {
    const Block b = blockOf(count, n, mod(r - s - 1, n));
    plan.steps.push_back({b.count, recv + b.offset * es, send + b.offset * es,
                          tag + static_cast<transport::Tag>(s)});
  }
  runRing(plan);

  const transport::Tag gatherTag = tag + static_cast<transport::Tag>(n);
  if (r != 0) {
    const Block owned = blockOf(count, n, mod(r + 1, n));
    if (owned.count > 0) t.send(0, gatherTag, recv + owned.offset * es, owned.count * es);
    return;
  }
  std::vector<transport::RequestPtr> recvs;
  for (int q = 1; q < n; ++q) {
    const Block owned = blockOf(count, n, mod(q + 1, n));
    if (owned.count > 0) {
      recvs.push_back(t.irecv(q, gatherTag, recv + owned.offset * es, owned.count * es));
    }
  }
  t.waitAll(recvs);
}

}  // namespace

void allreduceHierarchical(Context& ctx, const AllreduceArgs& args) {
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  KOLO_CHECK(ctx.local != nullptr);
  transport::Transport& local = *ctx.local;
  const size_t es = elementSize(args.dtype);
  const size_t bytes = args.count * es;
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);
  if (bytes == 0) return;

  const transport::Tag localTag = ctx.tag;
  const transport::Tag crossTag = ctx.tag + kTagsPerOp / 8;
  const transport::Tag bcastTag = ctx.tag + 2 * (kTagsPerOp / 8);

  // 1. Reduce to local rank 0.
  if (local.size() == 1 || bytes <= kLocalTreeBytes) {
    if (send != recv) std::memcpy(recv, send, bytes);
    if (local.size() > 1) {
      reduceBinomial(local, localTag, recv, args.count, args.dtype, args.op);
    }
  } else {
    reduceRingGather(local, localTag, send, recv, args.count, args.dtype, args.op);
  }

  // 2. Allreduce across hosts among local rank 0s.
  if (local.rank() == 0) {
    KOLO_CHECK(ctx.cross != nullptr);
    if (ctx.cross->size() > 1) {
      Context cross{*ctx.cross, ctx.layout};
      cross.tag = crossTag;
      cross.selector = ctx.selector != nullptr ? ctx.selector->crossHosts() : nullptr;
      const AllreduceAlgorithm& algo = selectAllreduce(bytes, cross);
      algo.run(cross, AllreduceArgs{recv, recv, args.count, args.dtype, args.op});
    }
  }

  // 3. Broadcast inside the host.
  if (local.size() > 1) {
    Context host{local, ctx.layout};
    host.tag = bcastTag;
    broadcastBinomial(host, BroadcastArgs{recv, args.count, args.dtype, 0});
  }
}

}  // namespace kolo::collectives
