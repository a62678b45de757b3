// The C API (include/kolo/kolo.h): return codes and kolo_last_error() for
// every misuse, and collectives across processes initialised from the
// environment exactly as kolorun sets it.
#include <gtest/gtest.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "support/process_ranks.h"

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

TEST(CApi, CallsBeforeInitFail) {
  float x = 1;
  EXPECT_EQ(kolo_initialized(), 0);
  EXPECT_EQ(kolo_allreduce(&x, &x, 1, KOLO_FLOAT32, KOLO_SUM), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_NE(lastError().find("before kolo_init"), std::string::npos) << lastError();
  EXPECT_EQ(kolo_broadcast(&x, 1, KOLO_FLOAT32, 0), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_barrier(), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_rank(), -1);
  EXPECT_EQ(kolo_finalize(), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_STREQ(kolo_error_name(KOLO_ERR_NOT_INITIALIZED), "KOLO_ERR_NOT_INITIALIZED");
}

TEST(CApi, LastErrorSurvivesLayoutQueriesBeforeInit) {
  float x = 1;
  ASSERT_EQ(kolo_broadcast(&x, 1, KOLO_FLOAT32, 0), KOLO_ERR_NOT_INITIALIZED);
  const char* message = kolo_last_error();
  const std::string copy = message;
  ASSERT_NE(copy.find("kolo_broadcast called before kolo_init"), std::string::npos)
      << copy;
  // Each query fails (-1); none may free or change the string read above
  // (under ASan a freed one is a use-after-free here).
  EXPECT_EQ(kolo_rank(), -1);
  EXPECT_EQ(kolo_size(), -1);
  EXPECT_EQ(kolo_local_rank(), -1);
  EXPECT_EQ(kolo_local_size(), -1);
  EXPECT_EQ(kolo_last_error(), message);
  EXPECT_EQ(std::string(message), copy);
}

TEST(CApi, SingleRankInitTwiceAndBadArguments) {
  clearLauncherEnv();
  ASSERT_EQ(kolo_init(), KOLO_OK) << lastError();
  EXPECT_EQ(kolo_init(), KOLO_ERR_ALREADY_INITIALIZED);
  EXPECT_NE(lastError().find("twice"), std::string::npos) << lastError();
  EXPECT_EQ(kolo_rank(), 0);
  EXPECT_EQ(kolo_size(), 1);

  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  EXPECT_EQ(kolo_allreduce(in, out, 4, KOLO_FLOAT32, KOLO_AVG), KOLO_OK) << lastError();
  EXPECT_EQ(out[3], 4.0f);

  EXPECT_EQ(kolo_allreduce(nullptr, out, 4, KOLO_FLOAT32, KOLO_SUM),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("send buffer is null but count is 4"), std::string::npos)
      << lastError();
  EXPECT_EQ(kolo_allreduce(nullptr, nullptr, 0, KOLO_FLOAT32, KOLO_SUM), KOLO_OK)
      << "count 0 needs no buffer: " << lastError();
  EXPECT_EQ(kolo_allreduce(in, out, 4, static_cast<kolo_dtype>(42), KOLO_SUM),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("dtype value 42"), std::string::npos) << lastError();
  EXPECT_EQ(kolo_allreduce(in, out, 4, KOLO_FLOAT32, static_cast<kolo_op>(-3)),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("op value -3"), std::string::npos) << lastError();
  EXPECT_EQ(kolo_allreduce(in, out, SIZE_MAX, KOLO_FLOAT64, KOLO_SUM),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("overflows"), std::string::npos) << lastError();
  EXPECT_EQ(kolo_broadcast(in, 4, KOLO_FLOAT32, 3), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("root 3"), std::string::npos) << lastError();
  EXPECT_EQ(kolo_allgatherv(in, out, nullptr, KOLO_FLOAT32), KOLO_ERR_INVALID_ARGUMENT);

  EXPECT_EQ(kolo_finalize(), KOLO_OK);
  EXPECT_EQ(kolo_initialized(), 0);
  EXPECT_EQ(kolo_barrier(), KOLO_ERR_NOT_INITIALIZED);
}

TEST(CApi, BadLauncherEnvironmentIsAClearError) {
  clearLauncherEnv();
  setenv("KOLO_RANK", "5", 1);
  setenv("KOLO_SIZE", "2", 1);
  EXPECT_NE(kolo_init(), KOLO_OK);
  EXPECT_NE(lastError().find("KOLO_RANK"), std::string::npos) << lastError();
  clearLauncherEnv();
  setenv("KOLO_TIMEOUT", "soon", 1);
  EXPECT_EQ(kolo_init(), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(lastError().find("KOLO_TIMEOUT='soon'"), std::string::npos) << lastError();
  unsetenv("KOLO_TIMEOUT");
}

// Three processes, environment as kolorun sets it.
TEST(CApi, CollectivesAcrossProcesses) {
  const int n = 3;
  kolo::test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    clearLauncherEnv();
    setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
    setenv("KOLO_SIZE", std::to_string(n).c_str(), 1);
    setenv("KOLO_RENDEZVOUS", address.c_str(), 1);
    if (kolo_init() != KOLO_OK) {
      std::printf("init failed: %s\n", kolo_last_error());
      return 1;
    }
    std::vector<double> v(1000, rank + 1.0), out(1000);
    if (kolo_allreduce(v.data(), out.data(), v.size(), KOLO_FLOAT64, KOLO_SUM) !=
            KOLO_OK ||
        out[999] != 6.0) {
      std::printf("allreduce: %s got %f\n", kolo_last_error(), out[999]);
      return 2;
    }
    int32_t mine[2] = {rank, rank}, all[6];
    if (kolo_allgather(mine, all, 2, KOLO_INT32) != KOLO_OK || all[4] != 2) return 3;
    int32_t rs[3] = {1, 2, 3}, got = 0;
    if (kolo_reduce_scatter(rs, &got, 1, KOLO_INT32, KOLO_SUM) != KOLO_OK ||
        got != 3 * (rank + 1)) {
      return 4;
    }
    int32_t a2a[3] = {rank * 10, rank * 10 + 1, rank * 10 + 2}, back[3];
    if (kolo_alltoall(a2a, back, 1, KOLO_INT32) != KOLO_OK || back[2] != 20 + rank)
      return 5;
    uint8_t b[3] = {0, 0, 0};
    if (rank == 2) b[0] = b[1] = b[2] = 7;
    if (kolo_broadcast(b, 3, KOLO_UINT8, 2) != KOLO_OK || b[1] != 7) return 6;
    // A mismatch is an error on every rank, naming both values.
    float f[8] = {0};
    int rc = kolo_allreduce(f, f, rank == 2 ? 8 : 4, KOLO_FLOAT32, KOLO_SUM);
    if (rc != KOLO_ERR_MISMATCH) {
      std::printf("mismatch gave %d: %s\n", rc, kolo_last_error());
      return 7;
    }
    std::printf("mismatch: %s\n", kolo_last_error());
    // Point to point: a ring (kolo_isend before the blocking kolo_recv), a
    // process set of ranks 1 and 2 (set ranks), a dtype mismatch.
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    int64_t out1[3] = {rank, rank, rank}, in1[3] = {-1, -1, -1};
    kolo_handle hs = 0;
    if (kolo_isend(out1, 3, KOLO_INT64, right, 5, 0, &hs) != KOLO_OK ||
        kolo_recv(in1, 3, KOLO_INT64, left, 5) != KOLO_OK || kolo_wait_release(hs) ||
        in1[2] != left) {
      std::printf("ring: %s\n", kolo_last_error());
      return 10;
    }
    if (kolo_isend(out1, 3, KOLO_INT64, rank, 5, 0, &hs) != KOLO_ERR_INVALID_ARGUMENT)
      return 11;
    if (rank > 0) {
      const int members[2] = {1, 2};
      int set = -1, done = 0;
      if (kolo_process_set_create(members, 2, &set) != KOLO_OK) return 12;
      kolo_handle h = 0;
      if (rank == 1) {
        if (kolo_send(out1, 3, KOLO_INT64, 2, 6) != KOLO_OK) return 13;  // world
        if (kolo_isend(out1, 2, KOLO_INT64, 1, 6, set, &h) != KOLO_OK) return 13;
      } else {
        int64_t w[2] = {0, 0};
        if (kolo_irecv(w, 2, KOLO_INT64, 0, 6, set, &h) != KOLO_OK) return 14;
        if (kolo_recv(in1, 3, KOLO_INT64, 1, 6) != KOLO_OK) return 15;
        while (!done && kolo_poll(h, &done) == KOLO_OK) {
        }
        if (!done || w[1] != 1) return 16;
        double d[3];
        if (kolo_recv(d, 3, KOLO_FLOAT64, 1, 7) != KOLO_ERR_MISMATCH) return 17;
        std::printf("p2p mismatch: %s\n", kolo_last_error());
      }
      if (rank == 1 && kolo_send(out1, 3, KOLO_INT64, 2, 7) != KOLO_OK) return 18;
      if (kolo_wait_release(h) != KOLO_OK) return 19;
      if (kolo_process_set_destroy(set) != KOLO_OK) return 20;
    }
    if (kolo_barrier() != KOLO_OK) return 8;
    if (kolo_finalize() != KOLO_OK) return 9;
    return 0;
  });
  auto outcomes = ranks.waitAll(std::chrono::milliseconds(60000));
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.hung) << o.output;
    EXPECT_EQ(o.exitCode, 0) << "rank " << o.rank << ":\n" << o.output;
    EXPECT_NE(o.output.find("rank 2 called allreduce(count=8"), std::string::npos)
        << o.output;
    if (o.rank == 2) {
      EXPECT_NE(o.output.find("p2p mismatch: point-to-point: rank 2 posted a receive of "
                              "3 float64 from rank 1 (tag 7), but rank 1 sent 3 int64"),
                std::string::npos)
          << o.output;
    }
  }
}

}  // namespace
