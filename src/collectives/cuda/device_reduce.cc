// The host side of the device kernels (device_reduce.h): argument checks,
// then one launch (device_kernels.cu). Checks come in this order so that
// each failure names its first cause: arguments that need no device
// (dtype, op, counts, null pointers, the number of sources, the divisor),
// then a device to run on (probeDevices), then each pointer's memory type
// as the CUDA runtime knows it (a host pointer the device cannot address
// would otherwise be an illegal-address fault inside the kernel, which
// poisons the whole CUDA context).
#include "collectives/cuda/device_reduce.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "collectives/cuda/device_kernels.h"
#include "collectives/cuda/device_runtime.h"
#include "common/check.h"

namespace kolo::collectives::cuda {
namespace {

void checkDtypeAndCount(const char* what, DataType dtype, size_t count) {
  if (!isValid(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown dtype value " << static_cast<int>(dtype));
  }
  if (count > SIZE_MAX / elementSize(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": count " << count << " of "
                                                 << toString(dtype)
                                                 << " overflows the address space");
  }
}

void checkOp(const char* what, ReduceOp op) {
  if (!isValid(op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown reduce op value " << static_cast<int>(op));
  }
}

void checkNotNull(const char* what, const char* name, const void* p, size_t count) {
  if (p == nullptr && count != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": null " << name << " buffer with count " << count);
  }
}

void checkHaveDevice(const char* what) {
  const DeviceProbe& probe = probeDevices();
  if (probe.count == 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": no CUDA device: " << probe.reason);
  }
}

// The device must be able to address p: device, managed or pinned host
// memory. Plain (unregistered) host memory is refused.
void checkDeviceAddressable(const char* what, const char* name, const void* p) {
  cudaPointerAttributes attributes{};
  const cudaError_t e = cudaPointerGetAttributes(&attributes, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": " << name << " buffer " << p
                                                 << " is not memory CUDA knows ("
                                                 << cudaErrorText(e) << ")");
  }
  if (attributes.type == cudaMemoryTypeUnregistered) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": " << name << " buffer " << p
                    << " is host memory the device cannot address (pass device, managed "
                       "or pinned memory)");
  }
}

void checkLaunch(const char* what, int code) {
  if (code != 0) {
    KOLO_THROW(ErrorCode::kInternal,
               what << ": kernel launch failed: " << cudaErrorText(code));
  }
}

void checkDivisor(const char* what, DataType dtype, double divisor) {
  const bool integer =
      dtype == DataType::kInt32 || dtype == DataType::kInt64 || dtype == DataType::kUInt8;
  if (integer &&
      !(divisor >= 1.0 && divisor <= 0x1p53 && std::trunc(divisor) == divisor)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": " << toString(dtype)
                    << " needs a whole divisor in [1, 2^53], got " << divisor);
  }
}

// reduceMany, with the public call's name in its errors.
void reduceManyAs(const char* kWhat, void* dst, const void* const* srcs, int n,
                  size_t count, DataType dtype, ReduceOp op, void* stream) {
  checkDtypeAndCount(kWhat, dtype, count);
  checkOp(kWhat, op);
  if (n < 1 || n > kMaxSources) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               kWhat << ": needs 1 to " << kMaxSources << " sources, got n = " << n);
  }
  checkNotNull(kWhat, "dst", dst, count);
  checkNotNull(kWhat, "srcs", srcs, count);
  for (int k = 0; k < n && count != 0; ++k) {
    if (srcs[k] == nullptr) {
      KOLO_THROW(ErrorCode::kInvalidArgument, kWhat << ": null source " << k << " of "
                                                    << n << " with count " << count);
    }
  }
  checkHaveDevice(kWhat);
  if (count == 0) return;
  checkDeviceAddressable(kWhat, "dst", dst);
  for (int k = 0; k < n; ++k) checkDeviceAddressable(kWhat, "source", srcs[k]);
  if (n == 1) {
    if (dst == srcs[0]) return;
    const cudaError_t e =
        cudaMemcpyAsync(dst, srcs[0], count * elementSize(dtype), cudaMemcpyDefault,
                        static_cast<cudaStream_t>(stream));
    checkLaunch(kWhat, static_cast<int>(e));
    return;
  }
  checkLaunch(kWhat, launch::reduceMany(dst, srcs, n, count, dtype, op, stream));
}

}  // namespace

void reduceMany(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op, void* stream) {
  reduceManyAs("cuda::reduceMany", dst, srcs, n, count, dtype, op, stream);
}

void reduce2(void* dst, const void* a, const void* b, size_t count, DataType dtype,
             ReduceOp op, void* stream) {
  checkNotNull("cuda::reduce2", "a", a, count);
  checkNotNull("cuda::reduce2", "b", b, count);
  const void* srcs[2] = {a, b};
  reduceManyAs("cuda::reduce2", dst, srcs, 2, count, dtype, op, stream);
}

void divideInPlace(void* buf, size_t count, DataType dtype, double divisor,
                   void* stream) {
  constexpr const char* kWhat = "cuda::divideInPlace";
  checkDtypeAndCount(kWhat, dtype, count);
  checkNotNull(kWhat, "buf", buf, count);
  checkDivisor(kWhat, dtype, divisor);
  checkHaveDevice(kWhat);
  if (count == 0) return;
  checkDeviceAddressable(kWhat, "buf", buf);
  checkLaunch(kWhat, launch::divide(buf, count, dtype, divisor, stream));
}

void scaleInPlace(void* buf, size_t count, DataType dtype, double factor, void* stream) {
  constexpr const char* kWhat = "cuda::scaleInPlace";
  checkDtypeAndCount(kWhat, dtype, count);
  checkNotNull(kWhat, "buf", buf, count);
  checkHaveDevice(kWhat);
  if (count == 0 || factor == 1.0) return;
  checkDeviceAddressable(kWhat, "buf", buf);
  checkLaunch(kWhat, launch::scale(buf, count, dtype, factor, stream));
}

void compressToHalf(uint16_t* dst, const float* src, size_t count, void* stream) {
  constexpr const char* kWhat = "cuda::compressToHalf";
  checkDtypeAndCount(kWhat, DataType::kFloat32, count);
  checkNotNull(kWhat, "dst", dst, count);
  checkNotNull(kWhat, "src", src, count);
  checkHaveDevice(kWhat);
  if (count == 0) return;
  checkDeviceAddressable(kWhat, "dst", dst);
  checkDeviceAddressable(kWhat, "src", src);
  checkLaunch(kWhat, launch::compressToHalf(dst, src, count, stream));
}

void decompressFromHalf(float* dst, const uint16_t* src, size_t count, void* stream) {
  constexpr const char* kWhat = "cuda::decompressFromHalf";
  checkDtypeAndCount(kWhat, DataType::kFloat32, count);
  checkNotNull(kWhat, "dst", dst, count);
  checkNotNull(kWhat, "src", src, count);
  checkHaveDevice(kWhat);
  if (count == 0) return;
  checkDeviceAddressable(kWhat, "dst", dst);
  checkDeviceAddressable(kWhat, "src", src);
  checkLaunch(kWhat, launch::decompressFromHalf(dst, src, count, stream));
}

void reduceToMany(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
                  DataType dtype, ReduceOp op, void* stream) {
  constexpr const char* kWhat = "cuda::reduceToMany";
  checkDtypeAndCount(kWhat, dtype, count);
  checkOp(kWhat, op);
  if (n < 1 || n > kMaxSources || m < 1 || m > kMaxSources) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               kWhat << ": needs 1 to " << kMaxSources
                     << " sources and destinations, got n = " << n << ", m = " << m);
  }
  checkNotNull(kWhat, "dsts", dsts, count);
  checkNotNull(kWhat, "srcs", srcs, count);
  for (int k = 0; k < n && count != 0; ++k) checkNotNull(kWhat, "source", srcs[k], count);
  for (int j = 0; j < m && count != 0; ++j)
    checkNotNull(kWhat, "destination", dsts[j], count);
  checkHaveDevice(kWhat);
  if (count == 0) return;
  for (int j = 0; j < m; ++j) checkDeviceAddressable(kWhat, "destination", dsts[j]);
  for (int k = 0; k < n; ++k) checkDeviceAddressable(kWhat, "source", srcs[k]);
  checkLaunch(kWhat, launch::reduceToMany(dsts, m, srcs, n, count, dtype, op, stream));
}

}  // namespace kolo::collectives::cuda
