// kolo's dtypes and ops as NCCL's enums (nccl_types.h).
#include "collectives/cuda/nccl_types.h"

#include "common/check.h"

namespace kolo::collectives::cuda::nccl {

int ncclDataTypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return kFloat32;
    case DataType::kFloat64: return kFloat64;
    case DataType::kFloat16: return kFloat16;
    case DataType::kBFloat16: return kBfloat16;
    case DataType::kInt32: return kInt32;
    case DataType::kInt64: return kInt64;
    case DataType::kUInt8: return kUint8;
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "NCCL: dtype " << static_cast<int>(dtype) << " is not a kolo dtype");
}

Reduction ncclReductionOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return {kSum, false};
    case ReduceOp::kAverage: return {kSum, true};
    case ReduceOp::kMin: return {kMin, false};
    case ReduceOp::kMax: return {kMax, false};
    case ReduceOp::kProduct: return {kProd, false};
  }
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "NCCL: op " << static_cast<int>(op) << " is not a kolo reduction op");
}

ErrorCode errorCodeOf(int ncclResult) {
  return ncclResult == kRemoteError || ncclResult == kSystemError ? ErrorCode::kPeerLost
                                                                  : ErrorCode::kInternal;
}

}  // namespace kolo::collectives::cuda::nccl
