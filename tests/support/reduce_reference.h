// What the tests of the reduction kernels (reduce_test, reduce_divide_test,
// reduce_half_test; src/collectives/reduce.h) share: the dtype, op, kernel
// path and count grids, a scalar reference of every op written the plain
// way, the comparison of results bit for bit (NaNs as a class), and random
// inputs with the special values mixed in.
#pragma once

#include <gtest/gtest.h>
#include <kolo/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/reduce.h"

namespace kolo::collectives::reduce_reference {

constexpr DataType kAllTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                ReduceOp::kMax, ReduceOp::kProduct};
constexpr KernelIsa kAllIsas[] = {KernelIsa::kGeneric, KernelIsa::kAvx2,
                                  KernelIsa::kAvx512};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1023, (size_t{1} << 20) + 3};

inline std::vector<KernelIsa> supportedIsas() {
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

inline bool isHalfNan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}
inline bool isBfloat16Nan(uint16_t b) {
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
inline std::vector<uint8_t> refReduce(
    DataType dtype, ReduceOp op, const std::vector<const std::vector<uint8_t>*>& srcs,
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
inline ::testing::AssertionResult sameElements(DataType dtype,
                                               const std::vector<uint8_t>& want,
                                               const std::vector<uint8_t>& got,
                                               size_t count) {
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
inline std::vector<uint8_t> randomBuffer(DataType dtype, size_t count, uint64_t seed) {
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

inline std::string isaName(KernelIsa isa) {
  return std::string(toString(isa));
}

}  // namespace kolo::collectives::reduce_reference
