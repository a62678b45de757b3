// Tests of the reduction kernels (src/collectives/reduce.h): every dtype x op
// x count on every instruction-set path this CPU supports, against a scalar
// reference written here; float16 / bfloat16 conversions exhaustively;
// float16 accumulation without intermediate overflow; divideInPlace;
// aliasing; bad arguments.
//
// ReduceBench.DISABLED_Bandwidth is a microbenchmark, off by default:
//   build-x/bin/reduce_test --gtest_also_run_disabled_tests
//     --gtest_filter='ReduceBench.*'
#include "collectives/reduce.h"

#include <gtest/gtest.h>
#include <kolo/error.h>
#include <kolo/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kolo::collectives {
namespace {

constexpr DataType kAllTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                ReduceOp::kMax, ReduceOp::kProduct};
constexpr KernelIsa kAllIsas[] = {KernelIsa::kGeneric, KernelIsa::kAvx2,
                                  KernelIsa::kAvx512};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1023, (size_t{1} << 20) + 3};

std::vector<KernelIsa> supportedIsas() {
  std::vector<KernelIsa> out;
  for (KernelIsa isa : kAllIsas) {
    if (isSupported(isa)) out.push_back(isa);
  }
  return out;
}

template <class To, class From>
To bitCast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

bool isHalfNan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
bool isBfloat16Nan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

// ---- scalar reference ------------------------------------------------------

// The semantics promised in reduce.h, written the plain way: min/max return
// the NaN operand if there is one, else a < b ? a : b (so the second operand
// of an equal pair); integer sum/product wrap (computed unsigned).
template <class T>
T refOp(ReduceOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: return a + b;
      case ReduceOp::kProduct: return a * b;
      case ReduceOp::kMin:
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return a < b ? a : b;
      case ReduceOp::kMax:
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        return a > b ? a : b;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: return static_cast<T>(static_cast<U>(U(a) + U(b)));
      case ReduceOp::kProduct: return static_cast<T>(static_cast<U>(U(a) * U(b)));
      case ReduceOp::kMin: return a < b ? a : b;
      case ReduceOp::kMax: return a > b ? a : b;
    }
  }
  return a;
}

// Reference for n sources on raw bytes; float16 / bfloat16 accumulate in
// float and round once at the end.
std::vector<uint8_t> refReduce(DataType dtype, ReduceOp op,
                               const std::vector<const std::vector<uint8_t>*>& srcs,
                               size_t count) {
  std::vector<uint8_t> out(count * elementSize(dtype));
  auto chain = [&](auto tag, auto widen, auto narrow) {
    using S = decltype(tag);
    for (size_t i = 0; i < count; ++i) {
      S s;
      std::memcpy(&s, srcs[0]->data() + i * sizeof(S), sizeof s);
      auto acc = widen(s);
      for (size_t k = 1; k < srcs.size(); ++k) {
        std::memcpy(&s, srcs[k]->data() + i * sizeof(S), sizeof s);
        acc = refOp(op, acc, widen(s));
      }
      S r = narrow(acc);
      std::memcpy(out.data() + i * sizeof(S), &r, sizeof r);
    }
  };
  auto same = [](auto v) { return v; };
  switch (dtype) {
    case DataType::kFloat32: chain(float{}, same, same); break;
    case DataType::kFloat64: chain(double{}, same, same); break;
    case DataType::kInt32: chain(int32_t{}, same, same); break;
    case DataType::kInt64: chain(int64_t{}, same, same); break;
    case DataType::kUInt8: chain(uint8_t{}, same, same); break;
    case DataType::kFloat16:
      chain(
          uint16_t{}, [](uint16_t h) { return halfToFloat(h); },
          [](float f) { return floatToHalf(f); });
      break;
    case DataType::kBFloat16:
      chain(
          uint16_t{}, [](uint16_t b) { return bfloat16ToFloat(b); },
          [](float f) { return floatToBfloat16(f); });
      break;
  }
  return out;
}

// Bitwise equality, except that any NaN equals any NaN (which NaN payload
// survives an op on two NaNs depends on the operand order the compiler
// picked).
::testing::AssertionResult sameElements(DataType dtype, const std::vector<uint8_t>& want,
                                        const std::vector<uint8_t>& got, size_t count) {
  size_t size = elementSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* w = want.data() + i * size;
    const uint8_t* g = got.data() + i * size;
    if (std::memcmp(w, g, size) == 0) continue;
    uint64_t wb = 0, gb = 0;
    std::memcpy(&wb, w, size);
    std::memcpy(&gb, g, size);
    bool bothNan = false;
    switch (dtype) {
      case DataType::kFloat32:
        bothNan = std::isnan(bitCast<float>(uint32_t(wb))) &&
                  std::isnan(bitCast<float>(uint32_t(gb)));
        break;
      case DataType::kFloat64:
        bothNan = std::isnan(bitCast<double>(wb)) && std::isnan(bitCast<double>(gb));
        break;
      case DataType::kFloat16:
        bothNan = isHalfNan(uint16_t(wb)) && isHalfNan(uint16_t(gb));
        break;
      case DataType::kBFloat16:
        bothNan = isBfloat16Nan(uint16_t(wb)) && isBfloat16Nan(uint16_t(gb));
        break;
      default: break;
    }
    if (bothNan) continue;
    return ::testing::AssertionFailure()
           << toString(dtype) << " element " << i << " of " << count << ": want 0x"
           << std::hex << wb << " got 0x" << gb;
  }
  return ::testing::AssertionSuccess();
}

// ---- inputs ------------------------------------------------------------------

// Random elements with the specials mixed in: floats get NaN, +-inf, +-0,
// subnormals and the largest values now and then; 16-bit floats and integers
// are uniformly random bit patterns (all classes, full range, wraparound).
std::vector<uint8_t> randomBuffer(DataType dtype, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(count * elementSize(dtype));
  auto pick = [&](auto special, auto normal, auto* dst) {
    for (size_t i = 0; i < count; ++i) {
      dst[i] = (rng() % 16 == 0) ? special() : normal();
    }
  };
  switch (dtype) {
    case DataType::kFloat32: {
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::infinity(),
                                0.0f,
                                -0.0f,
                                1e-40f,
                                -3e-42f,
                                std::numeric_limits<float>::max(),
                                -std::numeric_limits<float>::lowest()};
      pick([&] { return specials[rng() % std::size(specials)]; },
           [&] {
             // Exponents in [-30, 30]: products rarely overflow, sums round.
             int exponent = int(rng() % 61) - 30;
             return std::ldexp(float(rng() % (1u << 24)) / float(1u << 23), exponent) *
                    ((rng() & 1) ? -1.0f : 1.0f);
           },
           reinterpret_cast<float*>(out.data()));
      break;
    }
    case DataType::kFloat64: {
      const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                                 -std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::infinity(),
                                 0.0,
                                 -0.0,
                                 1e-310,
                                 std::numeric_limits<double>::max()};
      pick([&] { return specials[rng() % std::size(specials)]; },
           [&] {
             int exponent = int(rng() % 201) - 100;
             return std::ldexp(
                        double(rng() % (uint64_t{1} << 53)) / double(uint64_t{1} << 52),
                        exponent) *
                    ((rng() & 1) ? -1.0 : 1.0);
           },
           reinterpret_cast<double*>(out.data()));
      break;
    }
    default:
      for (size_t i = 0; i < out.size(); i += 8) {
        uint64_t r = rng();
        std::memcpy(out.data() + i, &r, std::min<size_t>(8, out.size() - i));
      }
      break;
  }
  return out;
}

std::string isaName(KernelIsa isa) {
  return std::string(toString(isa));
}

// ---- the grid ------------------------------------------------------------------

class ReduceGridTest
    : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp, KernelIsa>> {};

TEST_P(ReduceGridTest, Reduce2MatchesReference) {
  auto [dtype, op, isa] = GetParam();
  if (!isSupported(isa)) GTEST_SKIP() << toString(isa) << " not supported here";
  for (size_t count : kCounts) {
    SCOPED_TRACE("count " + std::to_string(count));
    auto a = randomBuffer(dtype, count, 1000 + count);
    auto b = randomBuffer(dtype, count, 2000 + count);
    auto want = refReduce(dtype, op, {&a, &b}, count);
    // Guard bytes after dst catch writes past the end.
    std::vector<uint8_t> dst(want.size() + 64, 0xa5);
    reduce2(dst.data(), a.data(), b.data(), count, dtype, op, isa);
    ASSERT_TRUE(sameElements(dtype, want, dst, count));
    for (size_t i = want.size(); i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xa5) << i;
  }
}

TEST_P(ReduceGridTest, ReduceManyMatchesReference) {
  auto [dtype, op, isa] = GetParam();
  if (!isSupported(isa)) GTEST_SKIP() << toString(isa) << " not supported here";
  for (int n : {1, 2, 3, 5}) {
    for (size_t count : kCounts) {
      // The largest count with 3 sources only, to keep the test quick.
      if (count > 1023 && n != 3) continue;
      SCOPED_TRACE("n " + std::to_string(n) + " count " + std::to_string(count));
      std::vector<std::vector<uint8_t>> bufs;
      for (int k = 0; k < n; ++k)
        bufs.push_back(randomBuffer(dtype, count, 77 * k + count));
      std::vector<const std::vector<uint8_t>*> refs;
      std::vector<const void*> ptrs;
      for (auto& buf : bufs) {
        refs.push_back(&buf);
        ptrs.push_back(buf.data());
      }
      auto want = refReduce(dtype, op, refs, count);
      std::vector<uint8_t> dst(want.size() + 64, 0xa5);
      reduceMany(dst.data(), ptrs.data(), n, count, dtype, op, isa);
      ASSERT_TRUE(sameElements(dtype, want, dst, count));
      for (size_t i = want.size(); i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xa5) << i;
    }
  }
}

// dst == a, dst == b (reduce2 and reduceInto), dst == a source of reduceMany.
TEST_P(ReduceGridTest, Aliasing) {
  auto [dtype, op, isa] = GetParam();
  if (!isSupported(isa)) GTEST_SKIP() << toString(isa) << " not supported here";
  for (size_t count : {size_t{17}, size_t{1023}, (size_t{1} << 16) + 5}) {
    SCOPED_TRACE("count " + std::to_string(count));
    auto a = randomBuffer(dtype, count, 5 + count);
    auto b = randomBuffer(dtype, count, 6 + count);
    auto c = randomBuffer(dtype, count, 7 + count);
    auto want = refReduce(dtype, op, {&a, &b}, count);

    auto inA = a;
    reduce2(inA.data(), inA.data(), b.data(), count, dtype, op, isa);
    EXPECT_TRUE(sameElements(dtype, want, inA, count)) << "dst == a";
    auto inB = b;
    reduce2(inB.data(), a.data(), inB.data(), count, dtype, op, isa);
    EXPECT_TRUE(sameElements(dtype, want, inB, count)) << "dst == b";
    if (isa == bestKernelIsa()) {
      auto into = a;
      reduceInto(into.data(), b.data(), count, dtype, op);
      EXPECT_TRUE(sameElements(dtype, want, into, count)) << "reduceInto";
    }

    auto want3 = refReduce(dtype, op, {&a, &b, &c}, count);
    for (int alias = 0; alias < 3; ++alias) {
      std::vector<uint8_t> bufs[3] = {a, b, c};
      const void* srcs[3] = {bufs[0].data(), bufs[1].data(), bufs[2].data()};
      reduceMany(bufs[alias].data(), srcs, 3, count, dtype, op, isa);
      EXPECT_TRUE(sameElements(dtype, want3, bufs[alias], count))
          << "reduceMany dst == srcs[" << alias << "]";
    }
  }
}

// Same inputs, same bits: twice on one path, and across all paths.
TEST_P(ReduceGridTest, DeterministicAcrossPaths) {
  auto [dtype, op, isa] = GetParam();
  if (!isSupported(isa)) GTEST_SKIP() << toString(isa) << " not supported here";
  size_t count = 4099;
  auto a = randomBuffer(dtype, count, 11);
  auto b = randomBuffer(dtype, count, 12);
  std::vector<uint8_t> onIsa(a.size()), again(a.size()), generic(a.size());
  reduce2(onIsa.data(), a.data(), b.data(), count, dtype, op, isa);
  reduce2(again.data(), a.data(), b.data(), count, dtype, op, isa);
  reduce2(generic.data(), a.data(), b.data(), count, dtype, op, KernelIsa::kGeneric);
  EXPECT_EQ(onIsa, again);
  EXPECT_TRUE(sameElements(dtype, generic, onIsa, count));
}

// Outputs of several MiB (large enough for the non-temporal store path) at
// every alignment: dst at 0, 1 element, and 1 byte (not even element
// aligned) past an aligned base, for reduce2 and reduceMany.
TEST_P(ReduceGridTest, LargeOutputsAtAnyAlignment) {
  auto [dtype, op, isa] = GetParam();
  if (!isSupported(isa)) GTEST_SKIP() << toString(isa) << " not supported here";
  if (op != ReduceOp::kSum && op != ReduceOp::kMax) GTEST_SKIP() << "sum and max suffice";
  size_t size = elementSize(dtype);
  size_t count = (size_t{5} << 20) / size + 29;
  auto a = randomBuffer(dtype, count, 41);
  auto b = randomBuffer(dtype, count, 42);
  auto want = refReduce(dtype, op, {&a, &b}, count);
  std::vector<uint8_t> storage(count * size + 128);
  uint8_t* base =
      storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64);
  for (size_t offset : {size_t{0}, size, size_t{1}}) {
    if (offset == 1 && size == 1) continue;
    SCOPED_TRACE("dst offset " + std::to_string(offset));
    uint8_t* dst = base + offset;
    reduce2(dst, a.data(), b.data(), count, dtype, op, isa);
    ASSERT_TRUE(
        sameElements(dtype, want, std::vector<uint8_t>(dst, dst + count * size), count));
    std::memset(dst, 0, count * size);
    const void* srcs[2] = {a.data(), b.data()};
    reduceMany(dst, srcs, 2, count, dtype, op, isa);
    ASSERT_TRUE(
        sameElements(dtype, want, std::vector<uint8_t>(dst, dst + count * size), count));
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesOpsIsas, ReduceGridTest,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::ValuesIn(kAllOps),
                                            ::testing::ValuesIn(kAllIsas)),
                         [](const auto& info) {
                           return std::string(toString(std::get<0>(info.param))) + "_" +
                                  std::string(toString(std::get<1>(info.param))) + "_" +
                                  isaName(std::get<2>(info.param));
                         });

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

// ---- specific semantics -------------------------------------------------------

TEST(ReduceSemantics, NanPropagatesThroughMinMax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {nan, 1.0f, nan, 2.0f, -1.0f};
  std::vector<float> b = {1.0f, nan, nan, 3.0f, -2.0f};
  for (KernelIsa isa : supportedIsas()) {
    std::vector<float> lo(a.size()), hi(a.size());
    reduce2(lo.data(), a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kMin,
            isa);
    reduce2(hi.data(), a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kMax,
            isa);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(std::isnan(lo[i])) << i;
      EXPECT_TRUE(std::isnan(hi[i])) << i;
    }
    EXPECT_EQ(lo[3], 2.0f);
    EXPECT_EQ(hi[3], 3.0f);
    EXPECT_EQ(lo[4], -2.0f);
    EXPECT_EQ(hi[4], -1.0f);
  }
}

TEST(ReduceSemantics, IntegersWrap) {
  for (KernelIsa isa : supportedIsas()) {
    SCOPED_TRACE(isaName(isa));
    uint8_t u[2] = {200, 16}, v[2] = {100, 16}, out8[2];
    reduce2(out8, u, v, 2, DataType::kUInt8, ReduceOp::kSum, isa);
    EXPECT_EQ(out8[0], 44);  // 300 mod 256
    reduce2(out8, u, v, 2, DataType::kUInt8, ReduceOp::kProduct, isa);
    EXPECT_EQ(out8[0], uint8_t(20000 % 256));
    EXPECT_EQ(out8[1], 0);  // 256 mod 256
    int32_t p[2] = {std::numeric_limits<int32_t>::max(), -5}, q[2] = {1, 3}, out32[2];
    reduce2(out32, p, q, 2, DataType::kInt32, ReduceOp::kSum, isa);
    EXPECT_EQ(out32[0], std::numeric_limits<int32_t>::min());
    reduce2(out32, p, q, 2, DataType::kInt32, ReduceOp::kMin, isa);
    EXPECT_EQ(out32[1], -5);  // signed comparison
    int64_t r[1] = {int64_t{1} << 62}, s[1] = {4}, out64[1];
    reduce2(out64, r, s, 1, DataType::kInt64, ReduceOp::kProduct, isa);
    EXPECT_EQ(out64[0], 0);
    uint8_t big[1] = {250}, small[1] = {3};
    reduce2(out8, big, small, 1, DataType::kUInt8, ReduceOp::kMax, isa);
    EXPECT_EQ(out8[0], 250);  // unsigned comparison
  }
}

// ---- bad arguments --------------------------------------------------------------

template <class F>
void expectInvalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no throw, wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ReduceArguments, Rejected) {
  float x[4] = {}, y[4] = {};
  const void* srcs[2] = {x, y};
  expectInvalid([&] { reduce2(x, x, y, 4, static_cast<DataType>(42), ReduceOp::kSum); },
                "unknown dtype value 42");
  expectInvalid(
      [&] { reduce2(x, x, y, 4, DataType::kFloat32, static_cast<ReduceOp>(9)); },
      "unknown reduce op value 9");
  expectInvalid([&] { reduce2(nullptr, x, y, 4, DataType::kFloat32, ReduceOp::kSum); },
                "null dst");
  expectInvalid([&] { reduce2(x, x, nullptr, 4, DataType::kFloat32, ReduceOp::kSum); },
                "null b");
  expectInvalid([&] { reduceMany(x, srcs, 0, 4, DataType::kFloat32, ReduceOp::kSum); },
                "at least one source");
  const void* withNull[2] = {x, nullptr};
  expectInvalid(
      [&] { reduceMany(x, withNull, 2, 4, DataType::kFloat32, ReduceOp::kSum); },
      "null source 1");
  expectInvalid(
      [&] { reduce2(x, x, y, SIZE_MAX / 2, DataType::kFloat64, ReduceOp::kSum); },
      "overflows");
  expectInvalid([&] { divideInPlace(nullptr, 3, DataType::kFloat32, 2.0); }, "null buf");
  // Count 0 with null pointers is fine.
  reduce2(nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  reduceMany(nullptr, nullptr, 1, 0, DataType::kFloat32, ReduceOp::kSum);
  divideInPlace(nullptr, 0, DataType::kInt32, 2.0);
  for (KernelIsa isa : kAllIsas) {
    if (!isSupported(isa)) {
      expectInvalid([&] { reduce2(x, x, y, 4, DataType::kFloat32, ReduceOp::kSum, isa); },
                    "not supported");
    }
  }
}

TEST(ReduceDispatch, BestIsSupported) {
  EXPECT_TRUE(isSupported(KernelIsa::kGeneric));
  EXPECT_TRUE(isSupported(bestKernelIsa()));
  std::printf("reduce kernels: best path on this CPU is %s\n",
              std::string(toString(bestKernelIsa())).c_str());
}

// ---- microbenchmark (disabled by default) -------------------------------------

// Best of `reps` runs, in seconds.
template <class F>
double bestSeconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

// GB/s = bytes of one input array / time ("algorithm bandwidth"), and the
// memory traffic (bytes read + written, 3 arrays for reduce2, 2 for memcpy).
// Every buffer is 64 MiB; pages are touched before timing.
TEST(ReduceBench, DISABLED_Bandwidth) {
  constexpr size_t kBytes = size_t{64} << 20;
  constexpr int kReps = 20;
  std::vector<uint8_t> a(kBytes), b(kBytes), c(kBytes, 0);
  // Ordinary values of each type (no NaN, no subnormals).
  auto fill = [&](DataType dtype) {
    std::mt19937 rng(1);
    size_t size = elementSize(dtype);
    for (size_t i = 0; i < kBytes; i += size) {
      float f = float(rng() % 1000) / 7.0f + 1.0f;
      uint16_t h = dtype == DataType::kFloat16 ? floatToHalf(f) : floatToBfloat16(f);
      std::memcpy(&a[i], size == 4 ? static_cast<const void*>(&f) : &h, size);
      std::memcpy(&b[i], size == 4 ? static_cast<const void*>(&f) : &h, size);
    }
  };
  fill(DataType::kFloat32);
  auto report = [&](const char* what, double seconds, int arrays) {
    double gb = double(kBytes) / 1e9;
    std::printf("%-44s %8.2f ms  %7.2f GB/s per array  %7.2f GB/s traffic\n", what,
                seconds * 1e3, gb / seconds, arrays * gb / seconds);
  };
  report("memcpy 64 MiB",
         bestSeconds(kReps, [&] { std::memcpy(c.data(), a.data(), kBytes); }), 2);
  for (KernelIsa isa : supportedIsas()) {
    std::string name = isaName(isa);
    struct Case {
      DataType dtype;
      const char* label;
    };
    for (Case k :
         {Case{DataType::kFloat32, "float32"}, Case{DataType::kFloat16, "float16"},
          Case{DataType::kBFloat16, "bfloat16"}}) {
      size_t count = kBytes / elementSize(k.dtype);
      fill(k.dtype);
      std::string base = name + " " + k.label + " sum ";
      report((base + "reduce2 c=a+b").c_str(),
             bestSeconds(kReps,
                         [&] {
                           reduce2(c.data(), a.data(), b.data(), count, k.dtype,
                                   ReduceOp::kSum, isa);
                         }),
             3);
      report((base + "reduce2 a=a+b").c_str(),
             bestSeconds(kReps,
                         [&] {
                           reduce2(a.data(), a.data(), b.data(), count, k.dtype,
                                   ReduceOp::kSum, isa);
                         }),
             3);
      const void* srcs[2] = {a.data(), b.data()};
      report((base + "reduceMany n=2").c_str(),
             bestSeconds(kReps,
                         [&] {
                           reduceMany(c.data(), srcs, 2, count, k.dtype, ReduceOp::kSum,
                                      isa);
                         }),
             3);
    }
  }
}

}  // namespace
}  // namespace kolo::collectives
