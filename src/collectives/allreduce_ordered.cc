// Ordered allreduce ("ordered"): every element is reduced in rank order
// 0, 1, ..., n-1 by one rank, so its bits depend only on the n inputs of
// that element: not on the count, the element's offset in the buffer, the
// chunking, the transport or the topology. The runtime uses it for
// KOLO_DETERMINISTIC=1; the selection table never picks it.
//
// Nomenclature: n ranks; the vector is split into n slices (blockOf:
// balanced, possibly empty); rank q owns slice q.
//
//   exchange: every rank sends slice q of its input to rank q, for every
//     q != itself, and receives every rank's slice of its own. The owner
//     reduces the n contributions with reduceMany in rank order (float16 /
//     bfloat16 accumulated in float32 along that order and rounded once,
//     reduce.h), writing its slice of recv.
//   allgather: the reduced slices are gathered by the ring allgather
//     (copies only).
//
// The exchange runs in rounds of at most kChunkBytes per slice: in round k
// each rank sends chunk k of every peer's slice and receives chunk k of its
// own slice from every peer; round k+1 is posted before round k is reduced,
// so transfers overlap the reduction. Each rank moves 2(n-1)/n of the
// vector, as the ring does, but sends to all peers at once and needs
// 2(n-1) chunks of scratch.
//
// In place, the sends of round k read the input slices of other ranks, and
// the reduction writes only our own slice (reduceMany allows dst == a
// source); every send is complete before the allgather overwrites the other
// slices.
#include <cstring>
#include <memory>
#include <vector>

#include "collectives/partition.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "common/check.h"

namespace kolo::collectives {
namespace {

constexpr size_t kChunkBytes = 256 * 1024;

// Tags inside the operation's block: the exchange on one tag (messages
// between two ranks with one tag arrive in order), the allgather after it.
constexpr transport::Tag kExchangeTag = 0;
constexpr transport::Tag kGatherTag = 1;

// Per-thread receive space for the exchange, kept across calls.
uint8_t* exchangeScratch(size_t bytes) {
  thread_local std::unique_ptr<uint8_t[]> data;
  thread_local size_t size = 0;
  if (size < bytes) {
    data.reset(new uint8_t[bytes]);
    size = bytes;
  }
  return data.get();
}

// Chunk k of a slice: elements [k * chunk, ...) of it, possibly empty.
Block chunkOf(const Block& slice, size_t chunkElems, size_t k) {
  const size_t begin = k * chunkElems;
  if (begin >= slice.count) return {slice.offset + slice.count, 0};
  const size_t n = slice.count - begin < chunkElems ? slice.count - begin : chunkElems;
  return {slice.offset + begin, n};
}

}  // namespace

void allreduceOrdered(Context& ctx, const AllreduceArgs& args) {
  KOLO_CHECK(args.op != ReduceOp::kAverage);
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  const size_t es = elementSize(args.dtype);
  const size_t count = args.count;
  if (n == 1 || count == 0) {
    if (args.send != args.recv && count > 0)
      std::memcpy(args.recv, args.send, count * es);
    return;
  }
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);

  const size_t chunkElems = kChunkBytes / es;
  const Block mine = blockOf(count, n, r);
  // Rounds: enough for the largest slice (slice 0).
  const size_t rounds = (blockOf(count, n, 0).count + chunkElems - 1) / chunkElems;
  // Two sets of n receive slots (ours unused), one per round in flight.
  uint8_t* slots = exchangeScratch(2 * static_cast<size_t>(n) * chunkElems * es);
  auto slot = [&](size_t k, int q) {
    return slots +
           ((k % 2) * static_cast<size_t>(n) + static_cast<size_t>(q)) * chunkElems * es;
  };
  const transport::Tag tag = ctx.tag + kExchangeTag;

  struct Round {
    std::vector<transport::RequestPtr> sends, recvs;
  };
  auto post = [&](size_t k) {
    Round round;
    const Block in = chunkOf(mine, chunkElems, k);
    for (int i = 1; i < n; ++i) {
      // Receive from r-i and send to r+i: every rank posts in a different
      // order, so no peer is everyone's first.
      const int from = mod(r - i, n);
      if (in.count > 0) {
        round.recvs.push_back(t.irecv(from, tag, slot(k, from), in.count * es));
      }
      const int to = mod(r + i, n);
      const Block out = chunkOf(blockOf(count, n, to), chunkElems, k);
      if (out.count > 0) {
        round.sends.push_back(
            t.isend(to, tag, bytesAt(send, out.offset, es), out.count * es));
      }
    }
    return round;
  };

  std::vector<const void*> srcs(n);
  Round current = post(0);
  for (size_t k = 0; k < rounds; ++k) {
    Round next;
    if (k + 1 < rounds) next = post(k + 1);
    t.waitAll(current.recvs);
    const Block in = chunkOf(mine, chunkElems, k);
    if (in.count > 0) {
      for (int q = 0; q < n; ++q) {
        srcs[q] = q == r ? static_cast<const void*>(bytesAt(send, in.offset, es))
                         : static_cast<const void*>(slot(k, q));
      }
      reduceMany(bytesAt(recv, in.offset, es), srcs.data(), n, in.count, args.dtype,
                 args.op);
    }
    t.waitAll(current.sends);
    current = std::move(next);
  }

  Context gather = ctx;
  gather.tag = ctx.tag + kGatherTag;
  std::vector<size_t> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = blockOf(count, n, q).count;
  allgatherRing(gather, AllgatherArgs{bytesAt(recv, mine.offset, es), recv,
                                      std::move(counts), args.dtype});
}

}  // namespace kolo::collectives
