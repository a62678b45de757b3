// Dissemination barrier (Hensgen, Finkel and Manber).
//
// Nomenclature: n ranks, rounds k = 0..ceil(log2 n)-1. In round k rank r
// sends a one-byte token to r + 2^k and waits for the token of r - 2^k
// (mod n). After the last round every rank has (transitively) heard from
// every other rank, so none leaves before all have entered.
#include <cstdint>

#include "collectives/partition.h"
#include "collectives/registry.h"

namespace kolo::collectives {

void barrierDissemination(Context& ctx) {
  transport::Transport& t = ctx.world;
  const int n = t.size();
  const int r = t.rank();
  uint8_t out = 1, in = 0;
  transport::Tag tag = ctx.tag;
  for (int dist = 1; dist < n; dist *= 2, ++tag) {
    t.sendRecv(mod(r + dist, n), &out, 1, mod(r - dist, n), &in, 1, tag);
  }
}

}  // namespace kolo::collectives
