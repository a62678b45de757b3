// The whole runtime over real communicators, each rank a thread of this
// process with its own Communicator and Runtime (tests/support/
// runtime_world.h): results of every kind of operation submitted in a
// random order per rank, 10,000 small operations from 4 threads per rank,
// mismatches of each kind on every rank while other operations go on,
// argument errors, large allreduces fused only across hosts, groups,
// shutdown with operations pending, and bitwise-equal results under
// KOLO_DETERMINISTIC whatever the fusion threshold and cycle time. Join is
// tested in runtime_join_test, the timeline, straggler report, autotune log
// and stall check in runtime_reports_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "runtime/runtime.h"
#include "support/runtime_world.h"

namespace kolo::runtime::runtime_world {
namespace {

// Every kind, random submission order on each rank, three steps (the first
// negotiates, the others hit the cache); values checked exactly.
TEST(RuntimeTest, RandomSubmissionOrdersGiveCorrectIdenticalResults) {
  const int n = 3;
  withRuntimes(n, fastOptions(), [&](Runtime& rt, int rank) {
    std::mt19937 rng(100 + rank);
    for (int step = 0; step < 3; ++step) {
      const int tensors = 40;
      std::vector<std::vector<float>> f(tensors);
      std::vector<std::vector<double>> d(tensors);
      std::vector<std::vector<int32_t>> ints(tensors);
      std::vector<std::function<HandlePtr()>> submit;
      std::vector<std::function<void()>> check;
      for (int t = 0; t < tensors; ++t) {
        const std::string name = "s.t" + std::to_string(t);
        const size_t len = 1 + (t * 37) % 300;
        switch (t % 8) {
          case 0:
          case 1: {  // float sum
            f[t].resize(len);
            for (size_t i = 0; i < len; ++i) f[t][i] = float((rank + 1) * (i % 5 + t));
            submit.push_back([&, t, name] { return rt.enqueue(allreduce(name, f[t])); });
            check.push_back([&, t, len] {
              for (size_t i = 0; i < len; ++i) {
                ASSERT_EQ(f[t][i], float(6 * (i % 5 + t))) << t << " " << i;
              }
            });
            break;
          }
          case 2: {  // double average with pre/postscale
            d[t].resize(len);
            for (size_t i = 0; i < len; ++i) d[t][i] = double(rank * 4 + i % 3);
            submit.push_back([&, t, name, len] {
              OpRequest r;
              r.spec.name = name;
              r.spec.dtype = DataType::kFloat64;
              r.spec.op = ReduceOp::kAverage;
              r.spec.shape = {int64_t(len)};
              r.spec.prescale = 2;
              r.spec.postscale = 0.5;
              r.input = r.output = d[t].data();
              return rt.enqueue(r);
            });
            check.push_back([&, t, len] {
              for (size_t i = 0; i < len; ++i) ASSERT_EQ(d[t][i], double(4 + i % 3));
            });
            break;
          }
          case 3: {  // int32 max
            ints[t].assign(len, 0);
            for (size_t i = 0; i < len; ++i) ints[t][i] = int32_t((rank * 7 + i) % 11);
            submit.push_back([&, t, name, len] {
              OpRequest r;
              r.spec.name = name;
              r.spec.dtype = DataType::kInt32;
              r.spec.op = ReduceOp::kMax;
              r.spec.shape = {int64_t(len)};
              r.input = r.output = ints[t].data();
              return rt.enqueue(r);
            });
            check.push_back([&, t, len] {
              for (size_t i = 0; i < len; ++i) {
                int32_t want = 0;
                for (int q = 0; q < n; ++q)
                  want = std::max(want, int32_t((q * 7 + i) % 11));
                ASSERT_EQ(ints[t][i], want);
              }
            });
            break;
          }
          case 4: {  // allgather, rank q gives q+1 rows of 3
            f[t].resize((rank + 1) * 3);
            for (size_t i = 0; i < f[t].size(); ++i) f[t][i] = float(rank * 100 + i + t);
            auto h = std::make_shared<HandlePtr>();
            submit.push_back([&, t, name, h] {
              OpRequest r;
              r.spec.name = name;
              r.spec.kind = OpKind::kAllgather;
              r.spec.shape = {rank + 1, 3};
              r.input = f[t].data();
              *h = rt.enqueue(r);
              return *h;
            });
            check.push_back([&, t, h] {
              const auto& out = (*h)->output();
              ASSERT_EQ((*h)->outputShape(), (std::vector<int64_t>{6, 3}));
              ASSERT_EQ(out.size(), 18 * sizeof(float));
              const float* p = reinterpret_cast<const float*>(out.data());
              size_t at = 0;
              for (int q = 0; q < n; ++q) {
                for (int i = 0; i < (q + 1) * 3; ++i)
                  ASSERT_EQ(p[at++], float(q * 100 + i + t));
              }
            });
            break;
          }
          case 5: {  // broadcast from rank t % n
            f[t].assign(len, float(rank * 1000 + t));
            const int root = t % n;
            submit.push_back([&, t, name, len, root] {
              OpRequest r;
              r.spec.name = name;
              r.spec.kind = OpKind::kBroadcast;
              r.spec.shape = {int64_t(len)};
              r.spec.root = root;
              r.input = r.output = f[t].data();
              return rt.enqueue(r);
            });
            check.push_back([&, t, len, root] {
              for (size_t i = 0; i < len; ++i) ASSERT_EQ(f[t][i], float(root * 1000 + t));
            });
            break;
          }
          case 6: {  // alltoall with splits: rank q sends q+j+1 rows to rank j
            std::vector<int64_t> splits(n);
            int64_t rows = 0;
            for (int j = 0; j < n; ++j) rows += (splits[j] = rank + j + 1);
            f[t].clear();
            for (int j = 0; j < n; ++j) {
              for (int64_t i = 0; i < splits[j] * 2; ++i) {
                f[t].push_back(float(rank * 10000 + j * 100 + i));
              }
            }
            auto h = std::make_shared<HandlePtr>();
            submit.push_back([&, t, name, h, splits, rows] {
              OpRequest r;
              r.spec.name = name;
              r.spec.kind = OpKind::kAlltoall;
              r.spec.shape = {rows, 2};
              r.input = f[t].data();
              r.splits = splits;
              *h = rt.enqueue(r);
              return *h;
            });
            check.push_back([&, h] {
              const float* p = reinterpret_cast<const float*>((*h)->output().data());
              int64_t rowsIn = 0;
              size_t at = 0;
              for (int q = 0; q < n; ++q) {
                const int64_t k = q + rank + 1;
                rowsIn += k;
                for (int64_t i = 0; i < k * 2; ++i) {
                  ASSERT_EQ(p[at++], float(q * 10000 + rank * 100 + i));
                }
              }
              ASSERT_EQ((*h)->outputShape(), (std::vector<int64_t>{rowsIn, 2}));
            });
            break;
          }
          case 7: {  // reducescatter: 2 rows of 4 per rank
            f[t].resize(n * 8);
            d[t].resize(8);  // float output kept in f; d unused
            for (size_t i = 0; i < f[t].size(); ++i) f[t][i] = float(rank + i);
            auto out = std::make_shared<std::vector<float>>(8);
            submit.push_back([&, t, name, out] {
              OpRequest r;
              r.spec.name = name;
              r.spec.kind = OpKind::kReduceScatter;
              r.spec.shape = {2 * n, 4};
              r.input = f[t].data();
              r.output = out->data();
              return rt.enqueue(r);
            });
            check.push_back([&, out] {
              for (size_t i = 0; i < 8; ++i) {
                ASSERT_EQ((*out)[i], float(3 + 3 * (rank * 8 + i)));  // 0+1+2 + 3x
              }
            });
            break;
          }
        }
      }
      std::vector<int> order(tensors);
      for (int t = 0; t < tensors; ++t) order[t] = t;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<HandlePtr> handles(tensors);
      for (int t : order) handles[t] = submit[t]();
      for (int t = 0; t < tensors; ++t) {
        ASSERT_NO_THROW(handles[t]->wait())
            << "tensor " << t << ": " << errorText(handles[t]);
        check[t]();
      }
    }
  });
}

// 10,000 small allreduces per rank from 4 threads, 2 ranks; each thread
// keeps up to 32 in flight.
TEST(RuntimeTest, TenThousandSmallOpsFromFourThreadsPerRank) {
  withRuntimes(2, fastOptions(), [&](Runtime& rt, int rank) {
    const int threads = 4, each = 2500, window = 32;
    std::atomic<int> bad{0};
    std::vector<std::thread> workers;
    for (int th = 0; th < threads; ++th) {
      workers.emplace_back([&, th] {
        std::vector<std::vector<float>> bufs(window, std::vector<float>(8));
        std::vector<HandlePtr> inflight(window);
        std::vector<int> id(window, -1);
        auto collect = [&](int k) {
          if (!inflight[k]) return;
          try {
            inflight[k]->wait();
          } catch (...) {
            ++bad;
          }
          for (size_t i = 0; i < 8; ++i) {
            if (bufs[k][i] != float(3 * (id[k] + i))) ++bad;
          }
        };
        for (int i = 0; i < each; ++i) {
          const int k = i % window;
          collect(k);
          const int op = th * each + i;
          id[k] = op;
          for (size_t j = 0; j < 8; ++j) bufs[k][j] = float((rank + 1) * (op + j));
          inflight[k] = rt.enqueue(
              allreduce("m." + std::to_string(th) + "." + std::to_string(i), bufs[k]));
        }
        for (int k = 0; k < window; ++k) collect(k);
      });
    }
    for (auto& w : workers) w.join();
    EXPECT_EQ(bad.load(), 0);
  });
}

// Each kind of mismatch fails that operation on every rank with the same
// text naming tensor, field, ranks and values; another operation in the
// same step completes.
TEST(RuntimeTest, MismatchesReachEveryRankWhileOthersWork) {
  const int n = 3;
  struct Case {
    std::string name;
    std::function<void(OpRequest&, int rank)> change;
    std::string text;
  };
  std::vector<Case> cases = {
      {"shape",
       [](OpRequest& r, int rank) {
         if (rank == 1) r.spec.shape = {3};
       },
       "allreduce 'bad.shape': shape differs: ranks 0,2 have [4], rank 1 has [3]"},
      {"dtype",
       [](OpRequest& r, int rank) {
         if (rank == 2) r.spec.dtype = DataType::kInt32;
       },
       "allreduce 'bad.dtype': dtype differs: ranks 0,1 have float32, rank 2 has int32"},
      {"op",
       [](OpRequest& r, int rank) {
         if (rank == 0) r.spec.op = ReduceOp::kMin;
       },
       "allreduce 'bad.op': reduction differs: rank 0 has min, ranks 1,2 have sum"},
      {"root",
       [](OpRequest& r, int rank) {
         r.spec.kind = OpKind::kBroadcast;
         r.spec.root = rank == 1 ? 1 : 0;
       },
       "broadcast 'bad.root': root differs: ranks 0,2 have 0, rank 1 has 1"},
      {"kind",
       [](OpRequest& r, int rank) {
         if (rank == 2) {
           r.spec.kind = OpKind::kAllgather;
           r.output = nullptr;
         }
       },
       "allreduce 'bad.kind': kind differs: ranks 0,1 have allreduce, rank 2 has "
       "allgather"},
  };
  withRuntimes(n, fastOptions(), [&](Runtime& rt, int rank) {
    for (int round = 0; round < 2; ++round) {  // the second time from the cache
      for (const auto& c : cases) {
        std::vector<float> bad(4, 1), good(5, float(rank));
        OpRequest r = allreduce("bad." + c.name, bad);
        c.change(r, rank);
        auto hb = rt.enqueue(r);
        auto hg = rt.enqueue(allreduce("good." + c.name, good));
        ErrorCode code = ErrorCode::kOk;
        EXPECT_EQ(errorText(hb, &code), c.text) << "rank " << rank;
        EXPECT_EQ(code, ErrorCode::kMismatch);
        EXPECT_EQ(errorText(hg), "") << c.name;
        EXPECT_EQ(good[0], 3.0f);
      }
    }
  });
}

TEST(RuntimeTest, BadArgumentsFailAtOnce) {
  withRuntimes(2, fastOptions(), [&](Runtime& rt, int rank) {
    std::vector<float> buf(4, 1);
    auto expectInvalid = [&](OpRequest r, const std::string& part) {
      auto h = rt.enqueue(std::move(r));
      EXPECT_TRUE(h->poll());  // at once
      ErrorCode code = ErrorCode::kOk;
      const std::string text = errorText(h, &code);
      EXPECT_EQ(code, ErrorCode::kInvalidArgument) << text;
      EXPECT_NE(text.find(part), std::string::npos) << text;
    };
    OpRequest r = allreduce("n", buf);
    r.input = nullptr;
    expectInvalid(r, "null input");
    r = allreduce("n", buf);
    r.output = nullptr;
    expectInvalid(r, "null output");
    r = allreduce("n", buf);
    r.spec.dtype = static_cast<DataType>(42);
    expectInvalid(r, "unknown dtype");
    r = allreduce("", buf);
    expectInvalid(r, "empty operation name");
    r = allreduce("n", buf);
    r.spec.kind = OpKind::kBroadcast;
    r.spec.root = 5;
    expectInvalid(r, "root 5");
    r = allreduce("n", buf);
    r.spec.kind = OpKind::kReduceScatter;
    r.spec.shape = {3};
    expectInvalid(r, "does not divide");
    // Duplicate pending name: the first is pending (rank 1 submits later).
    std::vector<float> other(4, 1);
    HandlePtr first;
    if (rank == 0) {
      first = rt.enqueue(allreduce("dup", buf));
      expectInvalid(allreduce("dup", other), "name already pending");
    }
    OpRequest sync;
    sync.spec.name = "sync";
    sync.spec.kind = OpKind::kBarrier;
    rt.enqueue(sync)->wait();
    if (rank == 1) first = rt.enqueue(allreduce("dup", buf));
    first->wait();
    EXPECT_EQ(buf[0], 2.0f);
  });
}

// Allreduces above kFusionAloneBytes run alone on one host and are fused
// when the team spans hosts (pretend hosts: tcp between them). Rank 0's
// timeline names each collective's bucket: over 5 steps of two 512 KiB
// tensors submitted together, a bucket of both appears across hosts (the
// two reach every rank in one cycle in at least one step) and never on one
// host.
TEST(RuntimeTest, LargeAllreducesFuseOnlyAcrossHosts) {
  for (const bool hosts : {false, true}) {
    SCOPED_TRACE(hosts ? "2 hosts" : "1 host");
    const std::string path = ::testing::TempDir() + "runtime_alone_" +
                             std::to_string(getpid()) + (hosts ? "_h" : "_1") + ".json";
    RuntimeOptions o = fastOptions();
    o.cycleTimeMs = 20;  // a wide gathering window
    o.timelinePath = path;
    test::withCommunicators(
        2, test::testSettings(),
        [&](Communicator& c) {
          EXPECT_EQ(c.layout().crossSize, hosts ? 2 : 1);
          Runtime rt(borrow(c), o);
          const size_t n = 128 * 1024;  // 512 KiB
          std::vector<float> a(n), b(n);
          for (int step = 0; step < 5; ++step) {
            std::fill(a.begin(), a.end(), float(c.rank() + 1));
            std::fill(b.begin(), b.end(), float(2 * c.rank() + 1));
            auto ha = rt.enqueue(allreduce("alone.a", a));
            auto hb = rt.enqueue(allreduce("alone.b", b));
            ha->wait();
            hb->wait();
            EXPECT_EQ(a[n - 1], 3.0f);
            EXPECT_EQ(b[n - 1], 4.0f);
          }
          OpRequest end;
          end.spec.name = "test.end";
          end.spec.kind = OpKind::kBarrier;
          rt.enqueue(end)->wait();
          rt.shutdown();
        },
        [&](int rank) { return hosts ? "host" + std::to_string(rank) : "host"; });
    const std::string text = takeFile(path);
    ASSERT_FALSE(text.empty()) << path;
    const bool fused =
        text.find("\"bytes\":\"1048576\",\"bucket\":\"0\",\"tensors\":\"2\"") !=
        std::string::npos;
    EXPECT_EQ(fused, hosts) << text.substr(0, 2000);
    if (!hosts) {
      EXPECT_NE(text.find("\"bytes\":\"524288\""), std::string::npos)
          << text.substr(0, 2000);
    }
  }
}

TEST(RuntimeTest, GroupsRunTogether) {
  withRuntimes(2, fastOptions(), [&](Runtime& rt, int rank) {
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> bufs(4, std::vector<float>(16, float(rank + 1)));
      std::vector<OpRequest> reqs;
      for (int i = 0; i < 4; ++i)
        reqs.push_back(allreduce("grp." + std::to_string(i), bufs[i]));
      if (rank == 1) std::reverse(reqs.begin(), reqs.end());
      auto hs = rt.enqueueGroup(std::move(reqs));
      for (auto& h : hs) EXPECT_NO_THROW(h->wait());
      for (auto& b : bufs) EXPECT_EQ(b[15], 3.0f);
    }
    // A duplicate name inside a group fails the whole group at once.
    std::vector<float> a(2), b(2);
    auto hs = rt.enqueueGroup({allreduce("x", a), allreduce("x", b)});
    for (auto& h : hs) EXPECT_NE(errorText(h).find("appears twice"), std::string::npos);
  });
}

// A group larger than the response cache could never be ready (its members
// would evict each other): it fails at once, naming the capacity.
TEST(RuntimeTest, GroupLargerThanTheCacheFailsAtOnce) {
  RuntimeOptions options = fastOptions();
  options.cacheCapacity = 4;
  withRuntimes(2, options, [&](Runtime& rt, int rank) {
    std::vector<std::vector<float>> bufs(5, std::vector<float>(2, 1.0f));
    std::vector<OpRequest> reqs;
    for (int i = 0; i < 5; ++i)
      reqs.push_back(allreduce("big." + std::to_string(i), bufs[i]));
    auto hs = rt.enqueueGroup(std::move(reqs));
    for (auto& h : hs) {
      EXPECT_NE(errorText(h).find("group of 5 operations (first 'big.0') exceeds "
                                  "KOLO_CACHE_CAPACITY=4"),
                std::string::npos);
    }
    // A group that fits still runs.
    std::vector<OpRequest> small;
    for (int i = 0; i < 4; ++i)
      small.push_back(allreduce("big." + std::to_string(i), bufs[i]));
    for (auto& h : rt.enqueueGroup(std::move(small))) EXPECT_NO_THROW(h->wait());
    EXPECT_EQ(bufs[3][0], 2.0f);
  });
}

// Rank 0 shuts down while operations are pending on both ranks: they fail
// naming rank 0 and the tensor; later submissions fail at once.
TEST(RuntimeTest, ShutdownWithPendingOperationsFailsThem) {
  test::withCommunicators(2, test::testSettings(), [&](Communicator& c) {
    Runtime rt(borrow(c), fastOptions());
    std::vector<float> buf(4, 1);
    // Submitted on one rank only: pending until the shutdown.
    auto h = rt.enqueue(allreduce(c.rank() == 0 ? "only0" : "only1", buf));
    OpRequest sync;
    sync.spec.name = "sync";
    sync.spec.kind = OpKind::kBarrier;
    rt.enqueue(sync)->wait();  // both are pending now
    if (c.rank() == 0) rt.shutdown();
    ErrorCode code = ErrorCode::kOk;
    const std::string text = errorText(h, &code);
    const std::string name = c.rank() == 0 ? "only0" : "only1";
    EXPECT_EQ(text, "rank 0 shut down while '" + name + "' was pending");
    EXPECT_EQ(code, c.rank() == 0 ? ErrorCode::kNotInitialized : ErrorCode::kPeerLost);
    auto later = rt.enqueue(allreduce("later", buf));
    EXPECT_TRUE(later->poll());
    EXPECT_NE(errorText(later).find("rank 0 shut down"), std::string::npos);
    rt.shutdown();
  });
}

// KOLO_DETERMINISTIC=1: the same inputs give the same bits under different
// fusion thresholds and cycle times (without it they differ: checked by
// hand when this test was written).
TEST(RuntimeTest, DeterministicSumsIgnoreFusionAndCycleTime) {
  const int n = 3, tensors = 40;
  auto run = [&](int64_t threshold, double cycleMs) {
    std::vector<std::vector<float>> results(tensors);
    std::mutex mu;
    RuntimeOptions o = fastOptions();
    o.deterministic = true;
    o.fusionThresholdBytes = threshold;
    o.cycleTimeMs = cycleMs;
    withRuntimes(
        n, o,
        [&](Runtime& rt, int rank) {
          std::mt19937 rng(rank * 31 + 5);
          std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
          std::vector<std::vector<float>> bufs(tensors);
          std::vector<HandlePtr> hs;
          for (int t = 0; t < tensors; ++t) {
            bufs[t].resize(3100 + t * 13);
            for (auto& v : bufs[t]) v = dist(rng) * (t % 3 == 0 ? 1e-3f : 1.0f);
          }
          std::vector<int> order(tensors);
          for (int t = 0; t < tensors; ++t) order[t] = t;
          std::shuffle(order.begin(), order.end(), rng);
          hs.resize(tensors);
          for (int t : order)
            hs[t] = rt.enqueue(allreduce("d" + std::to_string(t), bufs[t]));
          for (auto& h : hs) h->wait();
          if (rank == 1) {
            std::lock_guard<std::mutex> lock(mu);
            results = bufs;
          }
        },
        "tcp");
    return results;
  };
  // Sizes chosen so the selection table picks different algorithms without
  // the setting: one 536 KB bucket (ring), each tensor alone (12-14 KB,
  // tree), buckets of about 100 KB (rhd).
  const auto a = run(64 << 20, 0.5);
  const auto b = run(0, 0.2);
  const auto c = run(100 << 10, 3);
  for (int t = 0; t < tensors; ++t) {
    ASSERT_EQ(a[t].size(), b[t].size());
    EXPECT_EQ(std::memcmp(a[t].data(), b[t].data(), a[t].size() * 4), 0) << t;
    EXPECT_EQ(std::memcmp(a[t].data(), c[t].data(), a[t].size() * 4), 0) << t;
  }
}

}  // namespace
}  // namespace kolo::runtime::runtime_world
