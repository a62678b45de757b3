// Fuzz target: the tcp transport's frames after the handshake
// (tcp_frame.h). The input is a byte stream as a peer would send it: each
// header is classified, a data payload skipped, an abort notice decoded;
// a malformed header ends the stream, as it ends the link. The checks are
// the decoder's promises: payload bounds, a known error code, a blamed
// rank inside the world.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "transport/tcp/tcp_frame.h"

using namespace kolo::transport::tcp;

namespace {

constexpr int kWorld = 4;
constexpr int kSender = 1;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  while (size - at >= sizeof(Header)) {
    const FrameInfo frame = classifyHeader(readHeader(data + at));
    at += sizeof(Header);
    if (frame.kind == FrameKind::kMalformed) break;
    if (frame.kind == FrameKind::kGoodbye || frame.kind == FrameKind::kHeartbeat) {
      check(frame.payloadBytes == 0);
      continue;
    }
    if (frame.kind == FrameKind::kAbort) {
      check(frame.payloadBytes >= sizeof(AbortNotice) &&
            frame.payloadBytes <= kMaxAbortBytes);
    } else {
      check(frame.payloadBytes < kControlBit);
    }
    const size_t n = static_cast<size_t>(
        frame.payloadBytes < size - at ? frame.payloadBytes : size - at);
    if (frame.kind == FrameKind::kAbort) {
      AbortInfo info = decodeAbortNotice(data + at, n, kSender, kWorld);
      check(info.code == kolo::ErrorCode::kTimeout ||
            info.code == kolo::ErrorCode::kPeerLost);
      check(info.blamed >= 0 && info.blamed < kWorld);
      check(n < sizeof(AbortNotice) || info.message.size() == n - sizeof(AbortNotice));
    }
    at += n;
  }
  return 0;
}
