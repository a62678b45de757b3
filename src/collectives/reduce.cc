// Reduction kernels: argument checks, scalar float16 / bfloat16 conversions,
// and run-time choice between copies of the kernels compiled for different
// instruction sets.
//
// Multiversioning. reduce_kernels.inc holds every kernel once, written with
// GNU vector extensions (one vector = one SIMD register) and, for float16,
// F16C intrinsics. It is included here up to three times, each inside a
// `#pragma GCC target` region and its own namespace:
//   isa_generic  no extra target: baseline x86-64 (SSE2), 16-byte vectors,
//                software float16 conversion (also any non-x86 build)
//   isa_avx2     avx2,fma,f16c: 32-byte ymm vectors, vcvtph2ps / vcvtps2ph
//   isa_avx512   avx512f/bw/dq/vl + the above: 64-byte zmm vectors
// bestKernelIsa() asks CPUID once (__builtin_cpu_supports also checks that
// the OS saves the wide registers) and the public functions dispatch on it,
// so one binary runs everywhere and uses the widest registers it may.
//
// Determinism: the kernels are purely element-wise (no horizontal sums), use
// no FMA, and run the last partial vector through the same vector code via a
// padded buffer; every path computes the same bits for the same inputs (the
// scalar float16 conversion below is bit-exact with F16C's, rounding to
// nearest even explicitly rather than through MXCSR).
#include "collectives/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/half_bits.h"
#include "common/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KOLO_REDUCE_X86 1
#else
#define KOLO_REDUCE_X86 0
#endif

// Vector arguments of always-inlined helpers trigger notes about the ABI of
// wide vectors in functions compiled without AVX; no such call survives.
#pragma GCC diagnostic ignored "-Wpsabi"

// For the kernels' small helpers: a call per vector would cost more than the
// work (GCC declines to inline the larger software float16 conversions).
#define KOLO_REDUCE_INLINE inline __attribute__((always_inline))

namespace kolo::collectives {
namespace {

// The op a kernel runs: kAverage is kSum followed by divideInPlace.
enum class OpKind : uint8_t { kSum, kMin, kMax, kProduct };

// Out-of-place results at least this large are written with non-temporal
// stores (see useStreaming in reduce_kernels.inc). The collectives' pipeline
// chunks are far smaller and stay in cache for the next hop.
constexpr size_t kStreamingStoreBytes = size_t{4} << 20;

template <class T, size_t kBytes>
struct VecOf {
  typedef T type __attribute__((vector_size(kBytes)));
};

}  // namespace
}  // namespace kolo::collectives

// ---- the kernel copies ----------------------------------------------------

#define KOLO_REDUCE_NS isa_generic
#define KOLO_REDUCE_VEC_BYTES 16
#define KOLO_REDUCE_F16C 0
#include "reduce_kernels.inc"
#undef KOLO_REDUCE_NS
#undef KOLO_REDUCE_VEC_BYTES
#undef KOLO_REDUCE_F16C

#if KOLO_REDUCE_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define KOLO_REDUCE_NS isa_avx2
#define KOLO_REDUCE_VEC_BYTES 32
#define KOLO_REDUCE_F16C 1
#include "reduce_kernels.inc"
#undef KOLO_REDUCE_NS
#undef KOLO_REDUCE_VEC_BYTES
#undef KOLO_REDUCE_F16C
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
#define KOLO_REDUCE_NS isa_avx512
#define KOLO_REDUCE_VEC_BYTES 64
#define KOLO_REDUCE_F16C 1
#include "reduce_kernels.inc"
#undef KOLO_REDUCE_NS
#undef KOLO_REDUCE_VEC_BYTES
#undef KOLO_REDUCE_F16C
#pragma GCC pop_options
#endif  // KOLO_REDUCE_X86

// ---- dispatch and checks --------------------------------------------------

namespace kolo::collectives {
namespace {

KernelIsa detectKernelIsa() {
  if (isSupported(KernelIsa::kAvx512)) return KernelIsa::kAvx512;
  if (isSupported(KernelIsa::kAvx2)) return KernelIsa::kAvx2;
  return KernelIsa::kGeneric;
}

OpKind toOpKind(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return OpKind::kSum;
    case ReduceOp::kMin: return OpKind::kMin;
    case ReduceOp::kMax: return OpKind::kMax;
    case ReduceOp::kProduct: return OpKind::kProduct;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "unknown reduce op value " << static_cast<int>(op));
}

// Throws for an unknown dtype or a byte size that overflows size_t.
void checkDtypeAndCount(const char* what, DataType dtype, size_t count) {
  if (!isValid(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown dtype value " << static_cast<int>(dtype));
  }
  if (count > SIZE_MAX / elementSize(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": count " << count << " of "
                                                 << toString(dtype)
                                                 << " overflows the address space");
  }
}

void checkIsa(const char* what, KernelIsa isa) {
  if (!isSupported(isa)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": kernel path " << toString(isa)
                                                 << " is not supported by this CPU");
  }
}

void checkPointer(const char* what, const char* name, const void* p, size_t count) {
  if (p == nullptr && count != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": null " << name << " buffer with count " << count);
  }
}

}  // namespace

std::string_view toString(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kGeneric: return "generic";
    case KernelIsa::kAvx2: return "avx2";
    case KernelIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool isSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kGeneric: return true;
#if KOLO_REDUCE_X86
    case KernelIsa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case KernelIsa::kAvx512:
      return isSupported(KernelIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#else
    case KernelIsa::kAvx2:
    case KernelIsa::kAvx512: return false;
#endif
  }
  return false;
}

KernelIsa bestKernelIsa() {
  static const KernelIsa best = detectKernelIsa();
  return best;
}

float halfToFloat(uint16_t h) {
  return halfBitsToFloat(h);
}
uint16_t floatToHalf(float f) {
  return floatToHalfBits(f);
}
float bfloat16ToFloat(uint16_t b) {
  return bfloat16BitsToFloat(b);
}
uint16_t floatToBfloat16(float f) {
  return floatToBfloat16Bits(f);
}

void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op, KernelIsa isa) {
  constexpr const char* kWhat = "reduce2";
  checkDtypeAndCount(kWhat, dtype, count);
  OpKind kind = toOpKind(op);
  checkIsa(kWhat, isa);
  checkPointer(kWhat, "dst", dst, count);
  checkPointer(kWhat, "a", a, count);
  checkPointer(kWhat, "b", b, count);
  if (count == 0) return;
  switch (isa) {
#if KOLO_REDUCE_X86
    case KernelIsa::kAvx512: return isa_avx512::reduce2(dst, a, b, count, dtype, kind);
    case KernelIsa::kAvx2: return isa_avx2::reduce2(dst, a, b, count, dtype, kind);
#endif
    default: return isa_generic::reduce2(dst, a, b, count, dtype, kind);
  }
}

void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op) {
  reduce2(dst, a, b, count, dtype, op, bestKernelIsa());
}

void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  reduce2(dst, dst, src, count, dtype, op, bestKernelIsa());
}

void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op, KernelIsa isa) {
  constexpr const char* kWhat = "reduceMany";
  checkDtypeAndCount(kWhat, dtype, count);
  OpKind kind = toOpKind(op);
  checkIsa(kWhat, isa);
  if (n < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               kWhat << ": needs at least one source, got n = " << n);
  }
  checkPointer(kWhat, "dst", dst, count);
  checkPointer(kWhat, "srcs", srcs, count);
  for (int k = 0; k < n && count != 0; ++k) {
    if (srcs[k] == nullptr) {
      KOLO_THROW(ErrorCode::kInvalidArgument, kWhat << ": null source " << k << " of "
                                                    << n << " with count " << count);
    }
  }
  if (count == 0) return;
  if (n == 1) {
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * elementSize(dtype));
    return;
  }
  switch (isa) {
#if KOLO_REDUCE_X86
    case KernelIsa::kAvx512:
      return isa_avx512::reduceMany(dst, srcs, n, count, dtype, kind);
    case KernelIsa::kAvx2: return isa_avx2::reduceMany(dst, srcs, n, count, dtype, kind);
#endif
    default: return isa_generic::reduceMany(dst, srcs, n, count, dtype, kind);
  }
}

void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op) {
  reduceMany(dst, srcs, n, count, dtype, op, bestKernelIsa());
}

void divideInPlace(void* buf, size_t count, DataType dtype, double divisor,
                   KernelIsa isa) {
  constexpr const char* kWhat = "divideInPlace";
  checkDtypeAndCount(kWhat, dtype, count);
  checkIsa(kWhat, isa);
  checkPointer(kWhat, "buf", buf, count);
  bool integer =
      dtype == DataType::kInt32 || dtype == DataType::kInt64 || dtype == DataType::kUInt8;
  // 2^53: every whole number up to it is exact in double and in int64.
  if (integer &&
      !(divisor >= 1.0 && divisor <= 0x1p53 && std::trunc(divisor) == divisor)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               kWhat << ": " << toString(dtype)
                     << " needs a whole divisor in [1, 2^53], got " << divisor);
  }
  if (count == 0) return;
  switch (isa) {
#if KOLO_REDUCE_X86
    case KernelIsa::kAvx512: return isa_avx512::divideInPlace(buf, count, dtype, divisor);
    case KernelIsa::kAvx2: return isa_avx2::divideInPlace(buf, count, dtype, divisor);
#endif
    default: return isa_generic::divideInPlace(buf, count, dtype, divisor);
  }
}

void divideInPlace(void* buf, size_t count, DataType dtype, double divisor) {
  divideInPlace(buf, count, dtype, divisor, bestKernelIsa());
}

}  // namespace kolo::collectives
