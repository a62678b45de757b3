#include <kolo/types.h>

#include <string>

#include "common/check.h"

namespace kolo {

// Through unsigned: a negative value of a signed underlying type wraps to a
// large one, and an unsigned underlying type needs no check against 0.
bool isValid(DataType type) {
  return static_cast<unsigned>(type) < static_cast<unsigned>(kNumDataTypes);
}

bool isValid(ReduceOp op) {
  return static_cast<unsigned>(op) < static_cast<unsigned>(kNumReduceOps);
}

size_t elementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "unknown dtype value " << static_cast<int>(type));
}

std::string_view toString(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
  }
  return "invalid-dtype";
}

std::string_view toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "invalid-op";
}

DataType parseDataType(std::string_view name) {
  if (name == "float32" || name == "float" || name == "f32") return DataType::kFloat32;
  if (name == "float64" || name == "double" || name == "f64") return DataType::kFloat64;
  if (name == "float16" || name == "half" || name == "f16") return DataType::kFloat16;
  if (name == "bfloat16" || name == "bf16") return DataType::kBFloat16;
  if (name == "int32" || name == "int") return DataType::kInt32;
  if (name == "int64" || name == "long") return DataType::kInt64;
  if (name == "uint8" || name == "byte") return DataType::kUInt8;
  KOLO_THROW(ErrorCode::kInvalidArgument, "unknown dtype '"
                                              << name
                                              << "' (expected float32, float64, float16, "
                                                 "bfloat16, int32, int64 or uint8)");
}

ReduceOp parseReduceOp(std::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg" || name == "average") return ReduceOp::kAverage;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  if (name == "prod" || name == "product") return ReduceOp::kProduct;
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "unknown reduction '" << name << "' (expected sum, avg, min, max or prod)");
}

}  // namespace kolo
