// Allreduce among the ranks of one host, in place in shared memory.
//
// Message-passing allreduce moves each byte through several copies (into a
// ring buffer, out of it, reduce, copy back). Here every rank can read every
// other rank's staging buffer directly, so the data moves as little as a
// reduction allows. For each pipeline step (one chunk of at most slotBytes
// per rank, staging slots alternating by step parity):
//
//   1. copy-in   each rank copies its chunk of `send` into its staging slot,
//                all but its own slice (no other rank reads that), and
//                publishes "arrived = step" (counter 0);
//   2. reduce    after all arrived, rank r reduces slice r of the chunk out
//                of the others' staging slots and its own `send`, straight
//                into its `recv`, copies the result into its own staging
//                slot for the others and publishes "reduced = step"
//                (counter 1);
//   3. copy-out  for every other rank q, once q reduced, copy slice q from
//                q's staging slot into `recv`.
//
// Per rank and byte: one copy in of the others' slices, one read of the n
// slices, one write of the own reduced slice (twice), one copy out of the
// others' slices. With 2 ranks that is 4 passes over the vector's bytes
// where staging the own slice too took 5. In place (send == recv) works:
// the own slice of `send` is read only by its own reduction, element by
// element, and the other slices are staged before any copy-out writes
// them. Small chunks skip phases 2-3: every rank stages and reduces the
// whole chunk itself, which is one synchronisation instead of two.
//
// Reuse of a staging slot two steps later is safe without further
// synchronisation: a rank publishes "arrived = s+1" only after it finished
// reading everything of step s, and every rank waits for all "arrived = s+1"
// before it may write slot (s+2)&1 == s&1.
//
// An average (AllreduceArgs::divisor) is divided where it is reduced: each
// rank divides the slice it reduced while it is in cache, before the others
// copy it, so no pass over the whole result follows.
//
// The first step also carries the operation descriptor in the inline line, so
// mismatched arguments are detected without an extra exchange.
//
// Tiny vectors (up to kInlineDataBytes) take the latency path: data and
// descriptor go into the rank's inline cache line together with the step
// number, so each peer costs one cache-line transfer, and every rank
// reduces the n inline payloads itself.
//
// A segmented vector (AllreduceArgs::segments, e.g. a fusion bucket's
// tensors) goes the same way, piece by piece: the copy-in gathers the
// others' slices from the pieces' send buffers, the reduction reads and
// writes the own slice's pieces, and the copy-out scatters into the pieces'
// recv buffers, so a fused bucket moves the bytes of one contiguous vector.
//
// The writes into the staging slots (copy-in, and the reduced own slice)
// use plain or non-temporal stores, whichever the communicator's
// StagingStores measured faster for calls of this size lately: which wins
// depends on whether the ranks' cores share a cache (staging_stores.h).
// Either kind leaves the same bytes; streamed ones are fenced before the
// counter that publishes them.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "collectives/descriptor_check.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/segment_view.h"
#include "collectives/staging_stores.h"
#include "collectives/stream_copy.h"
#include "common/check.h"
#include "transport/shm/shm_group.h"

namespace kolo::collectives {
namespace {

// Below this many bytes per step every rank reduces the whole chunk.
constexpr size_t kReduceAllBytes = 16 * 1024;

// Every rank's descriptor is in its inline line for `parity`, published for
// `step` before its data step (agreement steps of other kinds look the same).
void verifyInline(shm::ShmGroup& g, int parity, uint64_t step, const OpDescriptor& mine) {
  bool agree = true;
  for (int r = 0; r < g.localSize(); ++r) {
    if (r == g.localRank()) continue;
    g.waitInline(r, parity, step);
    agree &= std::memcmp(g.inlinePayload(r, parity), &mine, sizeof(mine)) == 0;
  }
  if (agree) return;
  std::vector<OpDescriptor> all(g.localSize());
  for (int r = 0; r < g.localSize(); ++r) {
    std::memcpy(&all[r], g.inlinePayload(r, parity), sizeof(OpDescriptor));
  }
  verifyDescriptors(all, g.localRank());
}

constexpr size_t kInlineDataBytes = shm::ShmGroup::kInlineBytes - sizeof(OpDescriptor);

// The recv side of elements [begin, end) of `v` = the reduction of `srcs`
// (each holding those elements contiguously), divided by `divisor` when it
// is above 1: one reduceMany per piece, with the sources shifted to the
// piece, and the division while the piece is in cache. Each rank divides
// only what it reduced; the others copy the divided values.
void reduceInto(const SegmentView& v, size_t begin, size_t end, const void* const* srcs,
                int n, size_t es, DataType dtype, ReduceOp op, int divisor,
                std::vector<const void*>& shifted) {
  v.forEach(begin, end, [&](const uint8_t*, uint8_t* recv, size_t at, size_t m) {
    if (at == 0 && m == end - begin) {
      reduceMany(recv, srcs, n, m, dtype, op);
    } else {
      shifted.resize(n);
      for (int r = 0; r < n; ++r)
        shifted[r] = static_cast<const uint8_t*>(srcs[r]) + at * es;
      reduceMany(recv, shifted.data(), n, m, dtype, op);
    }
    if (divisor > 1) divideInPlace(recv, m, dtype, divisor);
  });
}

// Rank `me`'s slice, elements [begin, end) of `v`: recv = the reduction of
// the n sources, where source r != me is peers[r] (the slice in r's staging
// slot) and source me is `v`'s own send side, divided by `divisor` when it
// is above 1; each reduced piece is then copied to `staged` (this rank's
// staging slot at the slice) for the others, with stores of `kind`
// (streamed ones still need a fence before they are published).
void reduceOwnSlice(const SegmentView& v, size_t begin, size_t end,
                    const void* const* peers, int me, int n, size_t es, DataType dtype,
                    ReduceOp op, int divisor, uint8_t* staged, StoreKind kind,
                    std::vector<const void*>& srcs) {
  srcs.resize(n);
  v.forEach(begin, end, [&](const uint8_t* send, uint8_t* recv, size_t at, size_t m) {
    for (int r = 0; r < n; ++r) {
      srcs[r] = r == me ? send : static_cast<const uint8_t*>(peers[r]) + at * es;
    }
    reduceMany(recv, srcs.data(), n, m, dtype, op);
    if (divisor > 1) divideInPlace(recv, m, dtype, divisor);
    if (kind == StoreKind::kStreaming) {
      copyStreaming(staged + at * es, recv, m * es);
    } else {
      std::memcpy(staged + at * es, recv, m * es);
    }
  });
}

void allreduceInline(Context& ctx, const SegmentView& v, const AllreduceArgs& args,
                     size_t es) {
  shm::ShmGroup& g = *ctx.shm;
  const int n = g.localSize();
  const int me = g.localRank();
  const uint64_t step = g.nextSequence();
  const int parity = static_cast<int>(step & 1);
  uint8_t* line = g.inlinePayload(me, parity);
  OpDescriptor none;
  std::memcpy(line, ctx.check != nullptr ? ctx.check : &none, sizeof(OpDescriptor));
  v.gatherSend(line + sizeof(OpDescriptor), 0, args.count);
  g.publishInline(parity, step);
  g.publish(0, step);  // keeps "arrived" current for the other step kinds
  const void* srcs[64];
  std::vector<const void*> many;
  const void** src = srcs;
  if (n > 64) {
    many.resize(n);
    src = many.data();
  }
  bool agree = true;
  for (int k = 0; k < n; ++k) {
    const int r = (me + k) % n;
    if (r != me) g.waitInline(r, parity, step);
    const uint8_t* peer = g.inlinePayload(r, parity);
    if (ctx.check != nullptr && std::memcmp(peer, line, sizeof(OpDescriptor)) != 0) {
      agree = false;
    }
    src[r] = peer + sizeof(OpDescriptor);
  }
  if (!agree) {
    std::vector<OpDescriptor> all(n);
    for (int r = 0; r < n; ++r)
      std::memcpy(&all[r], g.inlinePayload(r, parity), sizeof(OpDescriptor));
    verifyDescriptors(all, me);
  }
  std::vector<const void*> shifted;
  reduceInto(v, 0, args.count, src, n, es, args.dtype, args.op, args.divisor, shifted);
}

}  // namespace

void allreduceShm(Context& ctx, const AllreduceArgs& args) {
  KOLO_CHECK(ctx.shm != nullptr);
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  shm::ShmGroup& g = *ctx.shm;
  const int n = g.localSize();
  const int me = g.localRank();
  const size_t es = elementSize(args.dtype);
  const size_t unit = std::max<size_t>(1, 64 / es);  // slices start on cache lines
  const size_t chunkElems = g.slotBytes() / es / unit * unit;
  KOLO_CHECK_GT(chunkElems, 0u);
  const SegmentView contiguous(args.send, args.recv, args.count, es);
  const SegmentView segmented(args.segments, args.segmentCount, es);
  const SegmentView& v = args.segmentCount > 0 ? segmented : contiguous;
  KOLO_CHECK_EQ(v.total(), args.count);
  if (args.count * es <= kInlineDataBytes) {
    allreduceInline(ctx, v, args, es);
    return;
  }

  // The kind of stores into the staging slots, and the call's time for
  // the choice of later calls (pipelined calls only: the others stage a
  // few lines).
  const size_t bytes = args.count * es;
  const bool measured = ctx.stores != nullptr && bytes > kReduceAllBytes && n > 1;
  const StoreKind kind = measured ? ctx.stores->pick(bytes) : StoreKind::kPlain;
  // (The clock is read only for measured calls: small allreduces, the
  // unfused runtime's thousands per step, do not pay for it.)
  const auto started = measured ? std::chrono::steady_clock::now()
                                : std::chrono::steady_clock::time_point{};

  std::vector<const void*> srcs(n), shifted;
  size_t offset = 0;
  bool first = true;
  do {
    const size_t elems = std::min(chunkElems, args.count - offset);
    const size_t end = offset + elems;
    const uint64_t step = g.nextSequence();
    const int slot = static_cast<int>(step & 1);
    if (first && ctx.check != nullptr) {
      std::memcpy(g.inlinePayload(me, slot), ctx.check, sizeof(OpDescriptor));
      g.publishInline(slot, step);
    }
    // The pipelined path's slices: slice r covers [begin(r), begin(r+1)),
    // whole cache lines except the last.
    const bool pipelined = elems * es > kReduceAllBytes && n > 1;
    const size_t units = (elems + unit - 1) / unit;
    auto begin = [&](int r) { return std::min(elems, units * r / n * unit); };
    const size_t lo = pipelined ? begin(me) : 0, hi = pipelined ? begin(me + 1) : 0;
    // Phase 1: stage the chunk but the own slice (all of it when not
    // pipelined).
    uint8_t* stage = g.staging(me, slot);
    auto gather = [&](size_t from, size_t to) {
      if (from >= to) return;
      if (kind == StoreKind::kStreaming) {
        v.gatherSendStreaming(stage + from * es, offset + from, offset + to);
      } else {
        v.gatherSend(stage + from * es, offset + from, offset + to);
      }
    };
    gather(0, lo);
    gather(hi, elems);
    g.publish(0, step);
    g.waitForAll(0, step);
    if (first && ctx.check != nullptr) verifyInline(g, slot, step, *ctx.check);
    first = false;

    if (!pipelined) {
      for (int r = 0; r < n; ++r) srcs[r] = g.staging(r, slot);
      reduceInto(v, offset, end, srcs.data(), n, es, args.dtype, args.op, args.divisor,
                 shifted);
    } else {
      // Phase 2: the own slice, reduced into recv and staged for the others.
      for (int r = 0; r < n; ++r) srcs[r] = g.staging(r, slot) + lo * es;
      reduceOwnSlice(v, offset + lo, offset + hi, srcs.data(), me, n, es, args.dtype,
                     args.op, args.divisor, stage + lo * es, kind, shifted);
      if (kind == StoreKind::kStreaming) fenceStreaming();
      g.publish(1, step);
      // Phase 3: the others' slices.
      for (int k = 1; k < n; ++k) {
        const int q = (me + k) % n;  // stagger readers across owners
        const size_t qlo = begin(q), qhi = begin(q + 1);
        g.waitFor(q, 1, step);
        v.scatterRecv(g.staging(q, slot) + qlo * es, offset + qlo, offset + qhi);
      }
    }
    offset += elems;
  } while (offset < args.count);
  if (measured) {
    ctx.stores->record(
        bytes, kind,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
            .count());
  }
}

}  // namespace kolo::collectives
