// The launchers of the CUDA kernels (device_kernels.cu), for
// device_reduce.cc only, and the CUDA error text shared by the CUDA build's
// .cc files. Arguments are validated by the caller (dtype and op valid, pointers
// non-null, 2 <= n <= kMaxSources for reduceMany, count > 0); each launcher enqueues one
// kernel on `stream` and returns the launch's cudaError_t as an int (0: launched).
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kolo::collectives::cuda {

// "cudaErrorX: text" for a cudaError_t value (device_runtime.cc).
std::string cudaErrorText(int code);

}  // namespace kolo::collectives::cuda

namespace kolo::collectives::cuda::launch {

int reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
               ReduceOp op, void* stream);
int divide(void* buf, size_t count, DataType dtype, double divisor, void* stream);
int scale(void* buf, size_t count, DataType dtype, double factor, void* stream);
int compressToHalf(uint16_t* dst, const float* src, size_t count, void* stream);
int decompressFromHalf(float* dst, const uint16_t* src, size_t count, void* stream);
// 1 <= n, m <= kMaxSources; count > 0.
int reduceToMany(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
                 DataType dtype, ReduceOp op, void* stream);

}  // namespace kolo::collectives::cuda::launch
