#include "transport/tcp/tcp_frame.h"

#include <cstring>

namespace kolo::transport::tcp {

Header readHeader(const uint8_t* bytes) {
  Header h;
  std::memcpy(&h, bytes, sizeof(h));
  return h;
}

FrameInfo classifyHeader(const Header& h) {
  if (!(h.bytes & kControlBit)) return {FrameKind::kData, h.bytes};
  if (h.bytes == kGoodbye) return {FrameKind::kGoodbye, 0};
  if (h.bytes == kHeartbeat) return {FrameKind::kHeartbeat, 0};
  if (h.bytes == kAbort && h.tag >= sizeof(AbortNotice) && h.tag <= kMaxAbortBytes) {
    return {FrameKind::kAbort, h.tag};
  }
  return {FrameKind::kMalformed, 0};
}

AbortInfo decodeAbortNotice(const uint8_t* payload, size_t n, int sender, int worldSize) {
  if (n < sizeof(AbortNotice)) {
    return {ErrorCode::kPeerLost, sender,
            "rank " + std::to_string(sender) + " sent a truncated abort notice"};
  }
  AbortNotice notice;
  std::memcpy(&notice, payload, sizeof(notice));
  AbortInfo info;
  info.code = static_cast<ErrorCode>(notice.code);
  if (info.code != ErrorCode::kTimeout && info.code != ErrorCode::kPeerLost) {
    info.code = ErrorCode::kPeerLost;
  }
  info.blamed = notice.blamed >= 0 && notice.blamed < worldSize ? notice.blamed : sender;
  info.message.assign(reinterpret_cast<const char*>(payload) + sizeof(notice),
                      n - sizeof(notice));
  return info;
}

}  // namespace kolo::transport::tcp
