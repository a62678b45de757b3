// Pairwise-exchange alltoall.
//
// Nomenclature: n ranks, block j of `send` goes to rank j and block i of
// `recv` comes from rank i (countPerRank elements each). Rank r copies its
// own block, then in step i = 1..n-1 sends block r+i to rank r+i and
// receives block r-i from rank r-i (mod n). Each step pairs every rank with
// one sender and one receiver, so no link carries two messages at once.
//
// In place (send == recv) the input is first copied aside.
#include <cstring>
#include <memory>

#include "collectives/partition.h"
#include "collectives/registry.h"
#include "common/check.h"

namespace kolo::collectives {

void alltoallPairwise(Context& ctx, const AlltoallArgs& args) {
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  const size_t block = args.countPerRank * elementSize(args.dtype);
  if (block == 0) return;
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);
  std::unique_ptr<uint8_t[]> copy;
  if (send == recv && n > 1) {
    copy.reset(new uint8_t[n * block]);
    std::memcpy(copy.get(), send, n * block);
    send = copy.get();
  }
  if (send != recv) std::memcpy(recv + r * block, send + r * block, block);
  for (int i = 1; i < n; ++i) {
    const int to = mod(r + i, n);
    const int from = mod(r - i, n);
    t.sendRecv(to, send + to * block, block, from, recv + from * block, block,
               ctx.tag + static_cast<transport::Tag>(i));
  }
}

}  // namespace kolo::collectives
