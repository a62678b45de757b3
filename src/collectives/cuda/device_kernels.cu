// The CUDA kernels behind device_reduce.h, and their launchers
// (device_kernels.h).
//
// Every kernel is element-wise: thread i of a grid-stride loop owns element
// i, reads every input of that element, computes in the dtype's compute
// type and writes the output once, so dst may equal any source. The
// per-element arithmetic is element_ops.h's, which repeats the CPU kernels'
// (reduce_kernels.inc, elementwise.cc) operation by operation and is
// checked against them on the host (tests/cuda_test.cc); on the device the
// same operations round the same way because the build has no FMA
// contraction (--fmad=false) and nvcc's default IEEE division
// (-prec-div=true) and denormals (-ftz=false).
// A launch is a grid of 256-thread blocks covering the elements (at most
// 2^20 blocks; the loop strides over the rest).
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/element_ops.h"
#include "collectives/half_bits.h"

namespace kolo::collectives::cuda::launch {
namespace {

using ops::BFloat16Lanes;
using ops::HalfLanes;
using ops::OpKind;
using ops::PlainLanes;

// The sources of one reduceMany, passed by value as a kernel parameter.
struct Sources {
  const void* p[kMaxSources];
};

__device__ __forceinline__ size_t firstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t stride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i] (n >= 2), the
// chain accumulated in the compute type and rounded once.
template <class L, OpKind K>
__global__ void reduceManyKernel(typename L::Storage* dst, Sources srcs, int n,
                                 size_t count) {
  for (size_t i = firstIndex(); i < count; i += stride()) {
    dst[i] = ops::reduceElement<L, K>(srcs.p, n, i);
  }
}

// buf[i] = buf[i] / divisor in the compute type.
template <class L>
__global__ void divideFloatKernel(typename L::Storage* buf, size_t count,
                                  typename L::Compute divisor) {
  for (size_t i = firstIndex(); i < count; i += stride()) {
    buf[i] = ops::divideElement<L>(buf[i], divisor);
  }
}

// Truncating integer division (divisor a whole number >= 1).
template <class T>
__global__ void divideIntegerKernel(T* buf, size_t count, long long divisor) {
  for (size_t i = firstIndex(); i < count; i += stride()) {
    buf[i] = ops::divideIntegerElement(buf[i], divisor);
  }
}

// As elementwise.cc's scaleInPlace: float32 in float, float64 in double;
// the others widened to double, multiplied, and converted back (16-bit
// floats through float32, integers truncated).
template <class T>
__global__ void scaleFloatKernel(T* buf, size_t count, T factor) {
  for (size_t i = firstIndex(); i < count; i += stride()) {
    buf[i] = ops::scaleFloatElement(buf[i], factor);
  }
}

template <class L>
__global__ void scaleHalfKernel(uint16_t* buf, size_t count, double factor) {
  for (size_t i = firstIndex(); i < count; i += stride()) {
    buf[i] = ops::scaleHalfElement<L>(buf[i], factor);
  }
}

template <class T>
__global__ void scaleIntegerKernel(T* buf, size_t count, double factor) {
  for (size_t i = firstIndex(); i < count; i += stride()) {
    buf[i] = ops::scaleIntegerElement(buf[i], factor);
  }
}

__global__ void compressKernel(uint16_t* dst, const float* src, size_t count) {
  for (size_t i = firstIndex(); i < count; i += stride())
    dst[i] = floatToHalfBits(src[i]);
}

__global__ void decompressKernel(float* dst, const uint16_t* src, size_t count) {
  for (size_t i = firstIndex(); i < count; i += stride())
    dst[i] = halfBitsToFloat(src[i]);
}

// The IPC collectives' fan-in / fan-out (reduceToMany): element i of every
// source reduced (element_ops.h's fanIn*, the average's division
// included) and written to every destination. One thread owns an element
// (or a 16-byte vector of them): it reads all sources before it writes,
// so a destination may equal a source.
struct Targets {
  void* p[kMaxSources];
};

template <class L, OpKind K>
__global__ void fanKernel(Targets dsts, int m, Sources srcs, int n, size_t count,
                          double divisor) {
  using S = typename L::Storage;
  for (size_t i = firstIndex(); i < count; i += stride()) {
    const S v = ops::fanInElement<L, K>(srcs.p, n, i, divisor);
    for (int j = 0; j < m; ++j) static_cast<S*>(dsts.p[j])[i] = v;
  }
}

// The same on 16-byte vectors (every pointer 16-byte aligned): one load
// and one store instruction per vector and buffer, the lanes computed
// with the same element functions in the same order.
template <class L, OpKind K>
__global__ void fanVectorKernel(Targets dsts, int m, Sources srcs, int n, size_t vectors,
                                double divisor) {
  using S = typename L::Storage;
  using C = typename L::Compute;
  constexpr int kLanes = 16 / sizeof(S);
  union Pack {
    uint4 raw;
    S lane[kLanes];
  };
  for (size_t v = firstIndex(); v < vectors; v += stride()) {
    Pack in;
    in.raw = static_cast<const uint4*>(srcs.p[0])[v];
    C acc[kLanes];
#pragma unroll
    for (int l = 0; l < kLanes; ++l) acc[l] = ops::fanInStart<L, K>(in.lane[l]);
    for (int k = 1; k < n; ++k) {
      in.raw = static_cast<const uint4*>(srcs.p[k])[v];
#pragma unroll
      for (int l = 0; l < kLanes; ++l) acc[l] = ops::fanInStep<L, K>(acc[l], in.lane[l]);
    }
    Pack out;
#pragma unroll
    for (int l = 0; l < kLanes; ++l) out.lane[l] = ops::fanInFinish<L>(acc[l], divisor);
    for (int j = 0; j < m; ++j) static_cast<uint4*>(dsts.p[j])[v] = out.raw;
  }
}

constexpr unsigned kThreads = 256;

unsigned blocksFor(size_t count) {
  return static_cast<unsigned>(
      std::min<size_t>((count + kThreads - 1) / kThreads, 1u << 20));
}

cudaStream_t asStream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

int launched() {
  return static_cast<int>(cudaGetLastError());
}

template <class L>
int reduceManyFor(void* dst, const Sources& srcs, int n, size_t count, ReduceOp op,
                  cudaStream_t s) {
  auto* d = static_cast<typename L::Storage*>(dst);
  const unsigned blocks = blocksFor(count);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      reduceManyKernel<L, OpKind::kSum><<<blocks, kThreads, 0, s>>>(d, srcs, n, count);
      break;
    case ReduceOp::kMin:
      reduceManyKernel<L, OpKind::kMin><<<blocks, kThreads, 0, s>>>(d, srcs, n, count);
      break;
    case ReduceOp::kMax:
      reduceManyKernel<L, OpKind::kMax><<<blocks, kThreads, 0, s>>>(d, srcs, n, count);
      break;
    case ReduceOp::kProduct:
      reduceManyKernel<L, OpKind::kProduct>
          <<<blocks, kThreads, 0, s>>>(d, srcs, n, count);
      break;
  }
  return launched();
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Vectors over the aligned prefix, then the scalar kernel over the rest.
template <class L, OpKind K>
void fanLaunch(const Targets& dsts, int m, const Sources& srcs, int n, size_t count,
               double divisor, cudaStream_t s) {
  using S = typename L::Storage;
  constexpr size_t kLanes = 16 / sizeof(S);
  bool vectorizable = count >= kLanes;
  for (int k = 0; k < n && vectorizable; ++k) vectorizable = aligned16(srcs.p[k]);
  for (int j = 0; j < m && vectorizable; ++j) vectorizable = aligned16(dsts.p[j]);
  size_t done = 0;
  if (vectorizable) {
    const size_t vectors = count / kLanes;
    fanVectorKernel<L, K>
        <<<blocksFor(vectors), kThreads, 0, s>>>(dsts, m, srcs, n, vectors, divisor);
    done = vectors * kLanes;
  }
  if (done == count) return;
  Targets tailDsts = dsts;
  Sources tailSrcs = srcs;
  for (int j = 0; j < m; ++j) tailDsts.p[j] = static_cast<S*>(dsts.p[j]) + done;
  for (int k = 0; k < n; ++k) tailSrcs.p[k] = static_cast<const S*>(srcs.p[k]) + done;
  fanKernel<L, K><<<blocksFor(count - done), kThreads, 0, s>>>(tailDsts, m, tailSrcs, n,
                                                               count - done, divisor);
}

template <class L>
int fanFor(const Targets& dsts, int m, const Sources& srcs, int n, size_t count,
           ReduceOp op, cudaStream_t s) {
  const double divisor = op == ReduceOp::kAverage ? static_cast<double>(n) : 0.0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      fanLaunch<L, OpKind::kSum>(dsts, m, srcs, n, count, divisor, s);
      break;
    case ReduceOp::kMin:
      fanLaunch<L, OpKind::kMin>(dsts, m, srcs, n, count, divisor, s);
      break;
    case ReduceOp::kMax:
      fanLaunch<L, OpKind::kMax>(dsts, m, srcs, n, count, divisor, s);
      break;
    case ReduceOp::kProduct:
      fanLaunch<L, OpKind::kProduct>(dsts, m, srcs, n, count, divisor, s);
      break;
  }
  return launched();
}

}  // namespace

int reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
               ReduceOp op, void* stream) {
  Sources sources{};
  for (int k = 0; k < n; ++k) sources.p[k] = srcs[k];
  const cudaStream_t s = asStream(stream);
  switch (dtype) {
    case DataType::kFloat32:
      return reduceManyFor<PlainLanes<float>>(dst, sources, n, count, op, s);
    case DataType::kFloat64:
      return reduceManyFor<PlainLanes<double>>(dst, sources, n, count, op, s);
    case DataType::kFloat16:
      return reduceManyFor<HalfLanes>(dst, sources, n, count, op, s);
    case DataType::kBFloat16:
      return reduceManyFor<BFloat16Lanes>(dst, sources, n, count, op, s);
    case DataType::kInt32:
      return reduceManyFor<PlainLanes<int32_t>>(dst, sources, n, count, op, s);
    case DataType::kInt64:
      return reduceManyFor<PlainLanes<int64_t>>(dst, sources, n, count, op, s);
    case DataType::kUInt8:
      return reduceManyFor<PlainLanes<uint8_t>>(dst, sources, n, count, op, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int divide(void* buf, size_t count, DataType dtype, double divisor, void* stream) {
  const cudaStream_t s = asStream(stream);
  const unsigned b = blocksFor(count);
  const auto whole = static_cast<long long>(divisor);
  switch (dtype) {
    case DataType::kFloat32:
      divideFloatKernel<PlainLanes<float>><<<b, kThreads, 0, s>>>(
          static_cast<float*>(buf), count, static_cast<float>(divisor));
      break;
    case DataType::kFloat64:
      divideFloatKernel<PlainLanes<double>>
          <<<b, kThreads, 0, s>>>(static_cast<double*>(buf), count, divisor);
      break;
    case DataType::kFloat16:
      divideFloatKernel<HalfLanes><<<b, kThreads, 0, s>>>(
          static_cast<uint16_t*>(buf), count, static_cast<float>(divisor));
      break;
    case DataType::kBFloat16:
      divideFloatKernel<BFloat16Lanes><<<b, kThreads, 0, s>>>(
          static_cast<uint16_t*>(buf), count, static_cast<float>(divisor));
      break;
    case DataType::kInt32:
      divideIntegerKernel<<<b, kThreads, 0, s>>>(static_cast<int32_t*>(buf), count,
                                                 whole);
      break;
    case DataType::kInt64:
      divideIntegerKernel<<<b, kThreads, 0, s>>>(static_cast<int64_t*>(buf), count,
                                                 whole);
      break;
    case DataType::kUInt8:
      divideIntegerKernel<<<b, kThreads, 0, s>>>(static_cast<uint8_t*>(buf), count,
                                                 whole);
      break;
  }
  return launched();
}

int scale(void* buf, size_t count, DataType dtype, double factor, void* stream) {
  const cudaStream_t s = asStream(stream);
  const unsigned b = blocksFor(count);
  switch (dtype) {
    case DataType::kFloat32:
      scaleFloatKernel<<<b, kThreads, 0, s>>>(static_cast<float*>(buf), count,
                                              static_cast<float>(factor));
      break;
    case DataType::kFloat64:
      scaleFloatKernel<<<b, kThreads, 0, s>>>(static_cast<double*>(buf), count, factor);
      break;
    case DataType::kFloat16:
      scaleHalfKernel<HalfLanes>
          <<<b, kThreads, 0, s>>>(static_cast<uint16_t*>(buf), count, factor);
      break;
    case DataType::kBFloat16:
      scaleHalfKernel<BFloat16Lanes>
          <<<b, kThreads, 0, s>>>(static_cast<uint16_t*>(buf), count, factor);
      break;
    case DataType::kInt32:
      scaleIntegerKernel<<<b, kThreads, 0, s>>>(static_cast<int32_t*>(buf), count,
                                                factor);
      break;
    case DataType::kInt64:
      scaleIntegerKernel<<<b, kThreads, 0, s>>>(static_cast<int64_t*>(buf), count,
                                                factor);
      break;
    case DataType::kUInt8:
      scaleIntegerKernel<<<b, kThreads, 0, s>>>(static_cast<uint8_t*>(buf), count,
                                                factor);
      break;
  }
  return launched();
}

int compressToHalf(uint16_t* dst, const float* src, size_t count, void* stream) {
  compressKernel<<<blocksFor(count), kThreads, 0, asStream(stream)>>>(dst, src, count);
  return launched();
}

int decompressFromHalf(float* dst, const uint16_t* src, size_t count, void* stream) {
  decompressKernel<<<blocksFor(count), kThreads, 0, asStream(stream)>>>(dst, src, count);
  return launched();
}

int reduceToMany(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
                 DataType dtype, ReduceOp op, void* stream) {
  Targets targets{};
  Sources sources{};
  for (int j = 0; j < m; ++j) targets.p[j] = dsts[j];
  for (int k = 0; k < n; ++k) sources.p[k] = srcs[k];
  const cudaStream_t s = asStream(stream);
  switch (dtype) {
    case DataType::kFloat32:
      return fanFor<PlainLanes<float>>(targets, m, sources, n, count, op, s);
    case DataType::kFloat64:
      return fanFor<PlainLanes<double>>(targets, m, sources, n, count, op, s);
    case DataType::kFloat16:
      return fanFor<HalfLanes>(targets, m, sources, n, count, op, s);
    case DataType::kBFloat16:
      return fanFor<BFloat16Lanes>(targets, m, sources, n, count, op, s);
    case DataType::kInt32:
      return fanFor<PlainLanes<int32_t>>(targets, m, sources, n, count, op, s);
    case DataType::kInt64:
      return fanFor<PlainLanes<int64_t>>(targets, m, sources, n, count, op, s);
    case DataType::kUInt8:
      return fanFor<PlainLanes<uint8_t>>(targets, m, sources, n, count, op, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace kolo::collectives::cuda::launch
