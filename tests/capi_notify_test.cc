// kolo_handle_notify (include/kolo/runtime.h): the callback runs exactly
// once, on the runtime's thread when the operation ends later, at once on
// the caller's thread when it has ended; inside it kolo_wait returns the
// result (an error too) without blocking and kolo_handle_output reads the
// output; a second callback and a null one are refused by name. Two rank
// processes, the second one late so that the first one's operations are
// pending when their callbacks are set.
#include <gtest/gtest.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/process_ranks.h"
#include "support/rank_check.h"

namespace {

// What a callback saw, read by the rank body once the handle is done.
struct Seen {
  kolo_handle handle = 0;
  std::atomic<int> calls{0};
  std::atomic<int> waitResult{-1};
  std::atomic<bool> onCallerThread{false};
  std::thread::id caller;
  std::string error;
  std::vector<int32_t> output;
};

void record(void* arg) {
  auto* seen = static_cast<Seen*>(arg);
  seen->onCallerThread = std::this_thread::get_id() == seen->caller;
  const int rc = kolo_wait(seen->handle);  // done: returns at once
  seen->waitResult = rc;
  if (rc != KOLO_OK) {
    seen->error = kolo_last_error();
  } else {
    const void* data = nullptr;
    size_t bytes = 0;
    int ndim = 0;
    const int64_t* shape = nullptr;
    if (kolo_handle_output(seen->handle, &data, &bytes, &ndim, &shape) == KOLO_OK) {
      seen->output.resize(bytes / sizeof(int32_t));
      std::memcpy(seen->output.data(), data, bytes);
    }
  }
  seen->calls.fetch_add(1);  // last: the body waits for it
}

bool waitCalls(const Seen& seen) {
  for (int i = 0; i < 20000 && seen.calls.load() == 0; ++i) usleep(1000);
  return seen.calls.load() == 1;
}

void noop(void*) {}

int rankBody(int rank) {
  RANK_CHECK(kolo_init() == KOLO_OK, 1);
  if (rank == 1) usleep(300 * 1000);  // rank 0's operations stay pending meanwhile

  // 1. Set while pending (on rank 0): runs on the runtime's thread.
  std::vector<int32_t> mine(rank + 1, rank + 10);
  int64_t shape[1] = {rank + 1};
  Seen gathered;
  gathered.caller = std::this_thread::get_id();
  RANK_CHECK(kolo_allgather_async("gathered", mine.data(), 1, shape, KOLO_INT32, 0,
                                  &gathered.handle) == KOLO_OK,
             2);
  RANK_CHECK(kolo_handle_notify(gathered.handle, record, &gathered) == KOLO_OK, 3);
  // A second callback, and a null one, are refused by name.
  RANK_CHECK(
      kolo_handle_notify(gathered.handle, noop, nullptr) == KOLO_ERR_INVALID_ARGUMENT, 4);
  RANK_CHECK(
      std::strstr(kolo_last_error(), "'gathered' already has a completion callback"), 4);
  RANK_CHECK(
      kolo_handle_notify(gathered.handle, nullptr, nullptr) == KOLO_ERR_INVALID_ARGUMENT,
      5);
  RANK_CHECK(waitCalls(gathered), 6);
  RANK_CHECK(gathered.waitResult == KOLO_OK, 7);
  RANK_CHECK((gathered.output == std::vector<int32_t>{10, 11, 11}), 8);
  if (rank == 0) RANK_CHECK(!gathered.onCallerThread, 9);
  RANK_CHECK(kolo_release(gathered.handle) == KOLO_OK, 10);

  // 2. Set after the end: runs at once, on the caller's thread.
  Seen late;
  late.caller = std::this_thread::get_id();
  RANK_CHECK(kolo_barrier_async(0, &late.handle) == KOLO_OK, 11);
  RANK_CHECK(kolo_wait(late.handle) == KOLO_OK, 12);
  RANK_CHECK(kolo_handle_notify(late.handle, record, &late) == KOLO_OK, 13);
  RANK_CHECK(late.calls == 1 && late.onCallerThread, 14);
  RANK_CHECK(kolo_release(late.handle) == KOLO_OK, 15);

  // 3. A failed operation (the ranks disagree on the dtype) calls back too,
  // and kolo_wait inside the callback returns the error with its message.
  Seen failed;
  failed.caller = std::this_thread::get_id();
  float f = 1;
  int32_t i = 1;
  int64_t one[1] = {1};
  RANK_CHECK(kolo_allreduce_async("mixed", rank == 0 ? static_cast<void*>(&f) : &i,
                                  rank == 0 ? static_cast<void*>(&f) : &i, 1, one,
                                  rank == 0 ? KOLO_FLOAT32 : KOLO_INT32, KOLO_SUM, 1, 1,
                                  0, &failed.handle) == KOLO_OK,
             16);
  RANK_CHECK(kolo_handle_notify(failed.handle, record, &failed) == KOLO_OK, 17);
  RANK_CHECK(waitCalls(failed), 18);
  RANK_CHECK(failed.waitResult == KOLO_ERR_MISMATCH, 19);
  RANK_CHECK(failed.error.find("mixed") != std::string::npos, 20);
  RANK_CHECK(kolo_release(failed.handle) == KOLO_OK, 21);

  RANK_CHECK(
      kolo_handle_notify(failed.handle, noop, nullptr) == KOLO_ERR_INVALID_ARGUMENT,
      22);  // released: unknown
  RANK_CHECK(kolo_finalize() == KOLO_OK, 23);
  return 0;
}

TEST(CApiNotify, CallbackRunsOnceWhenTheOperationEnds) {
  const int n = 2;
  kolo::test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    for (const char* v :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
          "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE"}) {
      unsetenv(v);
    }
    setenv("KOLO_RANK", std::to_string(rank).c_str(), 1);
    setenv("KOLO_SIZE", std::to_string(n).c_str(), 1);
    setenv("KOLO_RENDEZVOUS", address.c_str(), 1);
    return rankBody(rank);
  });
  for (const auto& o : ranks.waitAll(std::chrono::milliseconds(60000))) {
    EXPECT_FALSE(o.hung) << o.output;
    EXPECT_EQ(o.exitCode, 0) << "rank " << o.rank << ":\n" << o.output;
  }
}

}  // namespace
