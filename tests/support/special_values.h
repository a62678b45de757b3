// Test inputs for the reduction kernels: random values of any dtype with
// the awkward ones mixed in, and a dtype-aware NaN test. Header only.
#pragma once

#include <kolo/types.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "collectives/half_bits.h"
#include "collectives/reduce.h"

namespace kolo::test {

// Floats mostly in [-4, 4], one in 16 a NaN, an infinity, a signed zero, a
// subnormal or a value near overflow; integers over their whole range.
inline std::vector<uint8_t> randomSpecialValues(DataType dtype, size_t count,
                                                unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             0.0,
                             -0.0,
                             1e-41,
                             6e-8,
                             65000.0,
                             3e38};
  const size_t es = elementSize(dtype);
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    const double v = rng() % 16 == 0 ? specials[rng() % std::size(specials)] : value(rng);
    uint8_t* p = out.data() + i * es;
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (dtype) {
      case DataType::kFloat32: put(static_cast<float>(v)); break;
      case DataType::kFloat64: put(v); break;
      case DataType::kFloat16:
        put(collectives::floatToHalfBits(static_cast<float>(v)));
        break;
      case DataType::kBFloat16:
        put(collectives::floatToBfloat16Bits(static_cast<float>(v)));
        break;
      case DataType::kInt32: put(static_cast<int32_t>(rng())); break;
      case DataType::kInt64:
        put(static_cast<int64_t>((uint64_t{rng()} << 32) ^ rng()));
        break;
      case DataType::kUInt8: put(static_cast<uint8_t>(rng())); break;
    }
  }
  return out;
}

// Whether the element of `dtype` at p is a NaN (integers never are).
inline bool isNanElement(DataType dtype, const uint8_t* p) {
  uint16_t h;
  float f;
  double d;
  switch (dtype) {
    case DataType::kFloat32: std::memcpy(&f, p, 4); return std::isnan(f);
    case DataType::kFloat64: std::memcpy(&d, p, 8); return std::isnan(d);
    case DataType::kFloat16:
      std::memcpy(&h, p, 2);
      return std::isnan(collectives::halfBitsToFloat(h));
    case DataType::kBFloat16:
      std::memcpy(&h, p, 2);
      return std::isnan(collectives::bfloat16BitsToFloat(h));
    default: return false;
  }
}

}  // namespace kolo::test
