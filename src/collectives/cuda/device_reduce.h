// Reduction kernels on CUDA device memory: the GPU counterpart of
// collectives/reduce.h and collectives/elementwise.h, for every dtype
// (float32, float64, float16, bfloat16, int32, int64, uint8) and op (sum,
// average, min, max, product), plus float16 compression (float32 <->
// float16). Plain C++: no CUDA header; streams are cudaStream_t passed as
// void* (nullptr: the legacy default stream).
//
// Contract
// - Results: the same per-element values as the CPU functions of the same
//   name (reduce.h, elementwise.h): float16 / bfloat16 widened to float32,
//   the op done in float32 and rounded to nearest even once (reduceMany
//   accumulates its whole chain in float32); no FMA; integer sum / product
//   wrap, min / max of floats propagate NaN. One difference: which NaN comes
//   out of an arithmetic op on a NaN (a GPU gives its canonical NaN, a CPU
//   the operand's payload); NaN stays NaN either way.
// - kAverage reduces like kSum; the caller divides once with divideInPlace.
// - Ordering: each call enqueues its work on `stream` and returns without
//   waiting (stream order, like a cudaMemcpyAsync): inputs are read after
//   the work already on the stream, results are seen by work enqueued after.
//   Use synchronize(stream) (device_runtime.h) before reading them on the
//   host.
// - Pointers: device memory (or memory the device can address: pinned or
//   managed). Every buffer pointer is checked with the CUDA runtime; a host
//   pointer the device cannot address is Error(kInvalidArgument) naming the
//   argument, never a crash. dst may equal a source; partial overlap is not
//   supported.
// - Failure (thrown before anything is enqueued): an unknown dtype or op, a
//   null pointer with count > 0, a count whose byte size overflows, fewer
//   than 1 or more than kMaxSources sources, an unusable divisor, no CUDA
//   device (the message says why) or a build without CUDA: Error
//   (kInvalidArgument). A failed launch: Error(kInternal) with the CUDA
//   error.
// - Thread-safety: calls on different streams, or disjoint outputs, may run
//   concurrently.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>

namespace kolo::collectives::cuda {

// The most sources one reduceMany call takes (a kernel parameter holds them).
inline constexpr int kMaxSources = 64;

// dst[i] = a[i] (op) b[i].
void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op, void* stream);

// dst[i] = srcs[0][i] (op) ... (op) srcs[n-1][i], in that order. `srcs` is a
// host array of n device pointers; n == 1 copies srcs[0].
void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op, void* stream);

// buf[i] /= divisor (kAverage): floating types in their compute precision,
// integers truncating (the divisor must be a whole number in [1, 2^53]).
void divideInPlace(void* buf, size_t count, DataType dtype, double divisor, void* stream);

// buf[i] *= factor (pre- and postscale), as elementwise.h's scaleInPlace.
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor, void* stream);

// float16 compression of a float32 gradient and back (round to nearest
// even, as floatToHalf / halfToFloat of reduce.h).
void compressToHalf(uint16_t* dst, const float* src, size_t count, void* stream);
void decompressFromHalf(float* dst, const uint16_t* src, size_t count, void* stream);

// The IPC collectives' fan-in / fan-out (collectives/cuda/ipc_collectives.h):
// for every j < m, dsts[j][i] = srcs[0][i] (op) ... (op) srcs[n-1][i], as
// reduceMany computes it, and for kAverage divided by n in the same pass
// (the sum rounded to the dtype, then divided as divideInPlace does): one
// kernel reads every source once and writes every destination once.
// `dsts` and `srcs` are host arrays of 1..kMaxSources device pointers
// (peers' buffers mapped by CUDA IPC included). A destination may equal a
// source (each element is read from every source before it is written);
// destinations must not overlap each other.
void reduceToMany(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
                  DataType dtype, ReduceOp op, void* stream);

}  // namespace kolo::collectives::cuda
