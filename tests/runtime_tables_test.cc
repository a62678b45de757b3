// The pieces the runtime's refactoring separated, each alone: the
// ProcessSetTable (sets, ids, the handle table; closed and unknown ids)
// on a one-rank world, the runtime's HandleTable statuses, the per-dtype
// math of collectives/elementwise.h, TimelineSpan, and how a process
// set's errors name global ranks (set_rank_names.h).
#include <gtest/gtest.h>
#include <kolo/communicator.h>
#include <kolo/error.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/elementwise.h"
#include "collectives/reduce.h"
#include "runtime/handle_table.h"
#include "runtime/process_set_table.h"
#include "runtime/set_rank_names.h"
#include "runtime/timeline.h"

namespace kolo::runtime {
namespace {

using Status = ProcessSetTable::Status;

std::shared_ptr<Communicator> oneRankWorld() {
  CommunicatorConfig config;
  config.rank = 0;
  config.size = 1;
  return Communicator::create(config);
}

OpRequest allreduceOf(const std::string& name, const float* in, float* out, int64_t n) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = DataType::kFloat32;
  r.spec.op = ReduceOp::kSum;
  r.spec.shape = {n};
  r.input = in;
  r.output = out;
  return r;
}

TEST(ProcessSetTableTest, ClosedTableAnswersClosedEverywhere) {
  ProcessSetTable table;
  EXPECT_EQ(table.find(0).status, Status::kClosed);
  HandlePtr h;
  int worldRank = -1;
  float x = 1, y = 0;
  EXPECT_EQ(table.enqueue(0, allreduceOf("x", &x, &y, 1), &h, &worldRank),
            Status::kClosed);
  EXPECT_EQ(h, nullptr);
  int id = -1, rank = 7;
  EXPECT_EQ(table.create({0}, &id), Status::kClosed);
  EXPECT_EQ(table.rankOf(0, &rank), Status::kClosed);
  EXPECT_EQ(table.detach(1).status, Status::kClosed);
  table.close();  // closing a closed table does nothing
}

TEST(ProcessSetTableTest, SetsIdsAndHandlesOnOneRank) {
  ProcessSetTable table;
  table.open(oneRankWorld(), RuntimeOptions{});
  auto global = table.find(0);
  ASSERT_EQ(global.status, Status::kOk);
  EXPECT_EQ(global.set->ranks, std::vector<int>{0});
  EXPECT_EQ(global.worldRank, 0);
  auto unknown = table.find(7);
  EXPECT_EQ(unknown.status, Status::kUnknown);
  EXPECT_EQ(unknown.set, nullptr);
  EXPECT_EQ(unknown.worldRank, 0);

  // The hot path: enqueue on set 0, and on an unknown set.
  std::vector<float> in = {1, 2, 3}, out(3, 0);
  HandlePtr h;
  int worldRank = -1;
  ASSERT_EQ(table.enqueue(0, allreduceOf("g", in.data(), out.data(), 3), &h, &worldRank),
            Status::kOk);
  h->wait();
  EXPECT_EQ(out, in);
  EXPECT_EQ(table.enqueue(9, allreduceOf("g", in.data(), out.data(), 3), &h, &worldRank),
            Status::kUnknown);
  EXPECT_EQ(worldRank, 0);

  // Ids: the next free one, never 0; the rank in a set; detach and retire.
  int id = -1;
  ASSERT_EQ(table.create({0}, &id), Status::kOk);
  EXPECT_EQ(id, 1);
  int second = -1;
  ASSERT_EQ(table.create({0}, &second), Status::kOk);
  EXPECT_EQ(second, 2);
  int rank = -5;
  EXPECT_EQ(table.rankOf(id, &rank), Status::kOk);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(table.rankOf(40, &rank), Status::kOk);
  EXPECT_EQ(rank, -1);
  auto taken = table.detach(id);
  ASSERT_EQ(taken.status, Status::kOk);
  ProcessSetTable::retire(std::move(taken.set));
  EXPECT_EQ(table.detach(id).status, Status::kUnknown);
  EXPECT_EQ(table.detach(0).status, Status::kUnknown);  // set 0 ends with close()

  // The handle table is the table's: open now, closed (and emptied) by close().
  HandleValue v = 0;
  ASSERT_TRUE(table.handles().add(HandleEntry{h, OpKind::kAllreduce, nullptr}, &v).ok());
  EXPECT_EQ(table.handles().size(), 1u);
  table.close();
  EXPECT_EQ(table.find(0).status, Status::kClosed);
  EXPECT_EQ(table.handles().find(v, &h).status, HandleTable::Status::kClosed);
  EXPECT_EQ(table.handles().size(), 0u);
}

TEST(HandleTableTest, StatusesAndReasons) {
  HandleTable table;
  HandleValue v = 0;
  auto done = std::make_shared<Handle>("d");
  done->complete();
  EXPECT_EQ(table.add(HandleEntry{done, OpKind::kAllreduce, nullptr}, &v).status,
            HandleTable::Status::kClosed);
  table.open();
  ASSERT_TRUE(table.add(HandleEntry{done, OpKind::kAllgather, nullptr}, &v).ok());
  HandlePtr h;
  OpKind kind = OpKind::kAllreduce;
  ASSERT_TRUE(table.find(v, &h, &kind).ok());
  EXPECT_EQ(kind, OpKind::kAllgather);
  ASSERT_TRUE(table.release(v).ok());
  auto again = table.release(v);
  EXPECT_EQ(again.status, HandleTable::Status::kUnknown);
  EXPECT_STREQ(again.why, "already released");
  EXPECT_STREQ(table.find(0, &h).why, "handles are > 0");
  EXPECT_STREQ(table.find(v + (HandleValue{50} << HandleTable::kIndexBits), &h).why,
               "never returned");
}

TEST(ElementwiseTest, FinishIntoEqualsDivideThenScaleOnEveryPath) {
  // Larger than the 16 KiB chunk, so the chunked copy path runs.
  const size_t n = 10000;
  std::vector<float> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 97) - 40.5f;
  std::vector<float> expected = src;
  collectives::divideInPlace(expected.data(), n, DataType::kFloat32, 3);
  collectives::scaleInPlace(expected.data(), n, DataType::kFloat32, 0.25);
  std::vector<float> copied(n, -1.0f);
  collectives::finishInto(copied.data(), src.data(), n, DataType::kFloat32, 3, 0.25);
  EXPECT_EQ(copied, expected);
  std::vector<float> inPlace = src;
  collectives::finishInto(inPlace.data(), inPlace.data(), n, DataType::kFloat32, 3, 0.25);
  EXPECT_EQ(inPlace, expected);
}

TEST(ElementwiseTest, ScaleTruncatesIntegersAndCopyScaledCopies) {
  std::vector<int32_t> v = {7, -7, 3};
  collectives::scaleInPlace(v.data(), v.size(), DataType::kInt32, 0.5);
  EXPECT_EQ(v, (std::vector<int32_t>{3, -3, 1}));
  std::vector<double> in = {1.5, -2.0}, out(2, 0.0);
  collectives::copyScaled(out.data(), in.data(), 2, DataType::kFloat64, 2.0);
  EXPECT_EQ(out, (std::vector<double>{3.0, -4.0}));
}

TEST(ElementwiseTest, IdentityOfEveryReduction) {
  std::vector<int32_t> i(2, 9);
  collectives::fillIdentity(i.data(), 2, DataType::kInt32, ReduceOp::kMin);
  EXPECT_EQ(i[1], std::numeric_limits<int32_t>::max());
  collectives::fillIdentity(i.data(), 2, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(i[0], std::numeric_limits<int32_t>::min());
  collectives::fillIdentity(i.data(), 2, DataType::kInt32, ReduceOp::kProduct);
  EXPECT_EQ(i[0], 1);
  std::vector<uint16_t> h(1, 0);
  collectives::fillIdentity(h.data(), 1, DataType::kFloat16, ReduceOp::kProduct);
  EXPECT_EQ(collectives::halfToFloat(h[0]), 1.0f);
  collectives::fillIdentity(h.data(), 1, DataType::kBFloat16, ReduceOp::kMin);
  EXPECT_TRUE(std::isinf(collectives::bfloat16ToFloat(h[0])));
  std::vector<float> f(3, 5.0f);
  collectives::fillIdentity(f.data(), 3, DataType::kFloat32, ReduceOp::kAverage);
  EXPECT_EQ(f, (std::vector<float>{0, 0, 0}));
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos;
       at = text.find(part, at + 1)) {
    ++n;
  }
  return n;
}

TEST(TimelineSpanTest, BeginAndEndAroundAScopeAlsoOnAnException) {
  const std::string path = "/tmp/kolo_span_test_" + std::to_string(getpid()) + ".json";
  auto tl = TimelineWriter::open(path, 0);
  const std::string name = "w";
  { TimelineSpan span(tl.get(), name, phase::kCollective); }
  try {
    TimelineSpan span(tl.get(), name, phase::kMemcpyIn);
    throw std::runtime_error("cut short");
  } catch (const std::runtime_error&) {
  }
  { TimelineSpan none(nullptr, name, phase::kCollective); }  // no writer: nothing
  tl->close();
  const std::string text = readAll(path);
  std::remove(path.c_str());
  EXPECT_EQ(count(text, "\"ph\":\"B\""), 2u) << text;
  EXPECT_EQ(count(text, "\"ph\":\"E\""), 2u) << text;
  EXPECT_EQ(count(text, "COLLECTIVE"), 1u) << text;
  EXPECT_EQ(count(text, "MEMCPY_IN_FUSION_BUFFER"), 1u) << text;
}

// Set 2 = global ranks {1, 3, 4}: every rank of the set is named by its
// global rank, with its index in the set; what is not one is left alone.
TEST(SetRankNamesTest, RanksOfTheSetAreNamedGlobally) {
  const SetRankNames names{2, {1, 3, 4}};
  EXPECT_EQ(globalRankText("rank 0 timed out after 5 s waiting for rank 1 to send 8 "
                           "bytes (tag 7)",
                           names),
            "rank 1 (rank 0 of process set 2) timed out after 5 s waiting for rank 3 "
            "(rank 1 of process set 2) to send 8 bytes (tag 7)");
  EXPECT_EQ(globalRankText("lost rank 2 (pid 99) (reported by rank 1)", names),
            "lost rank 4 (rank 2 of process set 2) (pid 99) (reported by rank 3 (rank "
            "1 of process set 2))");
  EXPECT_EQ(globalRankText("ranks 0,2 did not answer", names),
            "ranks 1,4 (ranks 0,2 of process set 2) did not answer");
  // Not ranks of the set (out of range, a local rank, a count, a tag).
  EXPECT_EQ(globalRankText("rank 3; local rank 1; 3 ranks; ranks 0,7; tag 1", names),
            "rank 3; local rank 1; 3 ranks; ranks 0,7; tag 1");
  // A set numbered as the job (set 0) is left as it is.
  EXPECT_EQ(globalRankText("rank 1 lost rank 2", {0, {0, 1, 2}}), "rank 1 lost rank 2");
}

TEST(SetRankNamesTest, OnlyLostOrSilentPeerErrorsAreRewritten) {
  const SetRankNames names{5, {2, 6}};
  auto rewritten = [&](ErrorCode code) {
    auto e = inGlobalRanks(
        std::make_exception_ptr(Error(code, "rank 0 waiting for rank 1", 1)), names);
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), code);
      return std::make_pair(std::string(error.what()), error.peer());
    }
    return std::make_pair(std::string("not an Error"), -2);
  };
  for (ErrorCode code : {ErrorCode::kTimeout, ErrorCode::kPeerLost}) {
    auto [text, peer] = rewritten(code);
    EXPECT_EQ(text,
              "rank 2 (rank 0 of process set 5) waiting for rank 6 (rank 1 of process "
              "set 5)");
    EXPECT_EQ(peer, 6);
  }
  auto [text, peer] = rewritten(ErrorCode::kMismatch);
  EXPECT_EQ(text, "rank 0 waiting for rank 1");
  EXPECT_EQ(peer, 1);
  auto other = std::make_exception_ptr(std::runtime_error("rank 1"));
  EXPECT_EQ(inGlobalRanks(other, names), other);
}

}  // namespace
}  // namespace kolo::runtime
