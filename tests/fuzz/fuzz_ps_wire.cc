// Fuzz target: the parameter-server wire messages (src/ps/wire.h) as a
// server or worker receives them from another process: the 40-byte header
// under limits with and without a known configuration, and the kConfig
// payload (one input holds both, see below). Errors (kolo::Error) are the decoders'
// refusals; anything else (a crash, a sanitizer report, another exception) is a finding.
// The limits are built once, outside the loop.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include <kolo/error.h>

#include "ps/wire.h"

using namespace kolo::ps;

namespace {

struct Fixture {
  uint64_t shardBytes[3] = {4096, 40, 4};
  WireLimits unconfigured;
  WireLimits configured;
  Fixture() {
    unconfigured.workers = 4;
    unconfigured.shards = 3;
    configured = unconfigured;
    configured.shardBytes = shardBytes;
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

void decodeHeaderUnder(const uint8_t* data, size_t size, const WireLimits& limits) {
  try {
    Header h = decodeHeader(data, size, limits, 1);
    // An accepted header stays inside the limits it was checked against.
    if (h.payloadBytes > limits.maxPayloadBytes || h.worker >= limits.workers ||
        h.shard >= limits.shards) {
      std::abort();
    }
  } catch (const kolo::Error&) {
  }
}

}  // namespace

// The input: a 40-byte header, then a kConfig payload (the rest). Inputs
// shorter than a header are tried as a header (the size check).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = fixture();
  if (size < kHeaderBytes) {
    decodeHeaderUnder(data, size, f.configured);
    return 0;
  }
  // The flags' low bit of the header chooses the limits: before and after
  // the configuration is known.
  decodeHeaderUnder(data, kHeaderBytes, (data[6] & 1) ? f.configured : f.unconfigured);
  const uint8_t* config = data + kHeaderBytes;
  const size_t configBytes = size - kHeaderBytes;
  try {
    PsConfig c = decodeConfig(config, configBytes, 1, 1 << 10);
    // What decodes re-encodes stably (bytes, so NaN knobs compare too).
    std::vector<uint8_t> again = encodeConfig(c);
    PsConfig back = decodeConfig(again.data(), again.size(), 1, 1 << 10);
    if (encodeConfig(back) != again) std::abort();
  } catch (const kolo::Error&) {
  }
  return 0;
}
