// The NCCL communicator's logic (collectives/cuda/nccl_communicator_impl.h)
// without a GPU: a stand-in NCCL (tests/support/fake_nccl.cc, opened by
// path as NcclLibrary opens NCCL) logs the calls each collective makes, and
// stand-in device operations (NcclDeviceOps) log the copies, divides and
// completion events. Checked: which NCCL calls run each collective with
// which pointers, counts, types, ops and roots (equal and uneven counts,
// the average's divide, alltoall's own block); the completion watch: a
// collective that never completes times out by name, an asynchronous NCCL
// error, a failed enqueue (in a group too: the group is still closed), a
// CUDA error, each aborting the communicator and breaking the object (the
// same error again, no further NCCL call); ncclInProgress waited out;
// argument errors that leave the object usable; the end (finalize and
// destroy, or nothing more after an abort).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/cuda/nccl_communicator_impl.h"
#include "collectives/cuda/nccl_types.h"
#include "support/expect_error.h"

namespace kolo {
namespace {

namespace cuda = collectives::cuda;
namespace nccl = collectives::cuda::nccl;
using std::chrono::milliseconds;
using test::contains;

struct Fake {
  Fake() : lib(cuda::NcclLibrary::open(KOLO_TEST_FAKE_NCCL)) {
    void* h = ::dlopen(KOLO_TEST_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD);
    script = reinterpret_cast<void (*)(int, int)>(::dlsym(h, "fakeNcclScript"));
    enqueue = reinterpret_cast<void (*)(int, int)>(::dlsym(h, "fakeNcclEnqueue"));
    note = reinterpret_cast<void (*)(const char*)>(::dlsym(h, "fakeNcclNote"));
    takeLog = reinterpret_cast<const char* (*)()>(::dlsym(h, "fakeNcclTakeLog"));
    count = reinterpret_cast<int (*)(const char*)>(::dlsym(h, "fakeNcclCount"));
    script(0, nccl::kSuccess);
    enqueue(nccl::kSuccess, nccl::kSuccess);
    takeLog();
  }
  std::unique_ptr<cuda::NcclLibrary> lib;
  void (*script)(int, int) = nullptr;
  void (*enqueue)(int, int) = nullptr;
  void (*note)(const char*) = nullptr;
  const char* (*takeLog)() = nullptr;
  int (*count)(const char*) = nullptr;
};

Fake& fake() {
  static Fake f;
  return f;
}

std::string p(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

// Device operations that log instead of calling CUDA; the event completes
// after `pendingPolls` polls (< 0: never), or fails with `failure`.
class FakeOps : public cuda::NcclDeviceOps {
 public:
  int pendingPolls = 0;
  std::string failure;

  int enter(const std::string&) override { return 7; }
  void leave(int previous) noexcept override { EXPECT_EQ(previous, 7); }
  std::string record(void* stream) override {
    fake().note(("record " + p(stream)).c_str());
    polls_ = 0;
    return "";
  }
  Poll poll(std::string* error) override {
    if (!failure.empty()) {
      *error = failure;
      return Poll::kFailed;
    }
    if (pendingPolls < 0 || polls_++ < pendingPolls) return Poll::kPending;
    return Poll::kDone;
  }
  std::string copy(void* dst, const void* src, size_t bytes, void* stream) override {
    fake().note(
        ("copy " + p(dst) + " " + p(src) + " " + std::to_string(bytes) + " " + p(stream))
            .c_str());
    return "";
  }
  void divide(void* buffer, size_t count, DataType, double divisor, void*) override {
    fake().note(("divide " + p(buffer) + " " + std::to_string(count) + " " +
                 std::to_string(static_cast<int>(divisor)))
                    .c_str());
  }

 private:
  int polls_ = 0;
};

// Rank 1 of 3 (global rank 6) on device 0, with a fake communicator.
struct Case {
  explicit Case(int timeoutMs = 5000) {
    Fake& f = fake();
    f.script(0, nccl::kSuccess);
    f.enqueue(nccl::kSuccess, nccl::kSuccess);
    f.takeLog();
    cuda::NcclOptions o;
    o.rank = 1;
    o.size = 3;
    o.globalRanks = {5, 6, 7};
    o.timeout = milliseconds(timeoutMs);
    o.key = "k";
    auto owned = std::make_unique<FakeOps>();
    ops = owned.get();
    cuda::NcclLibrary::Comm comm = nullptr;
    cuda::NcclLibrary::UniqueId id{};
    cuda::NcclLibrary::Config config;
    EXPECT_EQ(f.lib->commInitRankConfig(&comm, 3, id, 1, &config), nccl::kSuccess);
    c = std::make_unique<cuda::NcclCommunicator>(*f.lib, o, comm, std::move(owned));
  }
  std::string log() { return fake().takeLog(); }

  FakeOps* ops = nullptr;
  std::unique_ptr<cuda::NcclCommunicator> c;
  void* stream = reinterpret_cast<void*>(0x5000);
  float send[64] = {};
  float recv[64] = {};
};

// ---- which NCCL calls run each collective ------------------------------------------

TEST(NcclCommunicator, AllreduceIsOneCallAndAverageDividesTheSum) {
  Case k;
  k.c->allreduce(k.send, k.recv, 10, DataType::kFloat32, ReduceOp::kMax, k.stream);
  EXPECT_EQ(k.log(), "allReduce s=" + p(k.send) + " r=" + p(k.recv) +
                         " n=10 t=7 op=2\nrecord " + p(k.stream) + "\n");
  k.c->allreduce(k.recv, k.recv, 10, DataType::kBFloat16, ReduceOp::kAverage, k.stream);
  EXPECT_EQ(k.log(), "allReduce s=" + p(k.recv) + " r=" + p(k.recv) +
                         " n=10 t=9 op=0\ndivide " + p(k.recv) + " 10 3\nrecord " +
                         p(k.stream) + "\n");
  k.c->allreduce(k.send, k.recv, 0, DataType::kFloat32, ReduceOp::kSum, k.stream);
  EXPECT_EQ(k.log(), "") << "zero elements: nothing to do";
}

TEST(NcclCommunicator, BroadcastIsInPlace) {
  Case k;
  k.c->broadcast(k.recv, 7, DataType::kInt64, 2, k.stream);
  EXPECT_EQ(k.log(), "broadcast s=" + p(k.recv) + " r=" + p(k.recv) +
                         " n=7 t=4 root=2\nrecord " + p(k.stream) + "\n");
}

TEST(NcclCommunicator, AllgatherOfUnevenCountsIsABroadcastPerBlock) {
  Case k;
  k.c->allgather(k.send, k.recv, {4, 4, 4}, DataType::kFloat32, k.stream);
  EXPECT_EQ(k.log(), "allGather s=" + p(k.send) + " r=" + p(k.recv) +
                         " n=4 t=7\nrecord " + p(k.stream) + "\n");
  // Rank 1's block goes from its send; rank 2's block is empty.
  k.c->allgather(k.send, k.recv, {2, 3, 0}, DataType::kFloat32, k.stream);
  EXPECT_EQ(k.log(), "groupStart\nbroadcast s=" + p(nullptr) + " r=" + p(k.recv) +
                         " n=2 t=7 root=0\nbroadcast s=" + p(k.send) +
                         " r=" + p(k.recv + 2) + " n=3 t=7 root=1\ngroupEnd\nrecord " +
                         p(k.stream) + "\n");
}

TEST(NcclCommunicator, ReduceScatterOfUnevenCountsIsAReducePerBlock) {
  Case k;
  k.c->reduceScatter(k.send, k.recv, {5, 5, 5}, DataType::kInt32, ReduceOp::kProduct,
                     k.stream);
  EXPECT_EQ(k.log(), "reduceScatter s=" + p(k.send) + " r=" + p(k.recv) +
                         " n=5 t=2 op=1\nrecord " + p(k.stream) + "\n");
  k.c->reduceScatter(k.send, k.recv, {2, 3, 4}, DataType::kFloat32, ReduceOp::kAverage,
                     k.stream);
  EXPECT_EQ(k.log(), "groupStart\nreduce s=" + p(k.send) + " r=" + p(nullptr) +
                         " n=2 t=7 op=0 root=0\nreduce s=" + p(k.send + 2) + " r=" +
                         p(k.recv) + " n=3 t=7 op=0 root=1\nreduce s=" + p(k.send + 5) +
                         " r=" + p(nullptr) + " n=4 t=7 op=0 root=2\ngroupEnd\ndivide " +
                         p(k.recv) + " 3 3\nrecord " + p(k.stream) + "\n");
}

TEST(NcclCommunicator, AlltoallCopiesItsOwnBlockAndSendsAndReceivesTheRest) {
  Case k;
  // float64: 8 bytes an element; send blocks 1,2,3 and receive blocks 4,2,6.
  auto* send = reinterpret_cast<double*>(k.send);
  auto* recv = reinterpret_cast<double*>(k.recv);
  k.c->alltoall(send, {1, 2, 3}, recv, {4, 2, 6}, DataType::kFloat64, k.stream);
  EXPECT_EQ(k.log(), "copy " + p(recv + 4) + " " + p(send + 1) + " 16 " + p(k.stream) +
                         "\ngroupStart\nsend b=" + p(send) + " n=1 t=8 peer=0\nrecv b=" +
                         p(recv) + " n=4 t=8 peer=0\nsend b=" + p(send + 3) +
                         " n=3 t=8 peer=2\nrecv b=" + p(recv + 6) +
                         " n=6 t=8 peer=2\ngroupEnd\nrecord " + p(k.stream) + "\n");
  // Empty blocks are neither sent nor received.
  auto* bytesIn = reinterpret_cast<uint8_t*>(k.send);
  auto* bytesOut = reinterpret_cast<uint8_t*>(k.recv);
  k.c->alltoall(bytesIn, {0, 1, 0}, bytesOut, {2, 1, 0}, DataType::kUInt8, k.stream);
  EXPECT_EQ(k.log(), "copy " + p(bytesOut + 2) + " " + p(bytesIn) + " 1 " + p(k.stream) +
                         "\ngroupStart\nrecv b=" + p(bytesOut) +
                         " n=2 t=1 peer=0\ngroupEnd\nrecord " + p(k.stream) + "\n");
}

// ---- the watch, the errors, the broken state ------------------------------------------

TEST(NcclCommunicator, ACollectiveThatNeverCompletesTimesOutByNameAndBreaks) {
  Case k(200);
  k.ops->pendingPolls = -1;
  const int aborts = fake().count("abort");
  const auto start = std::chrono::steady_clock::now();
  const Error first = test::expectError([&] {
    k.c->allreduce(k.send, k.recv, 10, DataType::kFloat32, ReduceOp::kSum, k.stream);
  });
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
  EXPECT_EQ(first.code(), ErrorCode::kTimeout);
  EXPECT_EQ(
      std::string(first.what()),
      "rank 6: NCCL allreduce of 10 float32 (sum) on CUDA device 0 not done after 0.2 s "
      "(KOLO_TIMEOUT): a peer did not call it, or is stuck or gone; the NCCL "
      "communicator was aborted");
  EXPECT_EQ(fake().count("abort"), aborts + 1);
  k.log();
  k.ops->pendingPolls = 0;
  const Error again = test::expectError(
      [&] { k.c->broadcast(k.recv, 3, DataType::kFloat32, 0, k.stream); });
  EXPECT_EQ(std::string(again.what()), first.what());
  EXPECT_EQ(again.code(), ErrorCode::kTimeout);
  EXPECT_EQ(k.log(), "") << "a broken communicator calls NCCL no more";
  const int destroys = fake().count("destroy");
  k.c.reset();
  EXPECT_EQ(fake().count("abort"), aborts + 1) << "aborted once";
  EXPECT_EQ(fake().count("destroy"), destroys);
}

TEST(NcclCommunicator, AnAsynchronousNcclErrorAbortsAndIsNamed) {
  Case k;
  k.ops->pendingPolls = -1;
  fake().script(3, nccl::kRemoteError);
  const Error e = test::expectError([&] {
    k.c->allgather(k.send, k.recv, {1, 2, 3}, DataType::kFloat16, k.stream);
  });
  EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
  EXPECT_EQ(std::string(e.what()),
            "rank 6: NCCL allgather of 6 float16 on CUDA device 0 failed: NCCL reported: "
            "remote process exited or there was a network error (fake) (the fake's last "
            "error); the NCCL communicator was aborted");
  EXPECT_TRUE(contains(k.log(), "groupEnd\nrecord " + p(k.stream) + "\nabort\n"));
}

TEST(NcclCommunicator, InProgressIsWaitedOutAndAFailedEnqueueBreaks) {
  Case k;
  fake().enqueue(nccl::kInProgress, nccl::kSuccess);
  fake().script(3, nccl::kSuccess);
  k.c->allreduce(k.send, k.recv, 4, DataType::kInt64, ReduceOp::kMin, k.stream);
  EXPECT_EQ(k.log(), "allReduce s=" + p(k.send) + " r=" + p(k.recv) +
                         " n=4 t=4 op=3\nrecord " + p(k.stream) + "\n");
  // A call of a group fails: the group is closed all the same, then it breaks.
  fake().enqueue(nccl::kInvalidArgument, nccl::kSuccess);
  const Error e = test::expectError([&] {
    k.c->alltoall(k.send, {1, 1, 1}, k.recv, {1, 1, 1}, DataType::kFloat32, k.stream);
  });
  EXPECT_EQ(e.code(), ErrorCode::kInternal);
  EXPECT_TRUE(contains(e.what(),
                       "rank 6: NCCL alltoall of 3 float32 on CUDA device 0 "
                       "failed: NCCL reported: invalid argument (fake)"))
      << e.what();
  const std::string log = k.log();
  EXPECT_TRUE(contains(log, "groupEnd\nabort\n")) << log;
  EXPECT_FALSE(contains(log, "record")) << log;
}

TEST(NcclCommunicator, ACudaErrorWhileWaitingAbortsAndIsNamed) {
  Case k;
  k.ops->failure =
      "cudaEventQuery failed: cudaErrorIllegalAddress: an illegal memory access";
  const Error e = test::expectError(
      [&] { k.c->broadcast(k.recv, 10, DataType::kInt32, 1, k.stream); });
  EXPECT_EQ(e.code(), ErrorCode::kInternal);
  EXPECT_EQ(
      std::string(e.what()),
      "rank 6: NCCL broadcast of 10 int32 from root 1 on CUDA device 0 failed: "
      "cudaEventQuery failed: cudaErrorIllegalAddress: an illegal memory access; the "
      "NCCL communicator was aborted");
}

TEST(NcclCommunicator, BadArgumentsAreRefusedBeforeAnythingIsEnqueued) {
  Case k;
  Error e = test::expectError(
      [&] { k.c->broadcast(k.recv, 7, DataType::kFloat32, 3, k.stream); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      std::string(e.what()),
      "rank 6: NCCL broadcast of 7 float32 from root 3: root is not a rank of the 3 "
      "ranks");
  e = test::expectError([&] {
    k.c->allgather(k.send, k.recv, {1, 2}, DataType::kFloat32, k.stream);
  });
  EXPECT_TRUE(contains(e.what(), "2 counts for 3 ranks")) << e.what();
  e = test::expectError([&] {
    k.c->reduceScatter(k.send, k.recv, {1}, DataType::kFloat32, ReduceOp::kSum, k.stream);
  });
  EXPECT_TRUE(contains(e.what(), "1 counts for 3 ranks")) << e.what();
  e = test::expectError([&] {
    k.c->alltoall(k.send, {1, 2, 3}, k.recv, {1, 1, 1}, DataType::kFloat32, k.stream);
  });
  EXPECT_TRUE(contains(e.what(), "sends itself 2 elements but receives 1 from itself"))
      << e.what();
  e = test::expectError([&] {
    k.c->allreduce(k.send, k.recv, 1, static_cast<DataType>(40), ReduceOp::kSum,
                   k.stream);
  });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(k.log(), "");
  // Still usable.
  k.c->broadcast(k.recv, 7, DataType::kFloat32, 0, k.stream);
  EXPECT_TRUE(contains(k.log(), "broadcast"));
}

TEST(NcclCommunicator, TheEndFinalizesThenDestroys) {
  const int aborts = fake().count("abort");
  { Case k; }
  EXPECT_EQ(fake().takeLog(), std::string("finalize\ndestroy\n"));
  EXPECT_EQ(fake().count("abort"), aborts);
}

}  // namespace
}  // namespace kolo
