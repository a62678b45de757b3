// Join over the whole runtime (real communicators, each rank a thread of
// this process; support/runtime_world.h): uneven step counts with
// KOLO_JOIN_MODE=absent, Horovod's join (averages over the team, allgather
// and broadcast fail), and a joined rank taking part in every kind.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/runtime.h"
#include "support/runtime_world.h"

namespace kolo::runtime::runtime_world {
namespace {

RuntimeOptions absentJoinOptions() {
  RuntimeOptions o = fastOptions();
  o.joinMode = RuntimeOptions::JoinMode::kAbsent;
  return o;
}

// Rank r runs steps[r] steps, then joins. With KOLO_JOIN_MODE=absent an
// average counts only the ranks that still contribute; join completes on
// every rank when all joined.
TEST(RuntimeTest, JoinWithUnevenStepCounts) {
  const int n = 3;
  const std::vector<int> steps = {5, 2, 4};
  withRuntimes(n, absentJoinOptions(), [&](Runtime& rt, int rank) {
    for (int s = 0; s < steps[rank]; ++s) {
      std::vector<float> g(10, float(rank + 1));
      std::vector<float> total(3, float(rank + 1));
      auto h1 = rt.enqueue(allreduce("grad", g, ReduceOp::kAverage));
      auto h2 = rt.enqueue(allreduce("count", total, ReduceOp::kSum));
      h1->wait();
      h2->wait();
      float sum = 0;
      int live = 0;
      for (int q = 0; q < n; ++q) {
        if (steps[q] > s) {
          sum += float(q + 1);
          ++live;
        }
      }
      EXPECT_FLOAT_EQ(g[0], sum / float(live)) << "rank " << rank << " step " << s;
      EXPECT_EQ(total[2], sum);
    }
    auto j = rt.join();
    EXPECT_NO_THROW(j->wait());
    // After the join the ranks work as before.
    std::vector<float> after(2, 1);
    rt.enqueue(allreduce("after", after))->wait();
    EXPECT_EQ(after[0], float(n));
  });
}

// Horovod's join (the default): a joined rank contributes zeros, so an
// average divides by the team's size, integers truncated toward zero.
TEST(RuntimeTest, HorovodJoinAveragesOverTheTeam) {
  const int n = 3;
  const std::vector<int> steps = {3, 1, 2};
  withRuntimes(n, fastOptions(), [&](Runtime& rt, int rank) {
    for (int s = 0; s < steps[rank]; ++s) {
      std::vector<float> g(10, float(rank + 1));
      std::vector<int32_t> k(5, 10 * (rank + 1));
      OpRequest ki = allreduce("k", g, ReduceOp::kAverage);
      ki.spec.dtype = DataType::kInt32;
      ki.spec.shape = {5};
      ki.input = ki.output = k.data();
      auto h1 = rt.enqueue(allreduce("grad", g, ReduceOp::kAverage));
      auto h2 = rt.enqueue(ki);
      h1->wait();
      h2->wait();
      float sum = 0;
      int32_t isum = 0;
      for (int q = 0; q < n; ++q) {
        if (steps[q] > s) {
          sum += float(q + 1);
          isum += 10 * (q + 1);
        }
      }
      EXPECT_FLOAT_EQ(g[0], sum / float(n)) << "rank " << rank << " step " << s;
      EXPECT_EQ(k[4], isum / n) << "rank " << rank << " step " << s;
    }
    EXPECT_NO_THROW(rt.join()->wait());
  });
}

// Horovod's join: the kinds that move a joined rank's rows fail on the
// others, naming it; allreduce and barrier go on.
TEST(RuntimeTest, HorovodJoinFailsAllgatherAndBroadcast) {
  withRuntimes(2, fastOptions(), [&](Runtime& rt, int rank) {
    if (rank == 1) {
      EXPECT_NO_THROW(rt.join()->wait());
      return;
    }
    std::vector<float> rows(4, 1.0f);
    OpRequest ag;
    ag.spec.name = "hj.allgather";
    ag.spec.kind = OpKind::kAllgather;
    ag.spec.shape = {2, 2};
    ag.input = rows.data();
    EXPECT_NE(
        errorText(rt.enqueue(ag)).find("allgather 'hj.allgather': rank 1 has joined"),
        std::string::npos);
    OpRequest b = ag;
    b.spec.name = "hj.broadcast";
    b.spec.kind = OpKind::kBroadcast;
    b.input = b.output = rows.data();
    EXPECT_NE(errorText(rt.enqueue(b)).find("rank 1 has joined"), std::string::npos);
    std::vector<float> x(3, 4.0f);
    rt.enqueue(allreduce("hj.sum", x, ReduceOp::kSum))->wait();
    EXPECT_EQ(x[0], 4.0f);  // rank 1's zeros
    EXPECT_NO_THROW(rt.join()->wait());
  });
}

// With KOLO_JOIN_MODE=absent, while rank 2 has joined, the others'
// operations of every kind run with it taking part without data: no rows in
// allgather and alltoall, the identity in reductions; a broadcast from the
// joined rank fails on every rank.
TEST(RuntimeTest, JoinedRankTakesPartInEveryKind) {
  const int n = 3;
  withRuntimes(n, absentJoinOptions(), [&](Runtime& rt, int rank) {
    HandlePtr joined;
    if (rank == 2) {
      joined = rt.join();
    } else {
      std::vector<float> rows(2 * (rank + 1), float(rank + 1));
      OpRequest ag;
      ag.spec.name = "j.allgather";
      ag.spec.kind = OpKind::kAllgather;
      ag.spec.shape = {rank + 1, 2};
      ag.input = rows.data();
      auto hag = rt.enqueue(ag);

      std::vector<float> mx(4, float(-5 - rank));
      OpRequest m = allreduce("j.max", mx, ReduceOp::kMax);
      auto hmax = rt.enqueue(m);

      std::vector<float> bc(3, float(rank == 0 ? 42 : 0));
      OpRequest b;
      b.spec.name = "j.broadcast";
      b.spec.kind = OpKind::kBroadcast;
      b.spec.shape = {3};
      b.input = b.output = bc.data();
      auto hb = rt.enqueue(b);

      OpRequest bad = b;
      bad.spec.name = "j.broadcast.from2";
      bad.spec.root = 2;
      auto hbad = rt.enqueue(bad);

      std::vector<float> rsIn(n * 2, 1.0f), rsOut(2);
      OpRequest rs;
      rs.spec.name = "j.reducescatter";
      rs.spec.kind = OpKind::kReduceScatter;
      rs.spec.op = ReduceOp::kAverage;
      rs.spec.shape = {n * 2};
      rs.input = rsIn.data();
      rs.output = rsOut.data();
      auto hrs = rt.enqueue(rs);

      std::vector<float> a2a(n * 2, float(rank));
      OpRequest aa;
      aa.spec.name = "j.alltoall";
      aa.spec.kind = OpKind::kAlltoall;
      aa.spec.shape = {n * 2};
      aa.input = a2a.data();
      auto haa = rt.enqueue(aa);

      OpRequest bar;
      bar.spec.name = "j.barrier";
      bar.spec.kind = OpKind::kBarrier;
      auto hbar = rt.enqueue(bar);

      ASSERT_NO_THROW(hag->wait());
      EXPECT_EQ(hag->outputShape(), (std::vector<int64_t>{3, 2}));
      const float* g = reinterpret_cast<const float*>(hag->output().data());
      EXPECT_EQ(std::vector<float>(g, g + 6), (std::vector<float>{1, 1, 2, 2, 2, 2}));
      ASSERT_NO_THROW(hmax->wait());
      EXPECT_EQ(mx[0], -5.0f);  // the joined rank's identity does not win
      ASSERT_NO_THROW(hb->wait());
      EXPECT_EQ(bc[2], 42.0f);
      EXPECT_NE(errorText(hbad).find("root rank 2 has joined"), std::string::npos);
      ASSERT_NO_THROW(hrs->wait());
      EXPECT_EQ(rsOut[1], 1.0f);  // average over the 2 contributors
      ASSERT_NO_THROW(haa->wait());
      EXPECT_EQ(haa->outputShape(), (std::vector<int64_t>{4}));  // 2 rows from 0 and 1
      const float* t = reinterpret_cast<const float*>(haa->output().data());
      EXPECT_EQ(std::vector<float>(t, t + 4), (std::vector<float>{0, 0, 1, 1}));
      ASSERT_NO_THROW(hbar->wait());
      joined = rt.join();
    }
    EXPECT_NO_THROW(joined->wait());
  });
}

}  // namespace
}  // namespace kolo::runtime::runtime_world
