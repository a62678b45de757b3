// Fuzz target: the rendezvous store's wire format (store_protocol.h) as the
// server reads it: a stream of frames, each a length and a request body.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rendezvous/store_protocol.h"

using namespace kolo::rendezvous::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // The proof comes first: checking it must not read past its 64 bytes.
  if (in.size() >= kProofBytes) {
    kolo::Digest d = clientProof("secret", std::string(32, 'n'), in.substr(0, 32));
    (void)kolo::constantTimeEqual(d.data(), in.data() + 32, d.size());
  }
  const Limits limits;
  while (in.size() >= 4) {
    uint32_t len = 0;
    std::string why;
    if (!decodeFrameLength(in, 5, limits.maxFrameBytes, &len, &why)) break;
    if (in.size() - 4 < len) break;
    Request r;
    if (decodeRequest(in.substr(4, len), &r, &why)) {
      // The views must lie inside the body.
      if (r.key.data() < in.data() ||
          r.arg.data() + r.arg.size() > in.data() + in.size()) {
        __builtin_trap();
      }
    }
    in.remove_prefix(4 + len);
  }
  return 0;
}
