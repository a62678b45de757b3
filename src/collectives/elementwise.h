// Element-wise per-dtype math around a reduction: scaling by a factor, an
// average's division fused with a copy, the identity of a reduction.
//
// Contract
// - Every function works in the element type: float16 and bfloat16 through
//   float, integers truncated toward zero (scaleInPlace).
// - finishInto's per-element results are those of divideInPlace
//   (reduce.h) followed by scaleInPlace on the whole buffer, whatever path
//   it takes (in place, or chunked through the cache), so a result does not
//   depend on the path (deterministic sums).
// - Pure apart from writing the output; thread-safe on disjoint outputs;
//   CPU only, never blocks. An unknown dtype writes nothing.
#pragma once

#include <kolo/types.h>

#include <cstddef>

namespace kolo::collectives {

// buf[i] *= factor (1: nothing).
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor);

// An allreduce's result from its sum: dst = src / divisor (1: none) *
// postscale; dst may equal src.
void finishInto(void* dst, const void* src, size_t count, DataType dtype, int divisor,
                double postscale);

// dst = src * factor (an input times prescale); dst may equal src.
void copyScaled(void* dst, const void* src, size_t count, DataType dtype, double factor);

// The identity of `op` (what a rank without data contributes): 0 for sum
// and average, 1 for product, the largest value for min, the smallest for
// max.
void fillIdentity(void* buf, size_t count, DataType dtype, ReduceOp op);

}  // namespace kolo::collectives
