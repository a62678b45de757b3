// Fuzz target: the runtime's negotiation messages (negotiator.cc decodes
// them, op_spec.cc decodes each request) as rank 0 of a world of 2
// receives them: the input is rank 1's fixed part, then its variable part.
// Malformed input must be a kolo::Error, never a crash or a hang.
#include <kolo/error.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/negotiator.h"
#include "runtime/op_spec.h"

using namespace kolo;
using namespace kolo::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // OpSpec::decode alone, over the whole input.
  {
    const uint8_t* p = data;
    const uint8_t* end = data + size;
    try {
      while (p < end) (void)OpSpec::decode(p, end);
    } catch (const Error&) {
    }
  }
  Negotiator me(0, 2, 16);
  Message mine = me.prepare({});
  const size_t fixed = me.fixedBytes();
  if (size < fixed) return 0;
  std::vector<std::vector<uint8_t>> fixedParts{mine.fixed,
                                               std::vector<uint8_t>(data, data + fixed)};
  std::vector<std::vector<uint8_t>> variable{
      mine.variable, std::vector<uint8_t>(data + fixed, data + size)};
  try {
    (void)me.process(fixedParts, variable, std::chrono::steady_clock::now());
  } catch (const Error&) {
  }
  return 0;
}
