// The GPU calls of the C API (include/kolo/cuda.h) and their C++ form
// (kolo/cuda_communicator.h): the build queries answer truthfully without
// kolo_init, and every `_cuda` collective is a clear error today (no
// collective moves device memory yet) naming the operation and what is
// missing, without touching the buffers or breaking the communicator.
#include <gtest/gtest.h>
#include <kolo/cuda.h>
#include <kolo/cuda_communicator.h>
#include <kolo/kolo.h>
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
  return "is not implemented yet";
}

TEST(CApiCuda, BuildQueriesNeedNoInit) {
  EXPECT_EQ(kolo_initialized(), 0);
  EXPECT_EQ(kolo_cuda_built(), KOLO_TEST_EXPECT_CUDA);
  EXPECT_EQ(kolo_nccl_built(), 0) << "no collective runs through NCCL yet";
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
  EXPECT_EQ(support.ncclVersion, 0);
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

TEST(CApiCuda, EveryCudaCollectiveIsAClearErrorToday) {
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
  const std::string cause = expectedCause();
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

  // The communicator still works on host memory.
  ASSERT_EQ(kolo_allreduce(send.data(), recv.data(), 4, KOLO_FLOAT32, KOLO_SUM), KOLO_OK)
      << lastError();
  EXPECT_EQ(recv, send);
  EXPECT_EQ(kolo_finalize(), KOLO_OK) << lastError();
}

}  // namespace
