// Element-wise reduction kernels, vectorised for every dtype and op.
//
// float16 and bfloat16 are reduced by converting to float32, reducing in
// float32 and rounding back (round to nearest even) once per call, so a sum
// of values that fits in the type never overflows in between.
// kAverage reduces like kSum; the caller divides once at the end with
// scaleInPlace(1/n).
#pragma once

#include <kolo/types.h>

#include <cstddef>

namespace kolo::collectives {

// dst[i] = dst[i] (op) src[i]
void reduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// dst[i] = a[i] (op) b[i]; dst may alias a or b.
void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op);

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... (op) srcs[n-1][i], reduced in
// the order given (deterministic); dst may alias any source. For float16 /
// bfloat16 the whole chain is accumulated in float32 and rounded once.
void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op);

// buf[i] /= divisor (integer types: truncating division), for kAverage.
void divideInPlace(void* buf, size_t count, DataType dtype, double divisor);

// float32 <-> float16 / bfloat16 conversions (round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace kolo::collectives
