// Tests of divideInPlace (src/collectives/reduce.h): every dtype on every
// instruction-set path this CPU supports against the scalar reference
// (support/reduce_reference.h), power-of-two divisors, any alignment,
// integer truncation, float16 through float32, bad divisors.
#include <gtest/gtest.h>
#include <kolo/error.h>
#include <kolo/types.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/reduce.h"
#include "support/reduce_reference.h"

namespace kolo::collectives::reduce_reference {
namespace {

// ---- divideInPlace -------------------------------------------------------------

class DivideTest : public ::testing::TestWithParam<std::tuple<DataType, KernelIsa>> {};

TEST_P(DivideTest, MatchesReference) {
  auto [dtype, isa] = GetParam();
  if (!isSupported(isa)) GTEST_SKIP() << toString(isa) << " not supported here";
  for (double divisor : {1.0, 2.0, 3.0, 7.0, 8.0, 255.0, 1000.0}) {
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{17}, size_t{1023}, size_t{100003}}) {
      SCOPED_TRACE("divisor " + std::to_string(divisor) + " count " +
                   std::to_string(count));
      auto buf = randomBuffer(dtype, count, 31 + count);
      std::vector<uint8_t> want(buf.size());
      auto each = [&](auto tag, auto divide) {
        using S = decltype(tag);
        for (size_t i = 0; i < count; ++i) {
          S s;
          std::memcpy(&s, buf.data() + i * sizeof(S), sizeof s);
          S r = divide(s);
          std::memcpy(want.data() + i * sizeof(S), &r, sizeof r);
        }
      };
      float fd = static_cast<float>(divisor);
      switch (dtype) {
        case DataType::kFloat32: each(float{}, [&](float x) { return x / fd; }); break;
        case DataType::kFloat64:
          each(double{}, [&](double x) { return x / divisor; });
          break;
        case DataType::kFloat16:
          each(uint16_t{}, [&](uint16_t h) { return floatToHalf(halfToFloat(h) / fd); });
          break;
        case DataType::kBFloat16:
          each(uint16_t{},
               [&](uint16_t h) { return floatToBfloat16(bfloat16ToFloat(h) / fd); });
          break;
        case DataType::kInt32:
          each(int32_t{}, [&](int32_t x) { return int32_t(x / int64_t(divisor)); });
          break;
        case DataType::kInt64:
          each(int64_t{}, [&](int64_t x) { return x / int64_t(divisor); });
          break;
        case DataType::kUInt8:
          each(uint8_t{}, [&](uint8_t x) { return uint8_t(x / unsigned(divisor)); });
          break;
      }
      divideInPlace(buf.data(), count, dtype, divisor, isa);
      ASSERT_TRUE(sameElements(dtype, want, buf, count));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesIsas, DivideTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllIsas)),
                         [](const auto& info) {
                           return std::string(toString(std::get<0>(info.param))) + "_" +
                                  isaName(std::get<1>(info.param));
                         });

// A power-of-two divisor is applied as a multiplication by its reciprocal:
// the bits must still be those of the division, at the edges of the range
// too (subnormal results, the largest values, signed zeros, infinities).
TEST(DivideTest, PowerOfTwoDivisorsGiveTheDivisionsBits) {
  const float edges[] = {1.0f,
                         -3.0f,
                         0.0f,
                         -0.0f,
                         std::numeric_limits<float>::min(),
                         -std::numeric_limits<float>::min() * 3.0f,
                         std::numeric_limits<float>::denorm_min(),
                         std::numeric_limits<float>::denorm_min() * 3.0f,
                         std::numeric_limits<float>::max(),
                         -std::numeric_limits<float>::max(),
                         std::numeric_limits<float>::infinity(),
                         1.5e-38f,
                         0.1f};
  for (KernelIsa isa : kAllIsas) {
    if (!isSupported(isa)) continue;
    for (float divisor : {2.0f, 4.0f, 1024.0f, 0.5f, 0x1p100f, 0x1p127f}) {
      SCOPED_TRACE(std::string(isaName(isa)) + " divisor " + std::to_string(divisor));
      std::vector<float> buf;
      for (int copy = 0; copy < 5; ++copy)
        buf.insert(buf.end(), std::begin(edges), std::end(edges));
      std::vector<float> want(buf.size());
      for (size_t i = 0; i < buf.size(); ++i) want[i] = buf[i] / divisor;
      divideInPlace(buf.data(), buf.size(), DataType::kFloat32, divisor, isa);
      for (size_t i = 0; i < buf.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &want[i], 4);
        std::memcpy(&b, &buf[i], 4);
        ASSERT_EQ(a, b) << "element " << i << " (" << want[i] << " vs " << buf[i] << ")";
      }
    }
  }
}

// The in-place kernels align to the vector width first: same results at
// every byte offset, and nothing outside the buffer touched.
TEST(DivideInPlace, AnyAlignment) {
  for (KernelIsa isa : supportedIsas()) {
    for (DataType dtype : kAllTypes) {
      SCOPED_TRACE(isaName(isa) + " " + std::string(toString(dtype)));
      size_t size = elementSize(dtype);
      size_t count = 1000;
      auto data = randomBuffer(dtype, count, 3);
      auto want = data;
      divideInPlace(want.data(), count, dtype, 3.0, KernelIsa::kGeneric);
      for (size_t offset = 0; offset < 64; offset += (offset < 8 ? 1 : 8)) {
        std::vector<uint8_t> storage(count * size + 128, 0x5a);
        uint8_t* base = storage.data() +
                        (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) + offset;
        std::memcpy(base, data.data(), data.size());
        divideInPlace(base, count, dtype, 3.0, isa);
        ASSERT_TRUE(sameElements(dtype, want,
                                 std::vector<uint8_t>(base, base + data.size()), count))
            << "offset " << offset;
        for (uint8_t* p = storage.data(); p < base; ++p) ASSERT_EQ(*p, 0x5a);
        for (uint8_t* p = base + data.size(); p < storage.data() + storage.size(); ++p) {
          ASSERT_EQ(*p, 0x5a);
        }
      }
    }
  }
}

TEST(DivideInPlace, IntegerTruncatesTowardZero) {
  int32_t v32[] = {-7, 7, -1, std::numeric_limits<int32_t>::min(),
                   std::numeric_limits<int32_t>::max()};
  int64_t v64[] = {-7, 7, -1, std::numeric_limits<int64_t>::min(),
                   std::numeric_limits<int64_t>::max()};
  for (KernelIsa isa : supportedIsas()) {
    SCOPED_TRACE(isaName(isa));
    auto a = std::vector<int32_t>(std::begin(v32), std::end(v32));
    auto b = std::vector<int64_t>(std::begin(v64), std::end(v64));
    divideInPlace(a.data(), a.size(), DataType::kInt32, 2.0, isa);
    divideInPlace(b.data(), b.size(), DataType::kInt64, 2.0, isa);
    EXPECT_EQ(a, (std::vector<int32_t>{-3, 3, 0, -1073741824, 1073741823}));
    EXPECT_EQ(b, (std::vector<int64_t>{-3, 3, 0, std::numeric_limits<int64_t>::min() / 2,
                                       std::numeric_limits<int64_t>::max() / 2}));
  }
}

TEST(DivideInPlace, Float16DividesInFloat32) {
  // 1/3 is not a float16 value: the quotient is rounded once, from float32.
  std::vector<uint16_t> x = {floatToHalf(12.0f), floatToHalf(-3.0f), floatToHalf(1.0f)};
  for (KernelIsa isa : supportedIsas()) {
    auto y = x;
    divideInPlace(y.data(), y.size(), DataType::kFloat16, 3.0, isa);
    EXPECT_EQ(halfToFloat(y[0]), 4.0f);
    EXPECT_EQ(halfToFloat(y[1]), -1.0f);
    EXPECT_EQ(y[2], floatToHalf(1.0f / 3.0f));
    EXPECT_EQ(y[2], 0x3555);  // 0.33325195...
  }
}

TEST(DivideInPlace, RejectsBadIntegerDivisors) {
  int32_t x[4] = {1, 2, 3, 4};
  for (double bad : {0.0, -1.0, 2.5, std::nan(""), 1e300}) {
    SCOPED_TRACE(bad);
    for (DataType dtype : {DataType::kInt32, DataType::kInt64, DataType::kUInt8}) {
      try {
        divideInPlace(x, 1, dtype, bad);
        ADD_FAILURE() << "no throw for " << toString(dtype);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(toString(dtype)), std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_EQ(x[0], 1);
  float f[2] = {1.0f, -1.0f};
  divideInPlace(f, 2, DataType::kFloat32, 0.0);  // floats: IEEE division
  EXPECT_EQ(f[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f[1], -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace kolo::collectives::reduce_reference
