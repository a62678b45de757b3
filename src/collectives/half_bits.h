// float32 <-> float16 / bfloat16 on bit patterns, for the host and for CUDA
// device code alike (one definition that nvcc and the host compiler both
// compile, so the device kernels round exactly as the CPU kernels do).
//
// Contract
// - The definitions behind halfToFloat / floatToHalf / bfloat16ToFloat /
//   floatToBfloat16 of collectives/reduce.h, and the scalar fallback of the
//   CPU kernels (reduce_kernels.inc): round to nearest even computed on the
//   bits (no dependence on a floating-point mode), NaN quieted keeping sign
//   and upper payload, float16 overflow (magnitude >= 65520) gives inf.
// - Pure functions; no CUDA header needed (KOLO_HOST_DEVICE is empty for
//   the host compiler).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KOLO_HOST_DEVICE __host__ __device__ inline
#else
#define KOLO_HOST_DEVICE inline
#endif

namespace kolo::collectives {

KOLO_HOST_DEVICE uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KOLO_HOST_DEVICE float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Exact widening;
// a signalling NaN is quieted (bit 9 of the half, bit 22 of the float).
KOLO_HOST_DEVICE float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {
    uint32_t nan = mantissa != 0 ? 0x400000u : 0u;
    return bitsFloat(sign | 0x7f800000u | nan | (mantissa << 13));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return bitsFloat(sign | floatBits(magnitude));
  }
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even on the bit pattern. Normal results: rebias the
// exponent (127 -> 15) and round the 23-bit mantissa to 10 bits by adding
// 0xfff plus the lowest kept bit; a carry moves into the exponent, up to
// inf. Subnormal results: shift the 24-bit significand to units of 2^-24
// and round the dropped bits.
KOLO_HOST_DEVICE uint16_t floatToHalfBits(float f) {
  uint32_t bits = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, keep the upper payload.
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) {  // >= 65520 rounds to inf (and inf itself).
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (magnitude >= 0x38800000u) {  // >= 2^-14: a normal half.
    uint32_t v = magnitude - (112u << 23);
    v += 0xfffu + ((v >> 13) & 1u);
    return static_cast<uint16_t>(sign | (v >> 13));
  }
  uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - exponent;  // 14 .. 24
  uint32_t quotient = significand >> shift;
  uint32_t remainder = significand & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (quotient & 1u))) ++quotient;
  return static_cast<uint16_t>(sign | quotient);
}

// bfloat16 is the upper half of a float32.
KOLO_HOST_DEVICE float bfloat16BitsToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

// Round to nearest even by adding 0x7fff plus the lowest kept bit; a NaN
// keeps its upper bits and gets the quiet bit (rounding could carry its
// payload into the exponent).
KOLO_HOST_DEVICE uint16_t floatToBfloat16Bits(float f) {
  uint32_t bits = floatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace kolo::collectives
