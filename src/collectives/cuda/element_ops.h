// The per-element arithmetic of the device kernels (device_kernels.cu),
// compiled for the device by nvcc and for the host by the host compiler, so
// that tests/cuda_test.cc checks it against the CPU kernels on any machine
// (the kernels themselves only add the loop over elements).
//
// Contract: each function computes one element exactly as the CPU kernels
// do (collectives/reduce.h, collectives/elementwise.h):
// - a dtype policy (PlainLanes, HalfLanes, BFloat16Lanes) gives Storage (in
//   memory) and Compute (where the op runs: float for the 16-bit floats),
//   with the bit-exact conversions of half_bits.h;
// - apply(): integer sum / product in the unsigned type of the same width
//   (wraps), min / max of floats pick the NaN operand and, on a tie, the
//   second operand, like the CPU's `(a < b) | (a != a) ? a : b`;
// - reduceElement(): the chain srcs[0] op srcs[1] op ... in order, in the
//   compute type, rounded once;
// - divide / scale: as divideInPlace / scaleInPlace, element by element.
// Pure; no CUDA header needed on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "collectives/half_bits.h"

namespace kolo::collectives::cuda::ops {

enum class OpKind { kSum, kMin, kMax, kProduct };

template <class T>
struct PlainLanes {
  using Storage = T;
  using Compute = T;
  KOLO_HOST_DEVICE static T in(T s) { return s; }
  KOLO_HOST_DEVICE static T out(T c) { return c; }
};

struct HalfLanes {
  using Storage = uint16_t;
  using Compute = float;
  KOLO_HOST_DEVICE static float in(uint16_t s) { return halfBitsToFloat(s); }
  KOLO_HOST_DEVICE static uint16_t out(float c) { return floatToHalfBits(c); }
};

struct BFloat16Lanes {
  using Storage = uint16_t;
  using Compute = float;
  KOLO_HOST_DEVICE static float in(uint16_t s) { return bfloat16BitsToFloat(s); }
  KOLO_HOST_DEVICE static uint16_t out(float c) { return floatToBfloat16Bits(c); }
};

template <OpKind K, class C>
KOLO_HOST_DEVICE C apply(C a, C b) {
  if constexpr (K == OpKind::kSum || K == OpKind::kProduct) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      const U r = K == OpKind::kSum ? U(U(a) + U(b)) : U(U(a) * U(b));
      return static_cast<C>(r);
    } else {
      return K == OpKind::kSum ? a + b : a * b;
    }
  } else if constexpr (std::is_floating_point_v<C>) {
    if constexpr (K == OpKind::kMin) {
      return (a < b || a != a) ? a : b;
    } else {
      return (a > b || a != a) ? a : b;
    }
  } else if constexpr (K == OpKind::kMin) {
    return a < b ? a : b;
  } else {
    return a > b ? a : b;
  }
}

// Element i of srcs[0] op ... op srcs[n-1] (n >= 2).
template <class L, OpKind K>
KOLO_HOST_DEVICE typename L::Storage reduceElement(const void* const* srcs, int n,
                                                   size_t i) {
  using S = typename L::Storage;
  using C = typename L::Compute;
  C acc = apply<K, C>(L::in(static_cast<const S*>(srcs[0])[i]),
                      L::in(static_cast<const S*>(srcs[1])[i]));
  for (int k = 2; k < n; ++k)
    acc = apply<K, C>(acc, L::in(static_cast<const S*>(srcs[k])[i]));
  return L::out(acc);
}

// Floating types: the division in the compute type (the CPU's reciprocal
// multiplication for a power of two is exact, so it gives these bits too).
template <class L>
KOLO_HOST_DEVICE typename L::Storage divideElement(typename L::Storage v,
                                                   typename L::Compute divisor) {
  return L::out(L::in(v) / divisor);
}

// Integers: truncating division by a whole divisor >= 1.
template <class T>
KOLO_HOST_DEVICE T divideIntegerElement(T v, long long divisor) {
  return static_cast<T>(static_cast<long long>(v) / divisor);
}

// float32 scaled in float, float64 in double; the 16-bit floats and the
// integers widened to double, multiplied and converted back.
template <class T>
KOLO_HOST_DEVICE T scaleFloatElement(T v, T factor) {
  return v * factor;
}

template <class L>
KOLO_HOST_DEVICE uint16_t scaleHalfElement(uint16_t v, double factor) {
  return L::out(static_cast<float>(static_cast<double>(L::in(v)) * factor));
}

template <class T>
KOLO_HOST_DEVICE T scaleIntegerElement(T v, double factor) {
  return static_cast<T>(static_cast<double>(v) * factor);
}

// The fan-in of the IPC collectives (reduceToMany, device_reduce.h): one
// element of srcs[0] op ... op srcs[n-1] (n >= 1) as reduceElement does it
// (the chain in the compute type, in order, rounded once), then for an
// average the division by `divisor` as divideInPlace does it (the sum
// rounded to the dtype first, then divided in the compute precision, or
// truncating for integers): the CPU's reduce-then-divide, element by
// element. The kernel calls these per lane of a vector load; the host
// double of the IPC tests calls them per element.
template <class L, OpKind K>
KOLO_HOST_DEVICE typename L::Compute fanInStart(typename L::Storage s) {
  return L::in(s);
}

template <class L, OpKind K>
KOLO_HOST_DEVICE typename L::Compute fanInStep(typename L::Compute acc,
                                               typename L::Storage s) {
  return apply<K, typename L::Compute>(acc, L::in(s));
}

// `divisor` 0: no division (every op but the average).
template <class L>
KOLO_HOST_DEVICE typename L::Storage fanInFinish(typename L::Compute acc,
                                                 double divisor) {
  using S = typename L::Storage;
  const S v = L::out(acc);
  if (divisor == 0) return v;
  if constexpr (std::is_integral_v<typename L::Compute>) {
    return divideIntegerElement<S>(v, static_cast<long long>(divisor));
  } else {
    return divideElement<L>(v, static_cast<typename L::Compute>(divisor));
  }
}

template <class L, OpKind K>
KOLO_HOST_DEVICE typename L::Storage fanInElement(const void* const* srcs, int n,
                                                  size_t i, double divisor) {
  using S = typename L::Storage;
  auto acc = fanInStart<L, K>(static_cast<const S*>(srcs[0])[i]);
  for (int k = 1; k < n; ++k)
    acc = fanInStep<L, K>(acc, static_cast<const S*>(srcs[k])[i]);
  return fanInFinish<L>(acc, divisor);
}

}  // namespace kolo::collectives::cuda::ops
