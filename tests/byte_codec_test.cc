// The byte codec (src/common/byte_codec.h): both byte orders written out
// byte by byte, round trips of every value type, and a reader that stops
// at the end of its buffer instead of reading past it.
#include "common/byte_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace kolo {
namespace {

TEST(ByteCodec, LittleAndBigEndianBytes) {
  std::vector<uint8_t> little, big;
  ByteWriter(little, ByteOrder::kLittle).put<uint32_t>(0x01020304).put<uint16_t>(0xa0b0);
  ByteWriter(big, ByteOrder::kBig).put<uint32_t>(0x01020304).put<uint16_t>(0xa0b0);
  EXPECT_EQ(little, (std::vector<uint8_t>{4, 3, 2, 1, 0xb0, 0xa0}));
  EXPECT_EQ(big, (std::vector<uint8_t>{1, 2, 3, 4, 0xa0, 0xb0}));
}

TEST(ByteCodec, HostOrderIsTheMachinesOwn) {
  // The host-order formats (store, tcp, negotiation) wrote their values
  // with memcpy: the codec must give the same bytes.
  const uint64_t v = 0x0102030405060708ull;
  std::string coded, copied(8, '\0');
  ByteWriter(coded, kHostOrder).put(v);
  std::memcpy(copied.data(), &v, 8);
  EXPECT_EQ(coded, copied);
}

TEST(ByteCodec, RoundTripsEveryType) {
  for (ByteOrder order : {ByteOrder::kLittle, ByteOrder::kBig}) {
    std::string b;
    ByteWriter(b, order)
        .put<uint8_t>(0xfe)
        .put<int16_t>(-2)
        .put<int32_t>(std::numeric_limits<int32_t>::min())
        .put<int64_t>(-1234567890123ll)
        .put<uint64_t>(std::numeric_limits<uint64_t>::max())
        .put<float>(-1.5f)
        .put<double>(std::nan(""))
        .bytes("tail");
    EXPECT_EQ(b.size(), 1u + 2 + 4 + 8 + 8 + 4 + 8 + 4);
    ByteReader r(b, order);
    EXPECT_EQ(r.get<uint8_t>(), 0xfe);
    EXPECT_EQ(r.get<int16_t>(), -2);
    EXPECT_EQ(r.get<int32_t>(), std::numeric_limits<int32_t>::min());
    EXPECT_EQ(r.get<int64_t>(), -1234567890123ll);
    EXPECT_EQ(r.get<uint64_t>(), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(r.get<float>(), -1.5f);
    EXPECT_TRUE(std::isnan(r.get<double>()));
    EXPECT_EQ(r.rest(), "tail");
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.remaining(), 0u);
  }
}

TEST(ByteCodec, FloatsTravelAsTheirBitPattern) {
  std::vector<uint8_t> b;
  ByteWriter(b, ByteOrder::kLittle).put<float>(1.0f);  // 0x3f800000
  EXPECT_EQ(b, (std::vector<uint8_t>{0, 0, 0x80, 0x3f}));
}

TEST(ByteCodec, StoreAndLoadAtAPosition) {
  uint8_t b[6] = {};
  storeBytes<uint32_t>(b + 1, 0xdeadbeef, ByteOrder::kBig);
  EXPECT_EQ(b[1], 0xde);
  EXPECT_EQ(b[4], 0xef);
  EXPECT_EQ(loadBytes<uint32_t>(b + 1, ByteOrder::kBig), 0xdeadbeefu);
  EXPECT_EQ(loadBytes<uint32_t>(b + 1, ByteOrder::kLittle), 0xefbeaddeu);
}

TEST(ByteCodec, ShortReadFailsWithoutReadingPastTheEnd) {
  // Three bytes in a heap buffer of exactly three: reading a u32 would
  // overrun it (ASan would say so).
  std::vector<uint8_t> three{1, 2, 3};
  ByteReader r(three.data(), three.size(), ByteOrder::kLittle);
  EXPECT_EQ(r.get<uint32_t>(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
  // Failed stays failed: later reads that would fit return nothing.
  EXPECT_EQ(r.get<uint8_t>(), 0);
  EXPECT_TRUE(r.bytes(1).empty());
  EXPECT_FALSE(r.ok());
}

TEST(ByteCodec, BytesBeyondTheEndFail) {
  const std::string b = "abc";
  ByteReader r(b, ByteOrder::kLittle);
  EXPECT_EQ(r.bytes(2), "ab");
  EXPECT_EQ(r.cursor(), reinterpret_cast<const uint8_t*>(b.data()) + 2);
  EXPECT_TRUE(r.bytes(2).empty());
  EXPECT_FALSE(r.ok());
  // A length a stranger sent, near SIZE_MAX, must not wrap the bound check.
  ByteReader huge(b, ByteOrder::kLittle);
  EXPECT_TRUE(huge.bytes(~size_t{0}).empty());
  EXPECT_FALSE(huge.ok());
}

}  // namespace
}  // namespace kolo
