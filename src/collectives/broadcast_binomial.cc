// Binomial-tree broadcast from any root, pipelined in chunks.
//
// Nomenclature: n ranks, virtual rank v = (rank - root) mod n, so the root
// is v = 0. The parent of v is v with its lowest set bit cleared; the
// children of v are v + m for each power of two m below v's lowest set bit
// (below the smallest power of two >= n for the root), largest subtree
// first. The tree has depth ceil(log2 n).
//
// The buffer is cut into chunks (kChunkBytes); a rank forwards chunk k to
// its children as soon as it arrives, while chunks k+1.. are still
// arriving, so large broadcasts stream down the tree instead of waiting at
// each level for the whole buffer.
#include <algorithm>
#include <vector>

#include "collectives/partition.h"
#include "collectives/registry.h"
#include "common/check.h"

namespace kolo::collectives {
namespace {

constexpr size_t kChunkBytes = 256 * 1024;

}  // namespace

void broadcastBinomial(Context& ctx, const BroadcastArgs& args) {
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  KOLO_CHECK_GE(args.root, 0);
  KOLO_CHECK_LT(args.root, n);
  const size_t es = elementSize(args.dtype);
  const size_t bytes = args.count * es;
  if (n == 1 || bytes == 0) return;
  auto* buf = static_cast<uint8_t*>(args.buffer);

  const int v = mod(r - args.root, n);
  int parent = -1;
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      parent = mod(v - mask + args.root, n);
      break;
    }
    mask <<= 1;
  }
  std::vector<int> children;
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (v + m < n) children.push_back(mod(v + m + args.root, n));
  }

  const size_t chunk = std::max<size_t>(es, kChunkBytes / es * es);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  auto span = [&](size_t k) { return std::min(chunk, bytes - k * chunk); };
  std::vector<transport::RequestPtr> sends;
  sends.reserve(chunks * children.size());
  if (parent < 0) {
    for (size_t k = 0; k < chunks; ++k) {
      for (int c : children)
        sends.push_back(t.isend(c, ctx.tag, buf + k * chunk, span(k)));
    }
  } else {
    // All receives land in place: post them up front so no chunk arrives
    // before its receive.
    std::vector<transport::RequestPtr> recvs(chunks);
    for (size_t k = 0; k < chunks; ++k) {
      recvs[k] = t.irecv(parent, ctx.tag, buf + k * chunk, span(k));
    }
    for (size_t k = 0; k < chunks; ++k) {
      t.wait(recvs[k]);
      for (int c : children)
        sends.push_back(t.isend(c, ctx.tag, buf + k * chunk, span(k)));
    }
  }
  t.waitAll(sends);
}

}  // namespace kolo::collectives
