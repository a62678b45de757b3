#include "bench_data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kolo::bench {
namespace {

// Marks output elements before the check; exact in every dtype (8 significant
// bits) and outside the range of the inputs.
constexpr double kSentinel = 251;

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename Fn>
void forEach(size_t count, Fn&& fn) {
  for (size_t i = 0; i < count; ++i) fn(i);
}

}  // namespace

float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24.
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bitsFloat(sign | 0x7f800000u | (mant << 13));  // inf / nan
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t floatToHalfBits(float f) {
  const uint32_t u = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absBits = u & 0x7fffffffu;
  if (absBits >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absBits > 0x7f800000u ? 0x200u : 0));
  }
  if (absBits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  const int exp = static_cast<int>(absBits >> 23) - 127;
  if (exp < -14) {
    // Subnormal half (or zero): round |f| / 2^-24 to the nearest even integer.
    float scaled = std::ldexp(bitsFloat(absBits), 24);
    float rounded = std::nearbyint(scaled);  // default rounding: nearest even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(rounded));
  }
  // Normal: keep 10 mantissa bits, round to nearest even on the 13 dropped.
  uint32_t mant = absBits & 0x7fffffu;
  uint32_t halfExp = static_cast<uint32_t>(exp + 15);
  uint32_t result = (halfExp << 10) | (mant >> 13);
  const uint32_t dropped = mant & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (result & 1u))) ++result;  // may carry
  return static_cast<uint16_t>(sign | result);
}

float bfloat16BitsToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

uint16_t floatToBfloat16Bits(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

double loadElement(DataType dtype, const void* buf, size_t i) {
  switch (dtype) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return halfBitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return bfloat16BitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

void storeElement(DataType dtype, void* buf, size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToHalfBits(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBfloat16Bits(static_cast<float>(v));
      break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
  }
}

// ---------------------------------------------------------------- Pattern

Pattern::Pattern(DataType dtype, ReduceOp op, int worldSize)
    : dtype_(dtype), op_(op), worldSize_(std::max(worldSize, 1)) {
  // Largest sum that stays exact (and does not wrap) in the dtype.
  double limit = 1 << 24;
  if (dtype == DataType::kUInt8) limit = 255;
  if (dtype == DataType::kBFloat16) limit = 256;
  if (dtype == DataType::kFloat16) limit = 2048;
  modulus_ = 8;
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    // Inputs in [0, m) with n * (m - 1) <= limit.
    modulus_ = static_cast<unsigned>(std::clamp(limit / worldSize_ + 1, 1.0, 8.0));
  }
}

double Pattern::input(int rank, size_t index) const {
  const uint64_t h = (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL) >> 61;
  const uint64_t mixed = h + static_cast<uint64_t>(rank);
  if (op_ == ReduceOp::kProduct) return mixed % 8 == 0 ? 2.0 : 1.0;
  return static_cast<double>(mixed % modulus_);
}

double Pattern::reduced(size_t index) const {
  double acc = input(0, index);
  for (int r = 1; r < worldSize_; ++r) {
    const double v = input(r, index);
    switch (op_) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  const bool integer = dtype_ == DataType::kInt32 || dtype_ == DataType::kInt64 ||
                       dtype_ == DataType::kUInt8;
  if (op_ == ReduceOp::kAverage) {
    acc = integer ? std::trunc(acc / worldSize_) : acc / worldSize_;
  }
  if (dtype_ == DataType::kUInt8) acc = std::fmod(acc, 256.0);  // wraps (products)
  return acc;
}

bool Pattern::matches(double expected, double got) const {
  const bool floating = dtype_ == DataType::kFloat32 || dtype_ == DataType::kFloat64 ||
                        dtype_ == DataType::kFloat16 || dtype_ == DataType::kBFloat16;
  if (op_ != ReduceOp::kAverage || !floating) return got == expected;
  // One rounding of a division (or of a multiplication by 1/n): within two
  // units in the last place of the dtype.
  double eps = 0;
  switch (dtype_) {
    case DataType::kFloat32: eps = std::ldexp(1.0, -23); break;
    case DataType::kFloat64: eps = std::ldexp(1.0, -52); break;
    case DataType::kFloat16: eps = std::ldexp(1.0, -10); break;
    case DataType::kBFloat16: eps = std::ldexp(1.0, -7); break;
    default: break;
  }
  return std::fabs(got - expected) <= 2 * eps * std::max(std::fabs(expected), 1e-30);
}

// ---------------------------------------------------------------- Case

Case::Case(const Options& options, int rank, int worldSize, size_t bytes)
    : collective_(options.collective),
      dtype_(options.dtype),
      rank_(rank),
      worldSize_(worldSize),
      root_(options.root),
      inPlace_(options.inPlace),
      pattern_(options.dtype, options.op, worldSize) {
  const size_t n = static_cast<size_t>(std::max(worldSize, 1));
  count_ = bytes / elementSize(dtype_);
  switch (collective_) {
    case Collective::kAllreduce:
    case Collective::kBroadcast: sendCount_ = recvCount_ = count_; break;
    case Collective::kAllgather:  // size = gathered output
      block_ = count_ / n;
      count_ = block_ * n;
      sendCount_ = block_;
      recvCount_ = count_;
      break;
    case Collective::kReduceScatter:  // size = input
      block_ = count_ / n;
      count_ = block_ * n;
      sendCount_ = count_;
      recvCount_ = block_;
      break;
    case Collective::kAlltoall:  // size = each rank's send buffer
      block_ = count_ / n;
      count_ = block_ * n;
      sendCount_ = recvCount_ = count_;
      break;
  }
}

double Case::busFactor() const {
  const double n = worldSize_;
  switch (collective_) {
    case Collective::kAllreduce: return 2.0 * (n - 1) / n;
    case Collective::kBroadcast: return 1.0;
    default: return (n - 1) / n;
  }
}

void Case::fill(void* send, void* recv) const {
  switch (collective_) {
    case Collective::kAllreduce:
      forEach(count_, [&](size_t i) {
        storeElement(dtype_, inPlace_ ? recv : send, i, pattern_.input(rank_, i));
        if (!inPlace_) storeElement(dtype_, recv, i, kSentinel);
      });
      break;
    case Collective::kBroadcast:
      forEach(count_, [&](size_t i) {
        storeElement(dtype_, recv, i,
                     rank_ == root_ ? pattern_.input(root_, i) : kSentinel);
      });
      break;
    case Collective::kAllgather:
      forEach(block_, [&](size_t k) {
        storeElement(dtype_, send, k, pattern_.input(rank_, rank_ * block_ + k));
      });
      forEach(recvCount_, [&](size_t i) { storeElement(dtype_, recv, i, kSentinel); });
      break;
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
      // Element g of rank r's send buffer holds input(r, g): for alltoall
      // block j (g / block) is the one that travels to rank j.
      forEach(sendCount_,
              [&](size_t g) { storeElement(dtype_, send, g, pattern_.input(rank_, g)); });
      forEach(recvCount_, [&](size_t i) { storeElement(dtype_, recv, i, kSentinel); });
      break;
  }
}

double Case::expected(size_t i) const {
  switch (collective_) {
    case Collective::kAllreduce: return pattern_.reduced(i);
    case Collective::kBroadcast: return pattern_.input(root_, i);
    case Collective::kAllgather: return pattern_.input(static_cast<int>(i / block_), i);
    case Collective::kReduceScatter: return pattern_.reduced(rank_ * block_ + i);
    case Collective::kAlltoall: {
      // Block i / block came from that rank, where it was block rank_.
      const size_t from = i / block_;
      return pattern_.input(static_cast<int>(from), rank_ * block_ + i % block_);
    }
  }
  return 0;
}

std::optional<Mismatch> Case::verify(const void* recv) const {
  for (size_t i = 0; i < recvCount_; ++i) {
    // Exact in the dtype, except a floating average (see Pattern::matches).
    const double want = expected(i);
    const double got = loadElement(dtype_, recv, i);
    if (!pattern_.matches(want, got)) return Mismatch{i, want, got};
  }
  return std::nullopt;
}

}  // namespace kolo::bench
