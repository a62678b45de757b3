// The C API, part 2 (include/kolo/runtime.h): every call before kolo_init,
// argument errors and handles on one rank, and on three rank processes
// (tests/support/process_ranks.h, environment as kolorun sets it) every
// kind of operation with its results, groups, a mismatch returned by
// kolo_wait, process sets (ids agreed, a non-member, destroy failing what is
// pending), join with uneven steps, the synchronous calls interleaved with
// the runtime's, the straggler report and the timeline file; and a process
// set's silent member named by its global rank.
#include <gtest/gtest.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/process_ranks.h"
#include "support/rank_check.h"

namespace {

std::string lastError() {
  return kolo_last_error();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void clearLauncherEnv() {
  for (const char* v :
       {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_RENDEZVOUS",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
        "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE", "KOLO_TIMELINE"}) {
    unsetenv(v);
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CApiRuntime, CallsBeforeInitFail) {
  ASSERT_EQ(kolo_initialized(), 0);
  float x = 1;
  int64_t shape[1] = {1};
  kolo_handle h = 0;
  int v = 0;
  EXPECT_EQ(
      kolo_allreduce_async("x", &x, &x, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1, 1, 0, &h),
      KOLO_ERR_NOT_INITIALIZED);
  EXPECT_TRUE(contains(lastError(), "before kolo_init")) << lastError();
  EXPECT_EQ(kolo_allgather_async("x", &x, 1, shape, KOLO_FLOAT32, 0, &h),
            KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_broadcast_async("x", &x, 1, shape, KOLO_FLOAT32, 0, 0, &h),
            KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_alltoall_async("x", &x, 1, shape, nullptr, 0, KOLO_FLOAT32, 0, &h),
            KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_reducescatter_async("x", &x, 1, shape, KOLO_FLOAT32, KOLO_SUM, 0, &h),
            KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_barrier_async(0, &h), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_join_async(0, &h), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_poll(1, &v), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_wait(1), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_release(1), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_wait_release(1), KOLO_ERR_NOT_INITIALIZED);
  int ranks[1] = {0};
  EXPECT_EQ(kolo_process_set_create(ranks, 1, &v), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_process_set_rank(0, &v), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_process_set_size(0, &v), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_process_set_destroy(1), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_start_timeline("/tmp/x.json"), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_stop_timeline(), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_timeline_begin("t", "P", nullptr, nullptr, 0), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_timeline_end("t"), KOLO_ERR_NOT_INITIALIZED);
  EXPECT_EQ(kolo_timeline_active(&v), KOLO_ERR_NOT_INITIALIZED);
  kolo_rank_lag lag;
  EXPECT_EQ(kolo_straggler_report(0, &lag, 1), KOLO_ERR_NOT_INITIALIZED);
}

TEST(CApiRuntime, SingleRankHandlesAndArgumentErrors) {
  clearLauncherEnv();
  ASSERT_EQ(kolo_init(), KOLO_OK) << lastError();
  const std::string timeline = ::testing::TempDir() + "capi_runtime_timeline.json";
  ASSERT_EQ(kolo_start_timeline(timeline.c_str()), KOLO_OK) << lastError();

  float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
  int64_t shape[2] = {2, 3};
  kolo_handle h = 0;
  ASSERT_EQ(kolo_allreduce_async("a", in, out, 2, shape, KOLO_FLOAT32, KOLO_SUM, 2.0, 0.5,
                                 0, &h),
            KOLO_OK)
      << lastError();
  EXPECT_GT(h, 0);
  EXPECT_EQ(kolo_wait(h), KOLO_OK) << lastError();
  int done = 0;
  EXPECT_EQ(kolo_poll(h, &done), KOLO_OK);
  EXPECT_EQ(done, 1);
  EXPECT_FLOAT_EQ(out[5], 6.0f);  // 6 * 2 * 0.5
  const void* data = nullptr;
  size_t bytes = 0;
  int ndim = 0;
  const int64_t* oshape = nullptr;
  EXPECT_EQ(kolo_handle_output(h, &data, &bytes, &ndim, &oshape),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "no output")) << lastError();
  EXPECT_EQ(kolo_release(h), KOLO_OK);
  EXPECT_EQ(kolo_release(h), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "unknown handle")) << lastError();
  EXPECT_EQ(kolo_wait(h), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_poll(0, &done), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_wait(123456789), KOLO_ERR_INVALID_ARGUMENT);

  // kolo_wait_release: the result, then the handle is gone.
  shape[0] = 1;
  ASSERT_EQ(kolo_allreduce_async("wr", in, out, 2, shape, KOLO_FLOAT32, KOLO_MAX, 1.0,
                                 1.0, 0, &h),
            KOLO_OK)
      << lastError();
  EXPECT_EQ(kolo_wait_release(h), KOLO_OK) << lastError();
  EXPECT_FLOAT_EQ(out[2], 3.0f);
  EXPECT_EQ(kolo_wait_release(h), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "kolo_wait_release: unknown handle")) << lastError();
  EXPECT_EQ(kolo_release(h), KOLO_ERR_INVALID_ARGUMENT);
  shape[0] = 2;

  // Argument errors are returned by the submitting call, naming the tensor.
  EXPECT_EQ(kolo_allreduce_async(nullptr, in, out, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                                 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_allreduce_async("b", in, out, 1, shape, static_cast<kolo_dtype>(9),
                                 KOLO_SUM, 1, 1, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "'b': unknown dtype value 9")) << lastError();
  EXPECT_EQ(kolo_allreduce_async("b", in, out, 1, shape, KOLO_FLOAT32,
                                 static_cast<kolo_op>(-1), 1, 1, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_allreduce_async("b", nullptr, out, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1,
                                 1, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "'b': null input buffer")) << lastError();
  EXPECT_EQ(
      kolo_allreduce_async("b", in, out, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1, 1, 7, &h),
      KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "process set 7")) << lastError();
  EXPECT_EQ(
      kolo_allreduce_async("b", in, out, -1, shape, KOLO_FLOAT32, KOLO_SUM, 1, 1, 0, &h),
      KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_broadcast_async("c", in, 1, shape, KOLO_FLOAT32, 1, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "root 1")) << lastError();
  int64_t bad[1] = {5};
  int64_t splits[2] = {2, 2};
  EXPECT_EQ(kolo_alltoall_async("d", in, 1, bad, splits, 2, KOLO_FLOAT32, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "2 splits for 1 ranks")) << lastError();
  EXPECT_EQ(kolo_reducescatter_async("e", in, 0, nullptr, KOLO_FLOAT32, KOLO_SUM, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "at least one dimension")) << lastError();
  kolo_rank_lag lags[2];
  EXPECT_EQ(kolo_straggler_report(0, lags, 2), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_straggler_report(0, lags, 1), KOLO_OK) << lastError();
  EXPECT_GE(lags[0].operations, 1);

  // A duplicate pending name: the second fails at once.
  kolo_handle h1 = 0, h2 = 0;
  int64_t one[1] = {1};
  EXPECT_EQ(kolo_process_set_create(nullptr, 0, &done), KOLO_ERR_INVALID_ARGUMENT);
  int members[1] = {0};
  int set = -1;
  ASSERT_EQ(kolo_process_set_create(members, 1, &set), KOLO_OK) << lastError();
  EXPECT_GT(set, 0);
  int v = -2;
  EXPECT_EQ(kolo_process_set_rank(set, &v), KOLO_OK);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(kolo_process_set_size(set, &v), KOLO_OK);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(kolo_process_set_rank(set + 5, &v), KOLO_OK);
  EXPECT_EQ(v, -1);
  EXPECT_EQ(
      kolo_allreduce_async("s", in, out, 1, one, KOLO_FLOAT32, KOLO_MAX, 1, 1, set, &h1),
      KOLO_OK);
  EXPECT_EQ(kolo_wait(h1), KOLO_OK) << lastError();
  EXPECT_EQ(kolo_release(h1), KOLO_OK);
  EXPECT_EQ(kolo_process_set_destroy(set), KOLO_OK) << lastError();
  EXPECT_EQ(kolo_process_set_destroy(set), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_process_set_destroy(0), KOLO_ERR_INVALID_ARGUMENT);
  int set2 = -1;
  ASSERT_EQ(kolo_process_set_create(members, 1, &set2), KOLO_OK) << lastError();
  EXPECT_GT(set2, set) << "ids are not reused";

  // Reducescatter and allgather outputs belong to kolo.
  int32_t rs[4] = {1, 2, 3, 4};
  int64_t rshape[2] = {2, 2};
  ASSERT_EQ(kolo_reducescatter_async("rs", rs, 2, rshape, KOLO_INT32, KOLO_SUM, 0, &h2),
            KOLO_OK)
      << lastError();
  EXPECT_EQ(kolo_handle_output(h2, &data, &bytes, &ndim, &oshape) == KOLO_OK ||
                contains(lastError(), "still pending"),
            true);
  ASSERT_EQ(kolo_wait(h2), KOLO_OK) << lastError();
  ASSERT_EQ(kolo_handle_output(h2, &data, &bytes, &ndim, &oshape), KOLO_OK)
      << lastError();
  ASSERT_EQ(bytes, 16u);
  ASSERT_EQ(ndim, 2);
  EXPECT_EQ(oshape[0], 2);
  EXPECT_EQ(static_cast<const int32_t*>(data)[3], 4);
  // Released while pending is allowed; a pending one at finalize fails.
  EXPECT_EQ(kolo_release(h2), KOLO_OK);

  // A caller's own spans: on the timeline's track, with string args.
  int active = 0;
  ASSERT_EQ(kolo_timeline_active(&active), KOLO_OK);
  EXPECT_EQ(active, 1);
  const char* keys[2] = {"micro_batch", "peer"};
  const char* values[2] = {"3", "1"};
  EXPECT_EQ(kolo_timeline_begin("pipeline stage 0", "FORWARD", keys, values, 2), KOLO_OK)
      << lastError();
  EXPECT_EQ(kolo_timeline_end("pipeline stage 0"), KOLO_OK) << lastError();
  EXPECT_EQ(kolo_timeline_begin("", "FORWARD", nullptr, nullptr, 0),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_timeline_begin("t", "P", nullptr, nullptr, 1),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "kolo_timeline_begin")) << lastError();
  EXPECT_EQ(kolo_timeline_end(nullptr), KOLO_ERR_INVALID_ARGUMENT);

  EXPECT_EQ(kolo_stop_timeline(), KOLO_OK);
  // Without a timeline the spans are nothing.
  ASSERT_EQ(kolo_timeline_active(&active), KOLO_OK);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(kolo_timeline_begin("after", "STOPPED", nullptr, nullptr, 0), KOLO_OK);
  EXPECT_EQ(kolo_timeline_end("after"), KOLO_OK);
  EXPECT_EQ(kolo_finalize(), KOLO_OK);
  EXPECT_EQ(kolo_poll(h, &done), KOLO_ERR_NOT_INITIALIZED);
  const std::string trace = readFile(timeline);
  EXPECT_TRUE(contains(trace, "\"a\"")) << trace;
  EXPECT_TRUE(contains(trace, "\"rs\"")) << trace;
  EXPECT_TRUE(contains(trace, "\"name\":\"pipeline stage 0\"")) << trace;
  EXPECT_TRUE(contains(trace, R"("name":"FORWARD","ph":"B")")) << trace;
  EXPECT_TRUE(contains(trace, R"("args":{"micro_batch":"3","peer":"1"})")) << trace;
  EXPECT_FALSE(contains(trace, "STOPPED")) << trace;
}

// Handles made on one thread and waited and released on others, while
// more are submitted; then a handle from before kolo_finalize is refused
// after kolo_init again, and never reaches a new operation.
TEST(CApiRuntime, HandlesAcrossThreadsAndAcrossInit) {
  clearLauncherEnv();
  ASSERT_EQ(kolo_init(), KOLO_OK) << lastError();
  constexpr int kOps = 200;
  std::vector<float> data(kOps, 0.0f);
  std::vector<kolo_handle> handles(kOps, 0);
  std::atomic<int> submitted{0};
  std::atomic<int> errors{0};
  std::thread submitter([&] {
    int64_t shape[1] = {1};
    for (int i = 0; i < kOps; ++i) {
      data[i] = static_cast<float>(i);
      const std::string name = "thread." + std::to_string(i);
      if (kolo_allreduce_async(name.c_str(), &data[i], &data[i], 1, shape, KOLO_FLOAT32,
                               KOLO_SUM, 2.0, 1.0, 0, &handles[i]) != KOLO_OK) {
        ++errors;
      }
      submitted.store(i + 1, std::memory_order_release);
    }
  });
  // Two waiters: the even handles with kolo_wait + kolo_release, the odd
  // ones with kolo_wait_release.
  auto waiter = [&](int parity) {
    for (int i = parity; i < kOps; i += 2) {
      while (submitted.load(std::memory_order_acquire) <= i) std::this_thread::yield();
      const int rc = parity == 0 ? kolo_wait(handles[i]) : kolo_wait_release(handles[i]);
      if (rc != KOLO_OK || (parity == 0 && kolo_release(handles[i]) != KOLO_OK)) ++errors;
      if (data[i] != 2.0f * static_cast<float>(i)) ++errors;
      if (kolo_wait(handles[i]) != KOLO_ERR_INVALID_ARGUMENT) ++errors;
    }
  };
  std::thread even(waiter, 0), odd(waiter, 1);
  submitter.join();
  even.join();
  odd.join();
  EXPECT_EQ(errors.load(), 0) << lastError();
  EXPECT_EQ(kolo_wait(handles[0]), KOLO_ERR_INVALID_ARGUMENT);
  // Its slot may have served a later handle since, so the table may no
  // longer know that this value was released rather than never made.
  EXPECT_TRUE(contains(lastError(),
                       "kolo_wait: unknown handle " + std::to_string(handles[0]) + " ("))
      << lastError();
  EXPECT_TRUE(contains(lastError(), "already released)")) << lastError();

  float x = 1;
  int64_t shape[1] = {1};
  kolo_handle old = 0, fresh = 0;
  ASSERT_EQ(kolo_allreduce_async("old", &x, &x, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1, 1, 0,
                                 &old),
            KOLO_OK)
      << lastError();
  ASSERT_EQ(kolo_wait(old), KOLO_OK) << lastError();
  ASSERT_EQ(kolo_finalize(), KOLO_OK);
  ASSERT_EQ(kolo_init(), KOLO_OK) << lastError();
  EXPECT_EQ(kolo_wait(old), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(lastError(), "unknown handle " + std::to_string(old)))
      << lastError();
  ASSERT_EQ(kolo_allreduce_async("fresh", &x, &x, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                                 0, &fresh),
            KOLO_OK)
      << lastError();
  EXPECT_NE(fresh, old);
  EXPECT_EQ(kolo_release(old), KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kolo_wait_release(fresh), KOLO_OK) << lastError();
  EXPECT_EQ(kolo_finalize(), KOLO_OK);
}

int rankBody(int rank, int n, const std::string& timeline) {
  RANK_CHECK(kolo_init() == KOLO_OK, 1);
  if (rank == 0) RANK_CHECK(kolo_start_timeline(timeline.c_str()) == KOLO_OK, 2);

  // Every kind, submitted in a different order on each rank.
  std::vector<double> ar(100, rank + 1.0), arOut(100);
  int64_t arShape[2] = {10, 10};
  std::vector<int32_t> ag(rank + 1, rank);  // rank r sends r+1 rows of r
  int64_t agShape[1] = {rank + 1};
  std::vector<float> bc(5, rank == 1 ? 7.0f : 0.0f);
  int64_t bcShape[1] = {5};
  // alltoall with splits: rank r sends j+1 rows to rank j, each worth 10r+j.
  std::vector<int64_t> a2a;
  std::vector<int64_t> splits(n);
  for (int j = 0; j < n; ++j) {
    splits[j] = j + 1;
    for (int k = 0; k <= j; ++k) a2a.push_back(10 * rank + j);
  }
  int64_t a2aShape[1] = {static_cast<int64_t>(a2a.size())};
  std::vector<uint8_t> rs(n * 2);
  for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<uint8_t>(i + rank);
  int64_t rsShape[2] = {n, 2};

  kolo_handle hAr = 0, hAg = 0, hBc = 0, hA2a = 0, hRs = 0, hBar = 0;
  auto submitAll = [&](int which) {
    switch (which) {
      case 0:
        return kolo_allreduce_async("ar", ar.data(), arOut.data(), 2, arShape,
                                    KOLO_FLOAT64, KOLO_AVG, 1.0, 1.0, 0, &hAr);
      case 1:
        return kolo_allgather_async("ag", ag.data(), 1, agShape, KOLO_INT32, 0, &hAg);
      case 2:
        return kolo_broadcast_async("bc", bc.data(), 1, bcShape, KOLO_FLOAT32, 1, 0,
                                    &hBc);
      case 3:
        return kolo_alltoall_async("a2a", a2a.data(), 1, a2aShape, splits.data(), n,
                                   KOLO_INT64, 0, &hA2a);
      case 4:
        return kolo_reducescatter_async("rs", rs.data(), 2, rsShape, KOLO_UINT8, KOLO_SUM,
                                        0, &hRs);
      default: return kolo_barrier_async(0, &hBar);
    }
  };
  for (int i = 0; i < 6; ++i) {
    RANK_CHECK(submitAll((i + rank * 2) % 6) == KOLO_OK, 3);
  }
  // The synchronous API runs meanwhile on the world communicator.
  int32_t sync = rank, syncOut = 0;
  RANK_CHECK(kolo_allreduce(&sync, &syncOut, 1, KOLO_INT32, KOLO_SUM) == KOLO_OK, 4);
  RANK_CHECK(syncOut == n * (n - 1) / 2, 4);

  for (kolo_handle h : {hAr, hAg, hBc, hA2a, hRs, hBar}) {
    RANK_CHECK(kolo_wait(h) == KOLO_OK, 5);
  }
  RANK_CHECK(arOut[99] == (n + 1) / 2.0, 6);
  RANK_CHECK(bc[4] == 7.0f, 7);
  const void* data;
  size_t bytes;
  int ndim;
  const int64_t* shape;
  RANK_CHECK(kolo_handle_output(hAg, &data, &bytes, &ndim, &shape) == KOLO_OK, 8);
  RANK_CHECK(ndim == 1 && shape[0] == n * (n + 1) / 2, 8);
  {
    const auto* p = static_cast<const int32_t*>(data);
    int i = 0;
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k <= r; ++k) RANK_CHECK(p[i++] == r, 8);
    }
  }
  RANK_CHECK(kolo_handle_output(hA2a, &data, &bytes, &ndim, &shape) == KOLO_OK, 9);
  RANK_CHECK(ndim == 1 && shape[0] == n * (rank + 1), 9);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k <= rank; ++k) {
      RANK_CHECK(static_cast<const int64_t*>(data)[r * (rank + 1) + k] == 10 * r + rank,
                 9);
    }
  }
  RANK_CHECK(kolo_handle_output(hRs, &data, &bytes, &ndim, &shape) == KOLO_OK, 10);
  RANK_CHECK(ndim == 2 && shape[0] == 1 && shape[1] == 2 && bytes == 2, 10);
  // Element (rank, c) summed over ranks: sum_r (2*rank + c + r).
  for (int c = 0; c < 2; ++c) {
    RANK_CHECK(
        static_cast<const uint8_t*>(data)[c] == n * (2 * rank + c) + n * (n - 1) / 2, 10);
  }
  for (kolo_handle h : {hAr, hAg, hBc, hA2a, hRs, hBar}) {
    RANK_CHECK(kolo_release(h) == KOLO_OK, 11);
  }

  // A group of two allreduces.
  std::vector<float> g1(3, 1.0f), g2(4, 2.0f);
  const char* names[2] = {"g1", "g2"};
  const void* sends[2] = {g1.data(), g2.data()};
  void* recvs[2] = {g1.data(), g2.data()};
  int ndims[2] = {1, 1};
  int64_t s1[1] = {3}, s2[1] = {4};
  const int64_t* shapes[2] = {s1, s2};
  kolo_handle gh[2];
  RANK_CHECK(
      kolo_grouped_allreduce_async(2, names, sends, recvs, ndims, shapes, KOLO_FLOAT32,
                                   KOLO_SUM, 1.0, 1.0, 0, gh) == KOLO_OK,
      12);
  RANK_CHECK(kolo_wait(gh[0]) == KOLO_OK && kolo_wait(gh[1]) == KOLO_OK, 12);
  RANK_CHECK(g1[2] == n && g2[3] == 2.0f * n, 12);

  // A mismatch: rank 2 has another shape; kolo_wait returns it everywhere.
  std::vector<float> m(8, 1.0f);
  int64_t mShape[1] = {rank == 2 ? 8 : 4};
  kolo_handle hm;
  RANK_CHECK(kolo_allreduce_async("fc1.weight", m.data(), m.data(), 1, mShape,
                                  KOLO_FLOAT32, KOLO_SUM, 1.0, 1.0, 0, &hm) == KOLO_OK,
             13);
  const int rc = kolo_wait(hm);
  std::printf("rank %d mismatch %d: %s\n", rank, rc, kolo_last_error());
  RANK_CHECK(rc == KOLO_ERR_MISMATCH, 13);
  RANK_CHECK(contains(kolo_last_error(), "'fc1.weight'"), 13);
  RANK_CHECK(contains(kolo_last_error(), "[8]") && contains(kolo_last_error(), "[4]"),
             13);
  RANK_CHECK(kolo_release(hm) == KOLO_OK, 13);

  // Process sets: {0, 2} (rank 1 is not a member), then {1, 2}.
  int a = -1, b = -1;
  if (rank != 1) {
    const int members[2] = {0, 2};
    RANK_CHECK(kolo_process_set_create(members, 2, &a) == KOLO_OK, 14);
    int sr = -1, ss = -1;
    RANK_CHECK(kolo_process_set_rank(a, &sr) == KOLO_OK && sr == rank / 2, 14);
    RANK_CHECK(kolo_process_set_size(a, &ss) == KOLO_OK && ss == 2, 14);
    std::vector<int32_t> x(4, rank + 1);
    int64_t xs[1] = {4};
    kolo_handle hx;
    RANK_CHECK(kolo_allreduce_async("x", x.data(), x.data(), 1, xs, KOLO_INT32, KOLO_SUM,
                                    1, 1, a, &hx) == KOLO_OK,
               14);
    RANK_CHECK(kolo_wait(hx) == KOLO_OK && x[0] == 1 + 3, 14);
    kolo_rank_lag lags[2];
    RANK_CHECK(kolo_straggler_report(a, lags, 2) == KOLO_OK && lags[0].operations >= 1,
               14);
  } else {
    int sr = 0;
    RANK_CHECK(kolo_process_set_rank(1, &sr) == KOLO_OK && sr == -1, 14);
  }
  if (rank != 0) {
    const int members[2] = {1, 2};
    RANK_CHECK(kolo_process_set_create(members, 2, &b) == KOLO_OK, 15);
    // Rank 2 already used id a; rank 1 had not: they agree on the larger.
    std::printf("rank %d: set {0,2} = %d, set {1,2} = %d\n", rank, a, b);
    RANK_CHECK(b > 0 && b != a, 15);
    std::vector<int32_t> x(2, rank);
    int64_t xs[1] = {2};
    kolo_handle hx;
    // The same name as in the other set: a separate operation.
    RANK_CHECK(kolo_allreduce_async("x", x.data(), x.data(), 1, xs, KOLO_INT32, KOLO_PROD,
                                    1, 1, b, &hx) == KOLO_OK,
               15);
    RANK_CHECK(kolo_wait(hx) == KOLO_OK && x[1] == 2, 15);
    // Only rank 2 submits this one: destroying the set fails it.
    kolo_handle pending = 0;
    if (rank == 2) {
      RANK_CHECK(kolo_allreduce_async("lonely", x.data(), x.data(), 1, xs, KOLO_INT32,
                                      KOLO_SUM, 1, 1, b, &pending) == KOLO_OK,
                 16);
    }
    RANK_CHECK(kolo_process_set_destroy(b) == KOLO_OK, 16);
    if (rank == 2) {
      const int prc = kolo_wait(pending);
      std::printf("rank 2 pending at destroy: %d %s\n", prc, kolo_last_error());
      RANK_CHECK(prc != KOLO_OK && contains(kolo_last_error(), "'lonely'"), 16);
    }
    int sr = 0;
    RANK_CHECK(kolo_process_set_rank(b, &sr) == KOLO_OK && sr == -1, 16);
  }

  // Join with uneven steps: rank r runs 2 + r steps, then joins.
  const int steps = 2 + rank;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> v(16, 1.0f);
    int64_t vs[1] = {16};
    kolo_handle hv;
    const std::string name = "step." + std::to_string(s);
    RANK_CHECK(kolo_allreduce_async(name.c_str(), v.data(), v.data(), 1, vs, KOLO_FLOAT32,
                                    KOLO_SUM, 1, 1, 0, &hv) == KOLO_OK,
               17);
    RANK_CHECK(kolo_wait(hv) == KOLO_OK, 17);
    // Ranks with fewer steps have joined: they contribute zeros.
    int live = 0;
    for (int r = 0; r < n; ++r) live += (2 + r > s) ? 1 : 0;
    RANK_CHECK(v[0] == static_cast<float>(live), 17);
    RANK_CHECK(kolo_release(hv) == KOLO_OK, 17);
  }
  kolo_handle hj;
  RANK_CHECK(kolo_join_async(0, &hj) == KOLO_OK, 18);
  RANK_CHECK(kolo_wait(hj) == KOLO_OK, 18);

  if (rank == 0) RANK_CHECK(kolo_stop_timeline() == KOLO_OK, 19);
  RANK_CHECK(kolo_barrier() == KOLO_OK, 20);
  RANK_CHECK(kolo_finalize() == KOLO_OK, 21);
  return 0;
}

TEST(CApiRuntime, EveryCallAcrossProcesses) {
  const int n = 3;
  const std::string timeline =
      ::testing::TempDir() + "capi_runtime_" + std::to_string(getpid()) + ".json";
  kolo::test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    clearLauncherEnv();
    setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
    setenv("KOLO_SIZE", std::to_string(n).c_str(), 1);
    setenv("KOLO_RENDEZVOUS", address.c_str(), 1);
    return rankBody(rank, n, timeline);
  });
  auto outcomes = ranks.waitAll(std::chrono::milliseconds(120000));
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.hung) << o.output;
    EXPECT_EQ(o.exitCode, 0) << "rank " << o.rank << ":\n" << o.output;
  }
  const std::string trace = readFile(timeline);
  EXPECT_TRUE(contains(trace, "\"fc1.weight\"")) << trace.substr(0, 2000);
  EXPECT_TRUE(contains(trace, "\"a2a\"")) << trace.substr(0, 2000);
  std::remove(timeline.c_str());
}

// A rank that calls kolo_finalize while the others wait in a collective
// (and lives on): they fail at once with the error naming it, "rank 1 left
// the job (finalized)", as when it exits without finalize, not after
// KOLO_TIMEOUT with "alive but not answering". The closing step of the
// world runs alongside the runtimes' own, which wait for the others'
// finalize.
TEST(CApiRuntime, EarlyFinalizeFailsTheOthersAtOnce) {
  const int n = 3;
  kolo::test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    clearLauncherEnv();
    setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
    setenv("KOLO_SIZE", std::to_string(n).c_str(), 1);
    setenv("KOLO_RENDEZVOUS", address.c_str(), 1);
    setenv("KOLO_TIMEOUT", "60", 1);  // beyond the test's wait below
    if (kolo_init() != KOLO_OK) {
      std::printf("rank %d: kolo_init: %s\n", rank, kolo_last_error());
      return 1;
    }
    float x[4] = {1, 1, 1, 1};
    if (kolo_allreduce(x, x, 4, KOLO_FLOAT32, KOLO_SUM) != KOLO_OK) return 1;
    if (rank == 1) {
      std::printf("rank 1: kolo_finalize returned %d\n", kolo_finalize());
      kolo::test::sayRank(rank, "done");
      pause();  // lives on without kolo; the test ends it
      return 0;
    }
    const int rc = kolo_allreduce(x, x, 4, KOLO_FLOAT32, KOLO_SUM);
    std::printf("rank %d: kolo_allreduce returned %d: %s\n", rank, rc,
                rc == KOLO_OK ? "" : kolo_last_error());
    kolo_finalize();
    kolo::test::sayRank(rank, "done");
    return rc == KOLO_ERR_PEER_LOST ? 0 : 1;
  });
  const bool done = ranks.waitForOutput("done", std::chrono::milliseconds(30000));
  ranks.signal(1, SIGKILL);
  auto outcomes = ranks.waitAll(std::chrono::milliseconds(10000));
  EXPECT_TRUE(done) << "the ranks were still waiting after 30 s";
  for (int r : {0, 2}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << o.output;
    EXPECT_EQ(o.exitCode, 0) << "rank " << r << ":\n" << o.output;
    EXPECT_TRUE(contains(o.output, "rank 1 left the job (finalized)")) << o.output;
  }
  EXPECT_TRUE(contains(outcomes[1].output, "kolo_finalize returned 0"))
      << outcomes[1].output;
}

// A member of a process set that goes silent (SIGSTOP) inside the set: the
// member waiting on it fails after KOLO_TIMEOUT with an error that names
// both ranks by their global rank, with their index in the set ("rank 2
// (rank 1 of process set 1)"), not by the index alone.
TEST(CApiRuntime, ProcessSetErrorsNameGlobalRanks) {
  const int n = 3;
  kolo::test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    clearLauncherEnv();
    setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
    setenv("KOLO_SIZE", std::to_string(n).c_str(), 1);
    setenv("KOLO_RENDEZVOUS", address.c_str(), 1);
    setenv("KOLO_TIMEOUT", "2", 1);
    if (kolo_init() != KOLO_OK) {
      std::printf("rank %d: kolo_init: %s\n", rank, kolo_last_error());
      return 1;
    }
    int id = -1;
    const int members[2] = {1, 2};  // set ranks 0 and 1
    if (rank > 0 && kolo_process_set_create(members, 2, &id) != KOLO_OK) {
      std::printf("rank %d: kolo_process_set_create: %s\n", rank, kolo_last_error());
      return 1;
    }
    kolo::test::sayRank(rank, "ready");  // the test stops rank 2 now
    if (rank != 1) {
      pause();  // the test ends it
      return 0;
    }
    float x[4] = {1, 1, 1, 1};
    const int64_t shape[1] = {4};
    kolo_handle h = 0;
    int rc = kolo_allreduce_async("x", x, x, 1, shape, KOLO_FLOAT32, KOLO_SUM, 1.0, 1.0,
                                  id, &h);
    if (rc == KOLO_OK) rc = kolo_wait(h);
    std::printf("rank 1: set %d allreduce returned %d: %s\n", id, rc,
                rc == KOLO_OK ? "" : kolo_last_error());
    std::fflush(stdout);
    _exit(rc == KOLO_ERR_TIMEOUT ? 0 : 1);  // no goodbye: the set's peer is stopped
  });
  const bool ready = ranks.waitForOutput("ready", std::chrono::milliseconds(30000));
  ranks.signal(2, SIGSTOP);
  // Returns once rank 1 ended (it never says "finished"); then the others
  // are killed.
  ranks.waitForOutput("finished", std::chrono::milliseconds(30000));
  ranks.signal(2, SIGKILL);
  ranks.signal(0, SIGKILL);
  const auto outcomes = ranks.waitAll(std::chrono::milliseconds(10000));
  EXPECT_TRUE(ready);
  const auto& o = outcomes[1];
  EXPECT_EQ(o.exitCode, 0) << o.output;
  EXPECT_TRUE(contains(o.output, "rank 1 (rank 0 of process set 1) timed out"))
      << o.output;
  EXPECT_TRUE(contains(o.output, "waiting for rank 2 (rank 1 of process set 1)"))
      << o.output;
}

}  // namespace
