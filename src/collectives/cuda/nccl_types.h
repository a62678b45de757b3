// kolo's dtypes and ops as NCCL's enums (ncclDataType_t, ncclRedOp_t),
// without nccl.h: the values are NCCL's ABI, fixed since NCCL 2.0 (bfloat16
// since 2.10). tests/nccl_test.cc compares them with nccl.h where the
// header is installed.
//
// Contract
// - ncclDataTypeOf: every kolo DataType has an NCCL type of the same width
//   and representation; a value outside the enum is Error(kInvalidArgument).
// - ncclReductionOf: the NCCL op that runs `op`, and whether the caller
//   divides by the group's size afterwards (kAverage is ncclSum, then
//   divideInPlace of device_reduce.h, so that the average is the sum
//   divided once in the compute precision as the CPU collectives do:
//   NCCL's own ncclAvg pre-multiplies each float input by 1/size).
//   Pure functions; thread-safe.
#pragma once

#include <kolo/error.h>
#include <kolo/types.h>

namespace kolo::collectives::cuda::nccl {

// ncclDataType_t
inline constexpr int kInt8 = 0;
inline constexpr int kUint8 = 1;
inline constexpr int kInt32 = 2;
inline constexpr int kUint32 = 3;
inline constexpr int kInt64 = 4;
inline constexpr int kUint64 = 5;
inline constexpr int kFloat16 = 6;
inline constexpr int kFloat32 = 7;
inline constexpr int kFloat64 = 8;
inline constexpr int kBfloat16 = 9;

// ncclRedOp_t
inline constexpr int kSum = 0;
inline constexpr int kProd = 1;
inline constexpr int kMax = 2;
inline constexpr int kMin = 3;
inline constexpr int kAvg = 4;

// ncclResult_t values kolo tells apart.
inline constexpr int kSuccess = 0;
inline constexpr int kUnhandledCudaError = 1;
inline constexpr int kSystemError = 2;
inline constexpr int kInternalError = 3;
inline constexpr int kInvalidArgument = 4;
inline constexpr int kInvalidUsage = 5;
inline constexpr int kRemoteError = 6;
inline constexpr int kInProgress = 7;

struct Reduction {
  int op = kSum;              // ncclRedOp_t
  bool divideBySize = false;  // kAverage: the caller divides the sum
};

int ncclDataTypeOf(DataType dtype);
Reduction ncclReductionOf(ReduceOp op);

// The kolo error code an NCCL failure becomes: a remote or system error
// (a peer gone, a connection lost) is kPeerLost, anything else kInternal.
ErrorCode errorCodeOf(int ncclResult);

}  // namespace kolo::collectives::cuda::nccl
