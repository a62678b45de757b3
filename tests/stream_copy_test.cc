// Tests of copyStreaming (src/collectives/stream_copy.h): every length up to
// a few lines at every alignment of source and destination copies exactly
// those bytes, and nothing around them.
#include "collectives/stream_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kolo::collectives {
namespace {

TEST(CopyStreamingTest, EveryLengthAndAlignmentCopiesExactlyTheBytes) {
  constexpr size_t kMaxBytes = 300;  // head, whole lines, 16-byte tail, rest
  constexpr size_t kOffsets = 20;
  std::vector<uint8_t> src(kMaxBytes + 64), dst(kMaxBytes + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t srcAt = 0; srcAt < kOffsets; ++srcAt) {
    for (size_t dstAt = 0; dstAt < kOffsets; ++dstAt) {
      for (size_t n = 0; n + kOffsets <= kMaxBytes; n += (n < 80 ? 1 : 13)) {
        std::fill(dst.begin(), dst.end(), uint8_t{0xEE});
        copyStreaming(dst.data() + dstAt, src.data() + srcAt, n);
        fenceStreaming();
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= dstAt && i < dstAt + n;
          const uint8_t want = inside ? src[srcAt + i - dstAt] : uint8_t{0xEE};
          ASSERT_EQ(dst[i], want) << "source offset " << srcAt << ", destination offset "
                                  << dstAt << ", " << n << " bytes: byte " << i;
        }
      }
    }
  }
}

TEST(CopyStreamingTest, LargeCopyMatches) {
  std::vector<uint8_t> src((size_t{1} << 20) + 13), dst(src.size() + 5, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i ^ (i >> 8));
  copyStreaming(dst.data() + 5, src.data(), src.size());
  fenceStreaming();
  ASSERT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 5));
  for (size_t i = 0; i < 5; ++i) ASSERT_EQ(dst[i], 0) << i;
}

}  // namespace
}  // namespace kolo::collectives
