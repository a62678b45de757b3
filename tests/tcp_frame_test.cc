// The tcp transport's frame decoding (tcp_frame.h): what each header
// announces, and what an abort notice is trusted to say.
#include "transport/tcp/tcp_frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kolo::transport::tcp {
namespace {

std::vector<uint8_t> notice(int32_t code, int32_t blamed, const std::string& text) {
  std::vector<uint8_t> b(sizeof(AbortNotice) + text.size());
  AbortNotice n{code, blamed};
  std::memcpy(b.data(), &n, sizeof(n));
  std::memcpy(b.data() + sizeof(n), text.data(), text.size());
  return b;
}

TEST(TcpFrame, ClassifiesEachKindOfHeader) {
  EXPECT_EQ(classifyHeader({7, 1024}).kind, FrameKind::kData);
  EXPECT_EQ(classifyHeader({7, 1024}).payloadBytes, 1024u);
  EXPECT_EQ(classifyHeader({0, kGoodbye}).kind, FrameKind::kGoodbye);
  EXPECT_EQ(classifyHeader({0, kHeartbeat}).kind, FrameKind::kHeartbeat);
  EXPECT_EQ(classifyHeader({100, kAbort}).kind, FrameKind::kAbort);
  EXPECT_EQ(classifyHeader({100, kAbort}).payloadBytes, 100u);
  // An abort notice of an impossible size, an unknown control frame.
  EXPECT_EQ(classifyHeader({4, kAbort}).kind, FrameKind::kMalformed);
  EXPECT_EQ(classifyHeader({kMaxAbortBytes + 1, kAbort}).kind, FrameKind::kMalformed);
  EXPECT_EQ(classifyHeader({0, kControlBit | 9}).kind, FrameKind::kMalformed);
}

TEST(TcpFrame, ReadsAHeaderAtAnyAlignment) {
  uint8_t bytes[17] = {};
  Header h{0x0102030405060708ull, 42};
  std::memcpy(bytes + 1, &h, sizeof(h));
  Header back = readHeader(bytes + 1);
  EXPECT_EQ(back.tag, h.tag);
  EXPECT_EQ(back.bytes, h.bytes);
}

TEST(TcpFrame, AbortNoticeKeepsACheckedCodeAndRank) {
  auto b = notice(static_cast<int32_t>(ErrorCode::kTimeout), 2, "rank 2 timed out");
  AbortInfo info = decodeAbortNotice(b.data(), b.size(), 1, 4);
  EXPECT_EQ(info.code, ErrorCode::kTimeout);
  EXPECT_EQ(info.blamed, 2);
  EXPECT_EQ(info.message, "rank 2 timed out");
}

TEST(TcpFrame, AbortNoticeOutOfRangeIsBlamedOnTheSender) {
  auto b = notice(99, 17, "x");
  AbortInfo info = decodeAbortNotice(b.data(), b.size(), 1, 4);
  EXPECT_EQ(info.code, ErrorCode::kPeerLost);
  EXPECT_EQ(info.blamed, 1);
  b = notice(static_cast<int32_t>(ErrorCode::kPeerLost), -1, "");
  EXPECT_EQ(decodeAbortNotice(b.data(), b.size(), 3, 4).blamed, 3);
  AbortInfo truncated = decodeAbortNotice(b.data(), 3, 3, 4);
  EXPECT_EQ(truncated.code, ErrorCode::kPeerLost);
  EXPECT_EQ(truncated.blamed, 3);
  EXPECT_NE(truncated.message.find("rank 3 sent a truncated abort notice"),
            std::string::npos);
}

}  // namespace
}  // namespace kolo::transport::tcp
