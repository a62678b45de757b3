// The GPU calls of the C API (include/kolo/cuda.h, the `_cuda` submissions
// of kolo/runtime.h) and their C++ form (kolo/cuda_communicator.h): the
// build queries answer truthfully without kolo_init, and on a machine or
// build without a device every `_cuda` collective is a clear error naming
// the operation and what is missing, without touching the buffers,
// making a handle or breaking the communicator. What they do with a device
// is cuda_collectives_test's.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <kolo/cuda.h>
#include <kolo/cuda_communicator.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <stdlib.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#ifndef KOLO_TEST_EXPECT_CUDA
#error "tests/CMakeLists.txt defines KOLO_TEST_EXPECT_CUDA (the build's KOLO_HAVE_CUDA)"
#endif

namespace {

std::string lastError() {
  return kolo_last_error();
}

void clearLauncherEnv() {
  for (const char* v :
       {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_RENDEZVOUS",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
        "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE"}) {
    unsetenv(v);
  }
}

// What a `_cuda` call must say is missing on this machine and build.
std::string expectedCause() {
  int devices = 0;
  const char* reason = nullptr;
  EXPECT_EQ(kolo_cuda_device_count(&devices, &reason), KOLO_OK);
  if (!kolo_cuda_built()) return "no CUDA support";
  if (devices == 0) return std::string("no CUDA device: ") + reason;
  return "";
}

// What kolo_nccl_built should answer, asked of the library directly.
int expectedNccl() {
  if (!KOLO_TEST_EXPECT_CUDA) return 0;
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return 0;
  auto getVersion = reinterpret_cast<int (*)(int*)>(dlsym(lib, "ncclGetVersion"));
  int version = 0;
  if (getVersion == nullptr || getVersion(&version) != 0) return 0;
  return version >= 21403 ? version : 0;
}

TEST(CApiCuda, BuildQueriesNeedNoInit) {
  EXPECT_EQ(kolo_initialized(), 0);
  EXPECT_EQ(kolo_cuda_built(), KOLO_TEST_EXPECT_CUDA);
  EXPECT_EQ(kolo_nccl_built(), expectedNccl())
      << "NCCL's version when libnccl.so.2 (2.14.3 or later) loads in a build with CUDA";
  int devices = -1;
  const char* reason = nullptr;
  ASSERT_EQ(kolo_cuda_device_count(&devices, &reason), KOLO_OK);
  ASSERT_NE(reason, nullptr);
  EXPECT_GE(devices, 0);
  EXPECT_EQ(devices == 0, std::string(reason) != "") << reason;
  EXPECT_EQ(kolo_cuda_device_count(&devices, nullptr), KOLO_OK) << "reason is optional";
  EXPECT_EQ(kolo_cuda_device_count(nullptr, &reason), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kolo_cuda_device_count: count is null"), std::string::npos)
      << lastError();

  const kolo::CudaSupport support = kolo::cudaSupport();
  EXPECT_EQ(support.built, kolo_cuda_built() == 1);
  EXPECT_EQ(support.devices, devices);
  EXPECT_EQ(support.reason, reason);
  EXPECT_EQ(support.ncclVersion, kolo_nccl_built());
}

TEST(CApiCuda, BadArgumentsAndCallsBeforeInit) {
  float x[4] = {1, 2, 3, 4};
  kolo_cuda_memory memory = {0, nullptr};
  EXPECT_EQ(kolo_allreduce_cuda(x, x, 4, KOLO_FLOAT32, KOLO_SUM, &memory),
            KOLO_ERR_NOT_INITIALIZED);
  EXPECT_NE(lastError().find("kolo_allreduce_cuda called before kolo_init"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(kolo_allreduce_cuda(x, x, 4, static_cast<kolo_dtype>(42), KOLO_SUM, &memory),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kolo_allreduce_cuda: unknown dtype value 42"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(
      kolo_reduce_scatter_cuda(x, x, 1, KOLO_FLOAT32, static_cast<kolo_op>(-3), &memory),
      KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kolo_reduce_scatter_cuda: unknown op value -3"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(kolo_broadcast_cuda(x, 4, KOLO_FLOAT32, 0, nullptr),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kolo_broadcast_cuda: memory is null"), std::string::npos)
      << lastError();
}

TEST(CApiCuda, EveryCudaCollectiveIsAClearErrorWithoutADevice) {
  const std::string cause = expectedCause();
  if (cause.empty()) GTEST_SKIP() << "a CUDA device is present: cuda_collectives_test";
  clearLauncherEnv();
  ASSERT_EQ(kolo_init(), KOLO_OK) << lastError();
  std::vector<float> send = {1, 2, 3, 4}, recv = {9, 9, 9, 9};
  kolo_cuda_memory memory = {0, nullptr};
  const std::pair<const char*, std::function<int()>> calls[] = {
      {"allreduce",
       [&] {
         return kolo_allreduce_cuda(send.data(), recv.data(), 4, KOLO_FLOAT32, KOLO_SUM,
                                    &memory);
       }},
      {"broadcast",
       [&] { return kolo_broadcast_cuda(recv.data(), 4, KOLO_FLOAT32, 0, &memory); }},
      {"allgather",
       [&] {
         return kolo_allgather_cuda(send.data(), recv.data(), 4, KOLO_FLOAT32, &memory);
       }},
      {"reduce_scatter",
       [&] {
         return kolo_reduce_scatter_cuda(send.data(), recv.data(), 4, KOLO_FLOAT32,
                                         KOLO_MAX, &memory);
       }},
      {"alltoall",
       [&] {
         return kolo_alltoall_cuda(send.data(), recv.data(), 4, KOLO_FLOAT32, &memory);
       }},
  };
  for (const auto& [operation, call] : calls) {
    EXPECT_EQ(call(), KOLO_ERR_INVALID_ARGUMENT) << operation;
    const std::string message = lastError();
    EXPECT_NE(message.find(std::string(operation) + " on CUDA device memory"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(cause), std::string::npos) << message;
  }
  EXPECT_EQ(recv, std::vector<float>(4, 9.0f)) << "the buffers are never touched";

  memory.device = -1;
  EXPECT_EQ(
      kolo_allreduce_cuda(send.data(), recv.data(), 4, KOLO_FLOAT32, KOLO_SUM, &memory),
      KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("device -1 is not a CUDA device ordinal"), std::string::npos)
      << lastError();

  // The communicator still works on host memory (the device-pointer check
  // lets host memory through).
  ASSERT_EQ(kolo_allreduce(send.data(), recv.data(), 4, KOLO_FLOAT32, KOLO_SUM), KOLO_OK)
      << lastError();
  EXPECT_EQ(recv, send);
  EXPECT_EQ(kolo_finalize(), KOLO_OK) << lastError();
}

// The runtime's `_cuda` submissions: refused at the call (no handle), by
// operation, tensor name and cause; the runtime goes on with host memory.
TEST(CApiCuda, EveryCudaSubmissionIsAClearErrorWithoutADevice) {
  const std::string cause = expectedCause();
  if (cause.empty()) GTEST_SKIP() << "a CUDA device is present: cuda_collectives_test";
  clearLauncherEnv();
  ASSERT_EQ(kolo_init(), KOLO_OK) << lastError();
  std::vector<float> send = {1, 2, 3, 4}, recv = {9, 9, 9, 9};
  const int64_t shape[] = {4};
  kolo_cuda_memory memory = {0, nullptr};
  const char* names[] = {"g0"};
  const void* sends[] = {send.data()};
  void* recvs[] = {recv.data()};
  const int ndims[] = {1};
  const int64_t* shapes[] = {shape};
  const std::pair<const char*, std::function<int(kolo_handle*)>> calls[] = {
      {"kolo_allreduce_async_cuda 't': allreduce",
       [&](kolo_handle* h) {
         return kolo_allreduce_async_cuda("t", send.data(), recv.data(), 1, shape,
                                          KOLO_FLOAT32, KOLO_SUM, 1.0, 1.0, 0, h,
                                          &memory);
       }},
      {"kolo_grouped_allreduce_async_cuda 'g0': allreduce",
       [&](kolo_handle* h) {
         return kolo_grouped_allreduce_async_cuda(1, names, sends, recvs, ndims, shapes,
                                                  KOLO_FLOAT32, KOLO_AVG, 1.0, 1.0, 0, h,
                                                  &memory);
       }},
      {"kolo_allgather_async_cuda 't': allgather",
       [&](kolo_handle* h) {
         return kolo_allgather_async_cuda("t", send.data(), 1, shape, KOLO_FLOAT32, 0, h,
                                          &memory);
       }},
      {"kolo_broadcast_async_cuda 't': broadcast",
       [&](kolo_handle* h) {
         return kolo_broadcast_async_cuda("t", recv.data(), 1, shape, KOLO_FLOAT32, 0, 0,
                                          h, &memory);
       }},
      {"kolo_alltoall_async_cuda 't': alltoall",
       [&](kolo_handle* h) {
         return kolo_alltoall_async_cuda("t", send.data(), 1, shape, nullptr, 0,
                                         KOLO_FLOAT32, 0, h, &memory);
       }},
      {"kolo_reducescatter_async_cuda 't': reducescatter",
       [&](kolo_handle* h) {
         return kolo_reducescatter_async_cuda("t", send.data(), 1, shape, KOLO_FLOAT32,
                                              KOLO_MAX, 0, h, &memory);
       }},
  };
  for (const auto& [what, call] : calls) {
    kolo_handle h = 0;
    EXPECT_EQ(call(&h), KOLO_ERR_INVALID_ARGUMENT) << what;
    EXPECT_EQ(h, 0) << what << ": no handle is made";
    const std::string message = lastError();
    EXPECT_NE(message.find(std::string(what) + " on CUDA device memory: "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(cause), std::string::npos) << message;
  }
  EXPECT_EQ(recv, std::vector<float>(4, 9.0f)) << "the buffers are never touched";
  kolo_handle h = 0;
  EXPECT_EQ(kolo_allreduce_async_cuda("t", send.data(), recv.data(), 1, shape,
                                      KOLO_FLOAT32, KOLO_SUM, 1.0, 1.0, 0, &h, nullptr),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kolo_allreduce_async_cuda: memory is null"),
            std::string::npos)
      << lastError();
  memory.device = -2;
  EXPECT_EQ(kolo_broadcast_async_cuda("t", recv.data(), 1, shape, KOLO_FLOAT32, 0, 0, &h,
                                      &memory),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("device -2 is not a CUDA device ordinal"), std::string::npos)
      << lastError();

  // The host submission of the same name still runs (the refusals left
  // nothing pending), and a host operation has no CUDA event.
  ASSERT_EQ(kolo_allreduce_async("t", send.data(), recv.data(), 1, shape, KOLO_FLOAT32,
                                 KOLO_SUM, 1.0, 1.0, 0, &h),
            KOLO_OK)
      << lastError();
  ASSERT_EQ(kolo_wait(h), KOLO_OK) << lastError();
  EXPECT_EQ(recv, send);
  void* event = &h;
  EXPECT_EQ(kolo_handle_cuda_event(h, &event), KOLO_OK);
  EXPECT_EQ(event, nullptr);
  EXPECT_EQ(kolo_handle_cuda_event(h, nullptr), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("kolo_handle_cuda_event: event is null"), std::string::npos)
      << lastError();
  EXPECT_EQ(kolo_release(h), KOLO_OK);
  EXPECT_EQ(kolo_handle_cuda_event(h, &event), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_finalize(), KOLO_OK) << lastError();
}

}  // namespace
