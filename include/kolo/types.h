// Element types, reduction operations and the values every layer shares
// with the API: where a rank sits (Layout), a piece of a segmented
// allreduce (AllreduceSegment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kolo {

// The order matches kolo_dtype in kolo.h.
enum class DataType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
};
inline constexpr int kNumDataTypes = 7;

// The order matches kolo_op in kolo.h.
enum class ReduceOp : uint8_t {
  kSum,
  kAverage,
  kMin,
  kMax,
  kProduct,
};
inline constexpr int kNumReduceOps = 5;

// Bytes per element. Throws kolo::Error(kInvalidArgument) for a value
// outside the enum (e.g. a bad cast from C).
size_t elementSize(DataType type);
std::string_view toString(DataType type);
std::string_view toString(ReduceOp op);

// True when the integer is one of the enumerators.
bool isValid(DataType type);
bool isValid(ReduceOp op);

// Parses names used on command lines and in env: "float32"/"float",
// "float64"/"double", "float16"/"half", "bfloat16", "int32", "int64",
// "uint8"; "sum", "avg"/"average", "min", "max", "prod"/"product".
// Throws kolo::Error(kInvalidArgument) naming the bad string.
DataType parseDataType(std::string_view name);
ReduceOp parseReduceOp(std::string_view name);

// Where this rank sits in the job.
struct Layout {
  int rank = 0;
  int size = 1;
  int localRank = 0;  // among ranks with the same host id
  int localSize = 1;
  int crossRank = 0;  // index of this host among hosts
  int crossSize = 1;
  std::string hostId;
};

// One piece of a segmented allreduce: `count` elements read from `send` and
// written to `recv` (== send for in place).
struct AllreduceSegment {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
};

}  // namespace kolo
