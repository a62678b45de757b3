// Writes the seed corpus of fuzz_negotiation: real messages of rank 1 of a
// world of 2 (cache capacity 16), as the fuzz target reads them.
#include <cstdio>
#include <string>

#include "runtime/negotiator.h"

using namespace kolo;
using namespace kolo::runtime;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  for (int seed = 0; seed < 4; ++seed) {
    Negotiator n(1, 2, 16);
    for (int i = 0; i <= seed; ++i) {
      OpSpec s;
      s.name = "grad." + std::to_string(i);
      s.kind = static_cast<OpKind>(i % 5);
      s.shape = {4, int64_t{i} + 1};
      s.root = i % 2;
      n.submit(static_cast<OpId>(i + 1), s);
    }
    CycleFlags flags;
    flags.stallShutdown = seed == 3 ? "stalled" : "";
    flags.fusionThresholdBytes = 1 << 20;
    flags.cycleTimeMs = 1.0;
    Message m = n.prepare(flags);
    std::string path = std::string(argv[1]) + "/seed" + std::to_string(seed);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 1;
    std::fwrite(m.fixed.data(), 1, m.fixed.size(), f);
    std::fwrite(m.variable.data(), 1, m.variable.size(), f);
    std::fclose(f);
  }
  return 0;
}
