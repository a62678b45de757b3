// The CUDA layer of the collectives (src/collectives/cuda/, docs/gpu.md):
// - in every build: whether it was built with CUDA (KOLO_TEST_EXPECT_CUDA,
//   set by tests/CMakeLists.txt from the build's KOLO_HAVE_CUDA), the device
//   probe answering without crashing, the float16 / bfloat16 bit
//   conversions the kernels share with the host, checked against the CPU
//   kernels' own conversions (every 16-bit value, a sweep of float32 bits),
//   and the kernels' per-element arithmetic (element_ops.h) run on the host
//   against the CPU kernels for every dtype and op;
// - without a device: every device call is a clear error, never a crash;
// - with a device (skipped otherwise, with the reason): every dtype and op
//   of the device kernels element by element against the CPU kernels,
//   in place and out of place, average, scaling and float16 compression.
#include <gtest/gtest.h>
#include <kolo/error.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/element_ops.h"
#include "collectives/cuda/nccl_library.h"
#include "collectives/elementwise.h"
#include "collectives/half_bits.h"
#include "collectives/reduce.h"

#ifndef KOLO_TEST_EXPECT_CUDA
#error "tests/CMakeLists.txt defines KOLO_TEST_EXPECT_CUDA (the build's KOLO_HAVE_CUDA)"
#endif

namespace {

namespace cuda = kolo::collectives::cuda;
namespace cpu = kolo::collectives;
using kolo::DataType;
using kolo::ReduceOp;

constexpr DataType kDtypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                             ReduceOp::kMax, ReduceOp::kProduct};

// Skips a test that needs a device, saying why there is none.
#define REQUIRE_CUDA_DEVICE()                                                   \
  do {                                                                          \
    const auto& probe_ = cuda::probeDevices();                                  \
    if (probe_.count == 0) GTEST_SKIP() << "no CUDA device: " << probe_.reason; \
  } while (0)

template <typename Fn>
std::string errorOf(Fn&& fn, kolo::ErrorCode expected) {
  try {
    fn();
  } catch (const kolo::Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no kolo::Error thrown";
  return "";
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// ---- every build -------------------------------------------------------------

TEST(CudaBuild, BuiltMatchesTheBuildOption) {
  EXPECT_EQ(cuda::built(), KOLO_TEST_EXPECT_CUDA != 0);
}

TEST(CudaBuild, ProbeAnswersWithoutCrashing) {
  const cuda::DeviceProbe& probe = cuda::probeDevices();
  EXPECT_EQ(&probe, &cuda::probeDevices()) << "asked once, cached";
  EXPECT_GE(probe.count, 0);
  EXPECT_EQ(probe.count == 0, !probe.reason.empty()) << probe.reason;
  if (!cuda::built()) {
    EXPECT_EQ(probe.count, 0);
    EXPECT_NE(probe.reason.find("no CUDA support"), std::string::npos) << probe.reason;
    EXPECT_EQ(probe.runtimeVersion, 0);
    return;
  }
  EXPECT_GT(probe.runtimeVersion, 0) << "the static CUDA runtime answers without a GPU";
  if (probe.count == 0) {
    EXPECT_NE(probe.reason.find("cudaGetDeviceCount"), std::string::npos) << probe.reason;
  }
}

// ---- NCCL, loaded with dlopen (no device needed to load it) ----------------------

TEST(NcclLibrary, LoadsAndResolvesEveryEntryPoint) {
  const cuda::NcclLibrary* nccl = nullptr;
  try {
    nccl = &cuda::NcclLibrary::load();
  } catch (const kolo::Error& e) {
    EXPECT_EQ(e.code(), kolo::ErrorCode::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot load the NCCL library libnccl.so.2"),
              std::string::npos)
        << e.what();
    GTEST_SKIP() << "no NCCL on this machine: " << e.what();
  }
  EXPECT_EQ(nccl, &cuda::NcclLibrary::load()) << "loaded once";
  EXPECT_NE(nccl->path().find("libnccl.so.2"), std::string::npos) << nccl->path();
  const int version = nccl->version();
  EXPECT_GE(version, 20900) << "NCCL 2.9 or later: major * 10000 + minor * 100 + patch";
  EXPECT_LT(version, 100000);
  EXPECT_NE(nccl->getErrorString(0), nullptr);
  for (const void* entry : {reinterpret_cast<const void*>(nccl->getUniqueId),
                            reinterpret_cast<const void*>(nccl->commInitRank),
                            reinterpret_cast<const void*>(nccl->commDestroy),
                            reinterpret_cast<const void*>(nccl->commAbort),
                            reinterpret_cast<const void*>(nccl->commGetAsyncError),
                            reinterpret_cast<const void*>(nccl->allReduce),
                            reinterpret_cast<const void*>(nccl->broadcast),
                            reinterpret_cast<const void*>(nccl->allGather),
                            reinterpret_cast<const void*>(nccl->reduceScatter),
                            reinterpret_cast<const void*>(nccl->send),
                            reinterpret_cast<const void*>(nccl->recv),
                            reinterpret_cast<const void*>(nccl->groupStart),
                            reinterpret_cast<const void*>(nccl->groupEnd)}) {
    EXPECT_NE(entry, nullptr);
  }
}

TEST(NcclLibrary, AMissingLibraryOrSymbolIsAClearError) {
  std::string message = errorOf([] { cuda::NcclLibrary::open("libnccl-absent.so.2"); },
                                kolo::ErrorCode::kIo);
  EXPECT_NE(message.find("cannot load the NCCL library libnccl-absent.so.2: "),
            std::string::npos)
      << message;
  // A real library that is not NCCL (the C library is always there).
  message = errorOf([] { cuda::NcclLibrary::open("libc.so.6"); }, kolo::ErrorCode::kIo);
  EXPECT_NE(message.find("NCCL library libc.so.6 has no symbol ncclGetVersion"),
            std::string::npos)
      << message;
}

// ---- without a device -----------------------------------------------------------

TEST(CudaKernels, WithoutADeviceEveryCallIsAClearError) {
  if (cuda::probeDevices().count > 0) {
    GTEST_SKIP() << "a CUDA device is present (" << cuda::probeDevices().count << ")";
  }
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  std::vector<uint16_t> h(8);
  const void* srcs[3] = {a.data(), b.data(), a.data()};
  const std::pair<const char*, std::function<void()>> calls[] = {
      {"cuda::reduce2",
       [&] {
         cuda::reduce2(a.data(), a.data(), b.data(), 8, DataType::kFloat32,
                       ReduceOp::kSum, nullptr);
       }},
      {"cuda::reduceMany",
       [&] {
         cuda::reduceMany(a.data(), srcs, 3, 8, DataType::kFloat32, ReduceOp::kMax,
                          nullptr);
       }},
      {"cuda::divideInPlace",
       [&] { cuda::divideInPlace(a.data(), 8, DataType::kFloat32, 2.0, nullptr); }},
      {"cuda::scaleInPlace",
       [&] { cuda::scaleInPlace(a.data(), 8, DataType::kFloat32, 0.5, nullptr); }},
      {"cuda::compressToHalf",
       [&] { cuda::compressToHalf(h.data(), a.data(), 8, nullptr); }},
      {"cuda::decompressFromHalf",
       [&] { cuda::decompressFromHalf(a.data(), h.data(), 8, nullptr); }},
      {"DeviceBuffer", [&] { cuda::DeviceBuffer buffer(64, 0); }},
  };
  for (const auto& [name, call] : calls) {
    const std::string message = errorOf(call, kolo::ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find("no CUDA device: " + cuda::probeDevices().reason),
              std::string::npos)
        << message;
  }
  EXPECT_EQ(a, std::vector<float>(8, 1.0f)) << "nothing written";
}

// The checks that come before the device is needed (CUDA build only: the
// build without CUDA refuses every call the same way).
TEST(CudaKernels, BadArgumentsAreNamedBeforeTheDeviceIsNeeded) {
  if (!cuda::built()) GTEST_SKIP() << "no CUDA device: " << cuda::probeDevices().reason;
  float x = 0;
  const void* srcs[1] = {&x};
  auto invalid = kolo::ErrorCode::kInvalidArgument;
  EXPECT_NE(errorOf(
                [&] {
                  cuda::reduce2(&x, &x, &x, 1, static_cast<DataType>(42), ReduceOp::kSum,
                                nullptr);
                },
                invalid)
                .find("unknown dtype value 42"),
            std::string::npos);
  EXPECT_NE(errorOf(
                [&] {
                  cuda::reduce2(&x, &x, &x, 1, DataType::kFloat32,
                                static_cast<ReduceOp>(9), nullptr);
                },
                invalid)
                .find("unknown reduce op value 9"),
            std::string::npos);
  EXPECT_NE(errorOf(
                [&] {
                  cuda::reduceMany(&x, srcs, 0, 1, DataType::kFloat32, ReduceOp::kSum,
                                   nullptr);
                },
                invalid)
                .find("needs 1 to 64 sources, got n = 0"),
            std::string::npos);
  EXPECT_NE(errorOf(
                [&] {
                  cuda::reduce2(&x, nullptr, &x, 1, DataType::kFloat32, ReduceOp::kSum,
                                nullptr);
                },
                invalid)
                .find("null a buffer with count 1"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { cuda::divideInPlace(&x, 1, DataType::kInt32, 1.5, nullptr); },
                    invalid)
                .find("int32 needs a whole divisor in [1, 2^53], got 1.5"),
            std::string::npos);
  EXPECT_NE(errorOf(
                [&] {
                  cuda::reduce2(&x, &x, &x, SIZE_MAX / 2, DataType::kFloat64,
                                ReduceOp::kSum, nullptr);
                },
                invalid)
                .find("overflows the address space"),
            std::string::npos);
}

// ---- with a device ----------------------------------------------------------------

// count elements of dtype from a seeded generator: floats mostly in [-4, 4]
// with NaN, infinities, signed zeros, subnormals and values near the type's
// overflow mixed in; integers over their whole range (sums and products
// wrap).
std::vector<uint8_t> makeInput(DataType dtype, size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  std::vector<uint8_t> out(count * kolo::elementSize(dtype));
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             0.0,
                             -0.0,
                             1e-41,
                             6e-8,
                             65000.0,
                             3e38};
  for (size_t i = 0; i < count; ++i) {
    double v = (rng() % 16 == 0) ? specials[rng() % std::size(specials)] : value(rng);
    uint8_t* p = out.data() + i * kolo::elementSize(dtype);
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (dtype) {
      case DataType::kFloat32: put(static_cast<float>(v)); break;
      case DataType::kFloat64: put(v); break;
      case DataType::kFloat16: put(cpu::floatToHalf(static_cast<float>(v))); break;
      case DataType::kBFloat16: put(cpu::floatToBfloat16(static_cast<float>(v))); break;
      case DataType::kInt32: put(static_cast<int32_t>(rng())); break;
      case DataType::kInt64:
        put(static_cast<int64_t>((uint64_t{rng()} << 32) ^ rng()));
        break;
      case DataType::kUInt8: put(static_cast<uint8_t>(rng())); break;
    }
  }
  return out;
}

bool isNan(DataType dtype, const uint8_t* p) {
  uint16_t h;
  switch (dtype) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return std::isnan(f);
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, sizeof d);
      return std::isnan(d);
    }
    case DataType::kFloat16:
      std::memcpy(&h, p, 2);
      return std::isnan(cpu::halfToFloat(h));
    case DataType::kBFloat16:
      std::memcpy(&h, p, 2);
      return std::isnan(cpu::bfloat16ToFloat(h));
    default: return false;
  }
}

// Element by element: the same bits, or NaN on both sides (reduce.h allows
// another NaN payload).
void expectSameElements(DataType dtype, const std::vector<uint8_t>& want,
                        const std::vector<uint8_t>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  const size_t esize = kolo::elementSize(dtype);
  int reported = 0;
  for (size_t i = 0; i < want.size() / esize && reported < 5; ++i) {
    const uint8_t* w = want.data() + i * esize;
    const uint8_t* g = got.data() + i * esize;
    if (std::memcmp(w, g, esize) == 0 || (isNan(dtype, w) && isNan(dtype, g))) continue;
    ADD_FAILURE() << what << ": element " << i << " differs from the CPU kernels";
    ++reported;
  }
}

std::vector<uint8_t> runOnDevice(DataType dtype,
                                 const std::vector<std::vector<uint8_t>>& inputs,
                                 ReduceOp op, bool inPlace) {
  const size_t bytes = inputs[0].size();
  const size_t count = bytes / kolo::elementSize(dtype);
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> buffers;
  std::vector<const void*> srcs;
  for (const auto& input : inputs) {
    buffers.push_back(std::make_unique<cuda::DeviceBuffer>(bytes, 0));
    buffers.back()->upload(input.data(), bytes);
    srcs.push_back(buffers.back()->data());
  }
  cuda::DeviceBuffer out(bytes, 0);
  void* dst = inPlace ? buffers[0]->data() : out.data();
  const int n = static_cast<int>(inputs.size());
  if (n == 2) {
    cuda::reduce2(dst, srcs[0], srcs[1], count, dtype, op, nullptr);
  } else {
    cuda::reduceMany(dst, srcs.data(), n, count, dtype, op, nullptr);
  }
  if (op == ReduceOp::kAverage) cuda::divideInPlace(dst, count, dtype, n, nullptr);
  cuda::synchronize(nullptr);
  std::vector<uint8_t> result(bytes);
  (inPlace ? *buffers[0] : out).download(result.data(), bytes);
  return result;
}

// ---- the kernels' per-element arithmetic, on the host --------------------------

namespace ops = cuda::ops;

template <class L, ops::OpKind K>
void hostReduceWith(void* dst, const void* const* srcs, int n, size_t count) {
  auto* d = static_cast<typename L::Storage*>(dst);
  for (size_t i = 0; i < count; ++i) d[i] = ops::reduceElement<L, K>(srcs, n, i);
}

template <class L>
void hostReduceFor(void* dst, const void* const* srcs, int n, size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return hostReduceWith<L, ops::OpKind::kSum>(dst, srcs, n, count);
    case ReduceOp::kMin: return hostReduceWith<L, ops::OpKind::kMin>(dst, srcs, n, count);
    case ReduceOp::kMax: return hostReduceWith<L, ops::OpKind::kMax>(dst, srcs, n, count);
    case ReduceOp::kProduct:
      return hostReduceWith<L, ops::OpKind::kProduct>(dst, srcs, n, count);
  }
}

// What reduceManyKernel computes, element by element on the host.
void hostReduce(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return hostReduceFor<ops::PlainLanes<float>>(dst, srcs, n, count, op);
    case DataType::kFloat64:
      return hostReduceFor<ops::PlainLanes<double>>(dst, srcs, n, count, op);
    case DataType::kFloat16:
      return hostReduceFor<ops::HalfLanes>(dst, srcs, n, count, op);
    case DataType::kBFloat16:
      return hostReduceFor<ops::BFloat16Lanes>(dst, srcs, n, count, op);
    case DataType::kInt32:
      return hostReduceFor<ops::PlainLanes<int32_t>>(dst, srcs, n, count, op);
    case DataType::kInt64:
      return hostReduceFor<ops::PlainLanes<int64_t>>(dst, srcs, n, count, op);
    case DataType::kUInt8:
      return hostReduceFor<ops::PlainLanes<uint8_t>>(dst, srcs, n, count, op);
  }
}

template <class T, class F>
void forEach(void* buf, size_t count, F f) {
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = f(p[i]);
}

// What divideFloatKernel / divideIntegerKernel compute.
void hostDivide(void* buf, size_t count, DataType dtype, double divisor) {
  const auto whole = static_cast<long long>(divisor);
  const auto f = static_cast<float>(divisor);
  switch (dtype) {
    case DataType::kFloat32:
      return forEach<float>(buf, count, [f](float v) {
        return ops::divideElement<ops::PlainLanes<float>>(v, f);
      });
    case DataType::kFloat64:
      return forEach<double>(buf, count, [divisor](double v) {
        return ops::divideElement<ops::PlainLanes<double>>(v, divisor);
      });
    case DataType::kFloat16:
      return forEach<uint16_t>(buf, count, [f](uint16_t v) {
        return ops::divideElement<ops::HalfLanes>(v, f);
      });
    case DataType::kBFloat16:
      return forEach<uint16_t>(buf, count, [f](uint16_t v) {
        return ops::divideElement<ops::BFloat16Lanes>(v, f);
      });
    case DataType::kInt32:
      return forEach<int32_t>(
          buf, count, [whole](int32_t v) { return ops::divideIntegerElement(v, whole); });
    case DataType::kInt64:
      return forEach<int64_t>(
          buf, count, [whole](int64_t v) { return ops::divideIntegerElement(v, whole); });
    case DataType::kUInt8:
      return forEach<uint8_t>(
          buf, count, [whole](uint8_t v) { return ops::divideIntegerElement(v, whole); });
  }
}

// What the scale kernels compute.
void hostScale(void* buf, size_t count, DataType dtype, double factor) {
  const auto f = static_cast<float>(factor);
  switch (dtype) {
    case DataType::kFloat32:
      return forEach<float>(buf, count,
                            [f](float v) { return ops::scaleFloatElement(v, f); });
    case DataType::kFloat64:
      return forEach<double>(
          buf, count, [factor](double v) { return ops::scaleFloatElement(v, factor); });
    case DataType::kFloat16:
      return forEach<uint16_t>(buf, count, [factor](uint16_t v) {
        return ops::scaleHalfElement<ops::HalfLanes>(v, factor);
      });
    case DataType::kBFloat16:
      return forEach<uint16_t>(buf, count, [factor](uint16_t v) {
        return ops::scaleHalfElement<ops::BFloat16Lanes>(v, factor);
      });
    case DataType::kInt32:
      return forEach<int32_t>(buf, count, [factor](int32_t v) {
        return ops::scaleIntegerElement(v, factor);
      });
    case DataType::kInt64:
      return forEach<int64_t>(buf, count, [factor](int64_t v) {
        return ops::scaleIntegerElement(v, factor);
      });
    case DataType::kUInt8:
      return forEach<uint8_t>(buf, count, [factor](uint8_t v) {
        return ops::scaleIntegerElement(v, factor);
      });
  }
}

TEST(CudaElementOps, EveryDtypeAndOpMatchesTheCpuKernelsOnTheHost) {
  unsigned seed = 1000;
  for (DataType dtype : kDtypes) {
    const std::string type(kolo::toString(dtype));
    for (ReduceOp op : kOps) {
      for (int n : {2, 3, 5}) {
        for (size_t count : {size_t{1}, size_t{1000}, size_t{4099}}) {
          std::vector<std::vector<uint8_t>> inputs;
          std::vector<const void*> srcs;
          for (int k = 0; k < n; ++k) inputs.push_back(makeInput(dtype, count, seed++));
          for (const auto& input : inputs) srcs.push_back(input.data());
          std::vector<uint8_t> want(inputs[0].size()), got(inputs[0].size());
          if (n == 2) {
            cpu::reduce2(want.data(), srcs[0], srcs[1], count, dtype, op);
          } else {
            cpu::reduceMany(want.data(), srcs.data(), n, count, dtype, op);
          }
          hostReduce(got.data(), srcs.data(), n, count, dtype, op);
          if (op == ReduceOp::kAverage) {
            cpu::divideInPlace(want.data(), count, dtype, n);
            hostDivide(got.data(), count, dtype, n);
          }
          expectSameElements(dtype, want, got,
                             type + " " + std::string(kolo::toString(op)) + " n=" +
                                 std::to_string(n) + " count=" + std::to_string(count));
        }
      }
    }
    const bool integer = dtype == DataType::kInt32 || dtype == DataType::kInt64 ||
                         dtype == DataType::kUInt8;
    for (double factor : {3.0, 4.0, 7.0}) {
      const std::vector<uint8_t> input = makeInput(dtype, 4099, seed++);
      std::vector<uint8_t> want = input, got = input;
      cpu::divideInPlace(want.data(), 4099, dtype, factor);
      hostDivide(got.data(), 4099, dtype, factor);
      expectSameElements(dtype, want, got, type + " / " + std::to_string(factor));
      const double scale = integer ? 1.0 / factor : factor * 0.37;
      want = input;
      got = input;
      cpu::scaleInPlace(want.data(), 4099, dtype, scale);
      hostScale(got.data(), 4099, dtype, scale);
      expectSameElements(dtype, want, got, type + " * " + std::to_string(scale));
    }
  }
}

TEST(CudaKernels, EveryDtypeAndOpMatchesTheCpuKernels) {
  REQUIRE_CUDA_DEVICE();
  unsigned seed = 1;
  for (DataType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      for (int n : {2, 3, 5}) {
        for (size_t count : {size_t{1}, size_t{1000}, size_t{70001}}) {
          std::vector<std::vector<uint8_t>> inputs;
          std::vector<const void*> srcs;
          for (int k = 0; k < n; ++k) inputs.push_back(makeInput(dtype, count, seed++));
          for (const auto& input : inputs) srcs.push_back(input.data());
          std::vector<uint8_t> want(inputs[0].size());
          if (n == 2) {
            cpu::reduce2(want.data(), srcs[0], srcs[1], count, dtype, op);
          } else {
            cpu::reduceMany(want.data(), srcs.data(), n, count, dtype, op);
          }
          if (op == ReduceOp::kAverage) cpu::divideInPlace(want.data(), count, dtype, n);
          for (bool inPlace : {false, true}) {
            const std::string what =
                std::string(kolo::toString(dtype)) + " " +
                std::string(kolo::toString(op)) + " n=" + std::to_string(n) +
                " count=" + std::to_string(count) + (inPlace ? " in place" : "");
            expectSameElements(dtype, want, runOnDevice(dtype, inputs, op, inPlace),
                               what);
          }
        }
      }
    }
  }
}

TEST(CudaKernels, DivideAndScaleMatchTheCpu) {
  REQUIRE_CUDA_DEVICE();
  const size_t count = 4097;
  for (DataType dtype : kDtypes) {
    const bool integer = dtype == DataType::kInt32 || dtype == DataType::kInt64 ||
                         dtype == DataType::kUInt8;
    for (double factor : {3.0, 4.0, 7.0}) {
      std::vector<uint8_t> input = makeInput(dtype, count, 77);
      cuda::DeviceBuffer buffer(input.size(), 0);
      std::vector<uint8_t> want = input, got(input.size());
      cpu::divideInPlace(want.data(), count, dtype, factor);
      buffer.upload(input.data(), input.size());
      cuda::divideInPlace(buffer.data(), count, dtype, factor, nullptr);
      cuda::synchronize(nullptr);
      buffer.download(got.data(), got.size());
      expectSameElements(
          dtype, want, got,
          std::string(kolo::toString(dtype)) + " / " + std::to_string(factor));

      // Scaling integers beyond their range is undefined on the CPU: only
      // factors that shrink them.
      const double scale = integer ? 1.0 / factor : factor * 0.37;
      want = input;
      cpu::scaleInPlace(want.data(), count, dtype, scale);
      buffer.upload(input.data(), input.size());
      cuda::scaleInPlace(buffer.data(), count, dtype, scale, nullptr);
      cuda::synchronize(nullptr);
      buffer.download(got.data(), got.size());
      expectSameElements(
          dtype, want, got,
          std::string(kolo::toString(dtype)) + " * " + std::to_string(scale));
    }
  }
}

TEST(CudaKernels, Float16CompressionMatchesTheCpuConversions) {
  REQUIRE_CUDA_DEVICE();
  const size_t count = 100003;
  std::vector<uint8_t> raw = makeInput(DataType::kFloat32, count, 5);
  std::vector<float> input(count);
  std::memcpy(input.data(), raw.data(), raw.size());
  cuda::DeviceBuffer src(count * 4, 0), half(count * 2, 0), back(count * 4, 0);
  src.upload(input.data(), count * 4);
  cuda::compressToHalf(static_cast<uint16_t*>(half.data()),
                       static_cast<float*>(src.data()), count, nullptr);
  cuda::decompressFromHalf(static_cast<float*>(back.data()),
                           static_cast<uint16_t*>(half.data()), count, nullptr);
  cuda::synchronize(nullptr);
  std::vector<uint16_t> gotHalf(count);
  std::vector<float> gotBack(count);
  half.download(gotHalf.data(), count * 2);
  back.download(gotBack.data(), count * 4);
  for (size_t i = 0; i < count; ++i) {
    const uint16_t want = cpu::floatToHalf(input[i]);
    ASSERT_EQ(gotHalf[i], want) << "element " << i;
    ASSERT_EQ(bitsOf(gotBack[i]), bitsOf(cpu::halfToFloat(want))) << "element " << i;
  }
}

TEST(CudaKernels, HostMemoryIsRefusedByName) {
  REQUIRE_CUDA_DEVICE();
  std::vector<float> host(16, 1.0f);
  cuda::DeviceBuffer device(16 * sizeof(float), 0);
  const std::string message = errorOf(
      [&] {
        cuda::reduce2(device.data(), host.data(), device.data(), 16, DataType::kFloat32,
                      ReduceOp::kSum, nullptr);
      },
      kolo::ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("host memory the device cannot address"), std::string::npos)
      << message;
}

}  // namespace
