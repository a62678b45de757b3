// Element-wise reduction kernels, vectorised for every dtype and op.
//
// float16 and bfloat16 are reduced by converting to float32, reducing in
// float32 and rounding back (round to nearest even) once per call, so a sum
// of values that fits in the type never overflows in between.
// kAverage reduces like kSum; the caller divides once at the end with
// divideInPlace(n).
//
// Semantics, the same on every instruction-set path (same inputs give the
// same bits whichever KernelIsa runs them, except which NaN payload comes out
// of an op on two different NaNs):
// - float32 / float64: IEEE arithmetic in the type (no FMA, no reassociation,
//   round to nearest even under the default MXCSR).
//   kMin / kMax propagate NaN like torch.minimum / torch.maximum: if either
//   operand is NaN the result is NaN. For equal operands (e.g. -0.0 and +0.0)
//   the second operand is returned.
// - float16 / bfloat16: each operand is widened to float32 exactly, the op is
//   done in float32, the result rounded to nearest even once. NaN stays NaN
//   (quieted, sign and upper payload kept); a float32 result that rounds
//   beyond float16's largest value 65504 (magnitude >= 65520) becomes +-inf.
// - int32 / int64: two's complement wrap on overflow for kSum and kProduct
//   (computed in unsigned arithmetic internally, so no undefined behaviour);
//   kMin / kMax compare as signed.
// - uint8: kSum and kProduct wrap modulo 256 like C unsigned arithmetic;
//   kMin / kMax compare as unsigned.
//
// Aliasing: dst may be exactly equal to a source; partially overlapping
// ranges are not supported.
//
// Memory: outputs of 4 MiB or more that alias no source are written with
// non-temporal stores (not read first, not kept in cache) followed by a
// store fence, so on return the results are ordered before any later store
// (e.g. a flag telling another process they are ready), as plain stores are.
//
// Thread-safety: the functions are pure apart from writing dst; concurrent
// calls on disjoint outputs are safe. Blocking: none, CPU only. Failure: an
// unknown dtype or op (e.g. a bad cast from C), a null pointer with
// count > 0, a count whose byte size overflows, or an unusable divisor
// throws kolo::Error(kInvalidArgument); nothing is written then.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kolo::collectives {

// dst[i] = dst[i] (op) src[i]
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// dst[i] = a[i] (op) b[i]; dst may alias a or b.
void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op);

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[n-1][i], reduced in
// the order given (deterministic); dst may alias any source. For float16 /
// bfloat16 the whole chain is accumulated in float32 and rounded once, so the
// result differs from chaining reduce2 (which rounds at every step) and a
// partial sum beyond the type's range does not overflow. n must be >= 1;
// n == 1 copies srcs[0] bit for bit.
void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op);

// buf[i] /= divisor, for kAverage.
// - floating types: IEEE division by the divisor converted to the type's
//   compute precision (float32 for float32 / float16 / bfloat16, float64 for
//   float64), rounded once into the type; divisor 0 gives inf / NaN.
// - integer types: truncating division (toward zero, like C). The divisor
//   must be a whole number >= 1 (a rank count), else kInvalidArgument.
void divideInPlace(void* buf, size_t count, DataType dtype, double divisor);

// float32 <-> float16 / bfloat16 conversions (round to nearest even). Scalar,
// portable, bit-identical to the F16C / vector conversions the kernels use:
// NaN is quieted keeping sign and upper payload, float16 overflow gives inf.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

// The instruction-set paths compiled into the library (GCC function
// multiversioning by hand: one copy of the kernels per target, chosen at run
// time by CPUID). kGeneric is plain x86-64 (SSE2, software float16
// conversion); kAvx2 needs AVX2 + FMA + F16C (x86-64-v3 class); kAvx512 needs
// AVX-512 F/BW/DQ/VL plus the AVX2 set (x86-64-v4 class).
enum class KernelIsa : uint8_t { kGeneric, kAvx2, kAvx512 };

std::string_view toString(KernelIsa isa);
// True when this CPU (and OS) can run the path.
bool isSupported(KernelIsa isa);
// The fastest supported path; the functions above use it. Detected once.
KernelIsa bestKernelIsa();

// The same kernels on an explicit path, for tests and benchmarks. Throws
// kolo::Error(kInvalidArgument) when the CPU does not support isa.
void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op, KernelIsa isa);
void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op, KernelIsa isa);
void divideInPlace(void* buf, size_t count, DataType dtype, double divisor,
                   KernelIsa isa);

}  // namespace kolo::collectives
