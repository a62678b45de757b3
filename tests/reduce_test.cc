// Tests of the reduction kernels (src/collectives/reduce.h): every dtype x op
// x count on every instruction-set path this CPU supports, against a scalar
// reference (support/reduce_reference.h); aliasing; NaN and integer
// semantics; bad arguments. divideInPlace is tested in reduce_divide_test,
// the float16 / bfloat16 conversions and accumulation in reduce_half_test.
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
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/reduce_reference.h"

namespace kolo::collectives::reduce_reference {
namespace {

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
}  // namespace kolo::collectives::reduce_reference
