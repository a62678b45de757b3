// Tests of the 16-bit floats (src/collectives/reduce.h): float16 / bfloat16
// conversions exhaustively (every pattern, round to nearest even, F16C bit
// for bit), every pattern through every kernel path, and float16
// accumulation without intermediate overflow.
#include <gtest/gtest.h>
#include <kolo/types.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "collectives/reduce.h"
#include "support/reduce_reference.h"

namespace kolo::collectives::reduce_reference {
namespace {

// ---- float16 / bfloat16 conversions ---------------------------------------------

// Independent decoding of a float16 pattern with ldexp.
double decodeHalf(uint16_t h) {
  int sign = (h >> 15) ? -1 : 1;
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(Float16, AllPatternsDecodeAndRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    uint16_t h = static_cast<uint16_t>(i);
    float f = halfToFloat(h);
    double want = decodeHalf(h);
    if (isHalfNan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      uint16_t back = floatToHalf(f);
      ASSERT_TRUE(isHalfNan(back)) << std::hex << i;
      // Quieted, sign and payload kept.
      ASSERT_EQ(back, h | 0x200) << std::hex << i;
      ASSERT_EQ(bitCast<uint32_t>(f) >> 31, uint32_t(h >> 15)) << std::hex << i;
    } else {
      ASSERT_EQ(double(f), want) << std::hex << i;
      ASSERT_EQ(std::signbit(f), bool(h >> 15)) << std::hex << i;
      ASSERT_EQ(floatToHalf(f), h) << std::hex << i;
    }
  }
}

// Rounding, hardware-independent: between each pair of adjacent positive
// float16 values lo < hi, the midpoint goes to the one with an even mantissa,
// anything just below it to lo, just above it to hi; past 65504 the first
// value that rounds up is 65520, to inf.
TEST(Float16, RoundsToNearestEven) {
  for (uint16_t lo = 0; lo < 0x7bff; ++lo) {
    uint16_t hi = lo + 1;
    double mid = (decodeHalf(lo) + decodeHalf(hi)) / 2;  // exact in float
    float midF = static_cast<float>(mid);
    ASSERT_EQ(double(midF), mid);
    uint16_t even = (lo & 1) ? hi : lo;
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(floatToHalf(s * midF), even | sign) << std::hex << lo;
      ASSERT_EQ(floatToHalf(s * std::nextafter(midF, 0.0f)), lo | sign) << std::hex << lo;
      ASSERT_EQ(floatToHalf(s * std::nextafter(midF, 1e9f)), hi | sign) << std::hex << lo;
    }
  }
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e30f), 0xfc00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);                        // tie to even (0)
  EXPECT_EQ(floatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);  // above the tie
  EXPECT_EQ(floatToHalf(0x1.8p-24f), 0x0002);                      // tie 1.5 -> 2
  EXPECT_EQ(floatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(floatToHalf(-1e-30f), 0x8000);
  EXPECT_EQ(floatToHalf(1e-40f), 0x0000);  // float subnormal
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) float hardwareHalfToFloat(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t hardwareFloatToHalf(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

// The scalar conversion must match F16C bit for bit (the vector kernels use
// F16C, the generic path the scalar code): all 65536 halves, and floats
// from all of the float32 range (every 257th pattern, ~16.7 million) plus
// every float near float16 ties.
TEST(Float16, MatchesF16CBitForBit) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t i = 0; i < 65536; ++i) {
    float want = hardwareHalfToFloat(uint16_t(i));
    float got = halfToFloat(uint16_t(i));
    ASSERT_EQ(bitCast<uint32_t>(got), bitCast<uint32_t>(want)) << std::hex << i;
  }
  auto check = [](uint32_t bits) {
    float f = bitCast<float>(bits);
    ASSERT_EQ(floatToHalf(f), hardwareFloatToHalf(f)) << std::hex << bits;
  };
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 257) check(uint32_t(bits));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    uint32_t mid = bitCast<uint32_t>(float((decodeHalf(h) + decodeHalf(h + 1)) / 2));
    for (uint32_t d = 0; d < 5; ++d) {
      check(mid + d - 2);
      check((mid + d - 2) | 0x80000000u);
    }
  }
}
#endif

TEST(BFloat16, AllPatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    uint16_t b = static_cast<uint16_t>(i);
    float f = bfloat16ToFloat(b);
    ASSERT_EQ(bitCast<uint32_t>(f), i << 16) << std::hex << i;
    uint16_t back = floatToBfloat16(f);
    if (isBfloat16Nan(b)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_TRUE(isBfloat16Nan(back)) << std::hex << i;
      ASSERT_EQ(back, b | 0x40) << std::hex << i;  // quieted, payload kept
    } else {
      ASSERT_EQ(back, b) << std::hex << i;
    }
  }
}

// Rounding against a reference that picks the nearer of the two neighbours
// in double arithmetic (ties to the even one), on a sweep of float patterns
// and on every exact tie.
TEST(BFloat16, RoundsToNearestEven) {
  auto reference = [](float f) -> uint16_t {
    uint32_t bits = bitCast<uint32_t>(f);
    uint16_t lo = uint16_t(bits >> 16);  // truncation, toward zero
    if ((bits & 0xffff) == 0) return lo;
    uint16_t hi = lo + 1;  // away from zero (may become inf)
    double dl = std::fabs(double(f) - double(bfloat16ToFloat(lo)));
    double dh = std::fabs(double(bfloat16ToFloat(hi)) - double(f));
    if ((hi & 0x7fff) == 0x7f80) {
      // Next is inf: "distance" as if the exponent continued.
      dh = std::fabs(std::ldexp(1.0, 128) * (f < 0 ? -1 : 1) - double(f));
    }
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
  };
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 65537) {
    float f = bitCast<float>(uint32_t(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToBfloat16(f), reference(f)) << std::hex << bits;
  }
  for (uint32_t top = 0; top < 0x7f80; ++top) {
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        float f = bitCast<float>(sign | (top << 16) | low);
        ASSERT_EQ(floatToBfloat16(f), reference(f)) << std::hex << bitCast<uint32_t>(f);
      }
    }
  }
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
}

// The vector loads/stores of every path see every 16-bit pattern: max(x, x)
// is x (NaN quieted), sum with -0 is x except for NaN.
TEST(HalfKernels, EveryPatternThroughEveryPath) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  for (KernelIsa isa : supportedIsas()) {
    SCOPED_TRACE(isaName(isa));
    for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
      auto nan = dtype == DataType::kFloat16 ? isHalfNan : isBfloat16Nan;
      uint16_t quiet = dtype == DataType::kFloat16 ? 0x200 : 0x40;
      std::vector<uint16_t> out(all.size());
      reduce2(out.data(), all.data(), all.data(), all.size(), dtype, ReduceOp::kMax, isa);
      for (uint32_t i = 0; i < 65536; ++i) {
        ASSERT_EQ(out[i], nan(all[i]) ? (all[i] | quiet) : all[i]) << std::hex << i;
      }
    }
  }
}

// ---- float16 accumulation ------------------------------------------------------

// What is tested: 8 sources, each holding 30000 (fits float16). Chaining
// reduce2 rounds to float16 after each step, so 30000 * 3 = 90000 > 65504
// overflows to inf there and stays inf; reduceMany accumulates all 8 in
// float32 and rounds once, so it gives inf only when the *final* value
// exceeds the range: 8 * 30000 = 240000 -> inf, while 30000 * 3 - 30000 * 3
// + 30000 - 10000 (partial sums up to 90000, final 20000) -> exactly 20000.
TEST(HalfAccumulation, ReduceManyOverflowsOnlyOnTheFinalValue) {
  const uint16_t k30000 = floatToHalf(30000.0f);
  const uint16_t kMinus30000 = floatToHalf(-30000.0f);
  const uint16_t kMinus10000 = floatToHalf(-10000.0f);
  ASSERT_EQ(halfToFloat(k30000), 30000.0f);
  constexpr size_t kCount = 37;  // whole vectors and a tail
  auto filled = [](uint16_t v) { return std::vector<uint16_t>(kCount, v); };
  for (KernelIsa isa : supportedIsas()) {
    SCOPED_TRACE(isaName(isa));
    std::vector<std::vector<uint16_t>> same(8, filled(k30000));
    std::vector<const void*> srcs;
    for (auto& s : same) srcs.push_back(s.data());
    std::vector<uint16_t> out(kCount);
    reduceMany(out.data(), srcs.data(), 8, kCount, DataType::kFloat16, ReduceOp::kSum,
               isa);
    for (uint16_t v : out) EXPECT_EQ(v, 0x7c00) << "8 * 30000 = 240000 must be +inf";

    std::vector<std::vector<uint16_t>> mixed = {
        filled(k30000),      filled(k30000),      filled(k30000), filled(kMinus30000),
        filled(kMinus30000), filled(kMinus30000), filled(k30000), filled(kMinus10000)};
    srcs.clear();
    for (auto& s : mixed) srcs.push_back(s.data());
    reduceMany(out.data(), srcs.data(), 8, kCount, DataType::kFloat16, ReduceOp::kSum,
               isa);
    for (uint16_t v : out) EXPECT_EQ(halfToFloat(v), 20000.0f);

    // The same chain with reduce2 overflows at the third source.
    std::vector<uint16_t> chained = mixed[0];
    for (int k = 1; k < 8; ++k) {
      reduce2(chained.data(), chained.data(), mixed[k].data(), kCount, DataType::kFloat16,
              ReduceOp::kSum, isa);
    }
    for (uint16_t v : chained) EXPECT_EQ(v, 0x7c00);

    // Two values whose sum fits: 30000 + 30000 = 60000 <= 65504, no overflow.
    reduce2(out.data(), same[0].data(), same[1].data(), kCount, DataType::kFloat16,
            ReduceOp::kSum, isa);
    for (uint16_t v : out) EXPECT_EQ(halfToFloat(v), 60000.0f);
  }
}

// bfloat16 keeps float32 precision along the chain: 256 + 1 + 1 + ... (16
// ones) is 272 in float32 (bfloat16 has 8 significant bits: rounding each step
// would leave 256 forever).
TEST(HalfAccumulation, BFloat16ChainKeepsPrecision) {
  for (KernelIsa isa : supportedIsas()) {
    SCOPED_TRACE(isaName(isa));
    std::vector<std::vector<uint16_t>> bufs(
        17, std::vector<uint16_t>(21, floatToBfloat16(1)));
    bufs[0].assign(21, floatToBfloat16(256.0f));
    std::vector<const void*> srcs;
    for (auto& b : bufs) srcs.push_back(b.data());
    std::vector<uint16_t> out(21);
    reduceMany(out.data(), srcs.data(), 17, 21, DataType::kBFloat16, ReduceOp::kSum, isa);
    for (uint16_t v : out) EXPECT_EQ(bfloat16ToFloat(v), 272.0f);
  }
}

}  // namespace
}  // namespace kolo::collectives::reduce_reference
