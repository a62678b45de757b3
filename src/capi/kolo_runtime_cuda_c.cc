// The `_cuda` submissions of kolo/runtime.h: each is the host call of the
// same name with its request made a device request (capi_internal.h,
// CudaSubmission; kolo_runtime_c.cc, prepareMemory), so the argument
// checks, the handles and the errors are the host call's.
#include <kolo/runtime.h>

#include <string>

#include "capi/capi_internal.h"

namespace kolo::capi {
namespace {

thread_local const kolo_cuda_memory* tMemory = nullptr;

}  // namespace

CudaSubmission::CudaSubmission(const kolo_cuda_memory* memory) : previous_(tMemory) {
  tMemory = memory;
}
CudaSubmission::~CudaSubmission() {
  tMemory = previous_;
}
const kolo_cuda_memory* CudaSubmission::current() {
  return tMemory;
}

}  // namespace kolo::capi

namespace {

int nullMemory(const char* fn) {
  return kolo::capi::fail(
      KOLO_ERR_INVALID_ARGUMENT,
      std::string(fn) + ": memory is null (the device and stream of the buffers)");
}

}  // namespace

extern "C" {

int kolo_allreduce_async_cuda(const char* name, const void* send, void* recv, int ndim,
                              const int64_t* shape, kolo_dtype dtype, kolo_op op,
                              double prescale, double postscale, int process_set,
                              kolo_handle* handle, const kolo_cuda_memory* memory) {
  if (memory == nullptr) return nullMemory("kolo_allreduce_async_cuda");
  kolo::capi::CudaSubmission scope(memory);
  return kolo_allreduce_async(name, send, recv, ndim, shape, dtype, op, prescale,
                              postscale, process_set, handle);
}

int kolo_grouped_allreduce_async_cuda(int n, const char* const* names,
                                      const void* const* sends, void* const* recvs,
                                      const int* ndims, const int64_t* const* shapes,
                                      kolo_dtype dtype, kolo_op op, double prescale,
                                      double postscale, int process_set,
                                      kolo_handle* handles,
                                      const kolo_cuda_memory* memory) {
  if (memory == nullptr) return nullMemory("kolo_grouped_allreduce_async_cuda");
  kolo::capi::CudaSubmission scope(memory);
  return kolo_grouped_allreduce_async(n, names, sends, recvs, ndims, shapes, dtype, op,
                                      prescale, postscale, process_set, handles);
}

int kolo_allgather_async_cuda(const char* name, const void* send, int ndim,
                              const int64_t* shape, kolo_dtype dtype, int process_set,
                              kolo_handle* handle, const kolo_cuda_memory* memory) {
  if (memory == nullptr) return nullMemory("kolo_allgather_async_cuda");
  kolo::capi::CudaSubmission scope(memory);
  return kolo_allgather_async(name, send, ndim, shape, dtype, process_set, handle);
}

int kolo_broadcast_async_cuda(const char* name, void* buf, int ndim, const int64_t* shape,
                              kolo_dtype dtype, int root, int process_set,
                              kolo_handle* handle, const kolo_cuda_memory* memory) {
  if (memory == nullptr) return nullMemory("kolo_broadcast_async_cuda");
  kolo::capi::CudaSubmission scope(memory);
  return kolo_broadcast_async(name, buf, ndim, shape, dtype, root, process_set, handle);
}

int kolo_alltoall_async_cuda(const char* name, const void* send, int ndim,
                             const int64_t* shape, const int64_t* splits, int nsplits,
                             kolo_dtype dtype, int process_set, kolo_handle* handle,
                             const kolo_cuda_memory* memory) {
  if (memory == nullptr) return nullMemory("kolo_alltoall_async_cuda");
  kolo::capi::CudaSubmission scope(memory);
  return kolo_alltoall_async(name, send, ndim, shape, splits, nsplits, dtype, process_set,
                             handle);
}

int kolo_reducescatter_async_cuda(const char* name, const void* send, int ndim,
                                  const int64_t* shape, kolo_dtype dtype, kolo_op op,
                                  int process_set, kolo_handle* handle,
                                  const kolo_cuda_memory* memory) {
  if (memory == nullptr) return nullMemory("kolo_reducescatter_async_cuda");
  kolo::capi::CudaSubmission scope(memory);
  return kolo_reducescatter_async(name, send, ndim, shape, dtype, op, process_set,
                                  handle);
}

}  // extern "C"
