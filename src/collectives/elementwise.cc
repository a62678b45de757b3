// Per-dtype math around a reduction (elementwise.h).
//
// Copies with a per-element operation (finishInto, copyScaled) go through
// L1-sized chunks: the chunk is copied, then the vectorized kernels
// (divideInPlace; scaleInPlace) rework it while it is in cache, so the pair
// costs about one pass over memory.
#include "collectives/elementwise.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "collectives/reduce.h"

namespace kolo::collectives {

// buf[i] *= factor, in the element type (float16 / bfloat16 through float,
// integers truncated toward zero).
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  auto loop = [&](auto* p, auto convertIn, auto convertOut) {
    for (size_t i = 0; i < count; ++i) p[i] = convertOut(convertIn(p[i]) * factor);
  };
  switch (dtype) {
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(buf);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) p[i] *= f;
      return;
    }
    case DataType::kFloat64: {
      auto* p = static_cast<double*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] *= factor;
      return;
    }
    case DataType::kFloat16:
      loop(
          static_cast<uint16_t*>(buf), [](uint16_t v) { return halfToFloat(v); },
          [](double v) { return floatToHalf(static_cast<float>(v)); });
      return;
    case DataType::kBFloat16:
      loop(
          static_cast<uint16_t*>(buf), [](uint16_t v) { return bfloat16ToFloat(v); },
          [](double v) { return floatToBfloat16(static_cast<float>(v)); });
      return;
    case DataType::kInt32:
      loop(
          static_cast<int32_t*>(buf), [](int32_t v) { return double(v); },
          [](double v) { return static_cast<int32_t>(v); });
      return;
    case DataType::kInt64:
      loop(
          static_cast<int64_t*>(buf), [](int64_t v) { return double(v); },
          [](double v) { return static_cast<int64_t>(v); });
      return;
    case DataType::kUInt8:
      loop(
          static_cast<uint8_t*>(buf), [](uint8_t v) { return double(v); },
          [](double v) { return static_cast<uint8_t>(v); });
      return;
  }
}

// Copies with a per-element operation go through L1-sized chunks: the chunk
// is copied, then the vectorized kernels (divideInPlace; scaleInPlace)
// rework it while it is in cache, so the pair costs about one pass over
// memory. The kernels' per-element results are those of the whole-buffer
// calls, so a result does not depend on the path (deterministic sums).
namespace {
constexpr size_t kChunkBytes = size_t{16} << 10;
}  // namespace

// An allreduce's result from its sum: dst = src / divisor (1: none) *
// postscale; dst may equal src.
void finishInto(void* dst, const void* src, size_t count, DataType dtype, int divisor,
                double postscale) {
  if (count == 0) return;
  auto rework = [&](void* p, size_t m) {
    if (divisor != 1) divideInPlace(p, m, dtype, divisor);
    scaleInPlace(p, m, dtype, postscale);
  };
  if (dst == src || (divisor == 1 && postscale == 1.0)) {
    if (dst != src) std::memcpy(dst, src, count * elementSize(dtype));
    rework(dst, count);
    return;
  }
  const size_t esize = elementSize(dtype);
  const size_t chunk = std::max<size_t>(1, kChunkBytes / esize);
  for (size_t at = 0; at < count; at += chunk) {
    const size_t m = std::min(chunk, count - at);
    void* d = static_cast<uint8_t*>(dst) + at * esize;
    std::memcpy(d, static_cast<const uint8_t*>(src) + at * esize, m * esize);
    rework(d, m);
  }
}

// dst = src * factor (an input times prescale); dst may equal src.
void copyScaled(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  finishInto(dst, src, count, dtype, 1, factor);
}

namespace {

template <typename T>
void fillWith(void* buf, size_t count, T v) {
  std::fill_n(static_cast<T*>(buf), count, v);
}

}  // namespace

// The identity of `op` (what a rank without data contributes): 0 for sum
// and average, 1 for product, the largest value for min, the smallest for
// max.
void fillIdentity(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    std::memset(buf, 0, count * elementSize(dtype));
    return;
  }
  const int which = op == ReduceOp::kProduct ? 0 : op == ReduceOp::kMin ? 1 : 2;
  auto pick = [&](auto one, auto high, auto low) {
    return which == 0 ? one : which == 1 ? high : low;
  };
  switch (dtype) {
    case DataType::kFloat32:
      return fillWith<float>(buf, count,
                             pick(1.0f, std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()));
    case DataType::kFloat64:
      return fillWith<double>(buf, count,
                              pick(1.0, std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity()));
    case DataType::kFloat16:
      return fillWith<uint16_t>(
          buf, count, pick(uint16_t{0x3C00}, uint16_t{0x7C00}, uint16_t{0xFC00}));
    case DataType::kBFloat16:
      return fillWith<uint16_t>(
          buf, count, pick(uint16_t{0x3F80}, uint16_t{0x7F80}, uint16_t{0xFF80}));
    case DataType::kInt32:
      return fillWith<int32_t>(buf, count,
                               pick(int32_t{1}, std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min()));
    case DataType::kInt64:
      return fillWith<int64_t>(buf, count,
                               pick(int64_t{1}, std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()));
    case DataType::kUInt8:
      return fillWith<uint8_t>(buf, count, pick(uint8_t{1}, uint8_t{255}, uint8_t{0}));
  }
}

}  // namespace kolo::collectives
