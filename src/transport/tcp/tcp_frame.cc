#include "transport/tcp/tcp_frame.h"

namespace kolo::transport::tcp {

void appendHeader(std::vector<uint8_t>& out, const Header& h) {
  ByteWriter(out, kOrder).put(h.tag).put(h.bytes);
}

Header readHeader(const uint8_t* bytes) {
  return {loadBytes<uint64_t>(bytes, kOrder), loadBytes<uint64_t>(bytes + 8, kOrder)};
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

void appendAbortNotice(std::vector<uint8_t>& out, const AbortNotice& notice) {
  ByteWriter(out, kOrder).put(notice.code).put(notice.blamed);
}

AbortInfo decodeAbortNotice(const uint8_t* payload, size_t n, int sender, int worldSize) {
  if (n < sizeof(AbortNotice)) {
    return {ErrorCode::kPeerLost, sender,
            "rank " + std::to_string(sender) + " sent a truncated abort notice"};
  }
  ByteReader in(payload, n, kOrder);
  AbortNotice notice;
  notice.code = in.get<int32_t>();
  notice.blamed = in.get<int32_t>();
  AbortInfo info;
  info.code = static_cast<ErrorCode>(notice.code);
  if (info.code != ErrorCode::kTimeout && info.code != ErrorCode::kPeerLost) {
    info.code = ErrorCode::kPeerLost;
  }
  info.blamed = notice.blamed >= 0 && notice.blamed < worldSize ? notice.blamed : sender;
  info.message.assign(in.rest());
  return info;
}

}  // namespace kolo::transport::tcp
