// kolo::Communicator end to end: every collective through the public API,
// both transports, argument agreement and validation.
#include <gtest/gtest.h>
#include <kolo/communicator.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>

#include "support/comm_world.h"

namespace kolo {
namespace {

using test::testSettings;
using test::withCommunicators;

struct Param {
  int ranks;
  const char* transport;
};

class CommunicatorTest : public ::testing::TestWithParam<Param> {
 protected:
  Settings settings() const { return testSettings(GetParam().transport); }
  int n() const { return GetParam().ranks; }
};

TEST_P(CommunicatorTest, AllreduceEveryOpFloat) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kProduct}) {
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{(1 << 20) + 3}}) {
      withCommunicators(n(), settings(), [&](Communicator& c) {
        std::vector<float> in(count), out(count, -1);
        for (size_t i = 0; i < count; ++i)
          in[i] = float((c.rank() + 1) * ((i % 5) + 1) % 7 + 1);
        AllreduceOptions o;
        o.send = in.data();
        o.recv = out.data();
        o.count = count;
        o.op = op;
        c.allreduce(o);
        for (size_t i = 0; i < count; ++i) {
          double ref =
              op == ReduceOp::kProduct
                  ? 1
                  : (op == ReduceOp::kMin ? 1e30 : (op == ReduceOp::kMax ? -1e30 : 0));
          for (int r = 0; r < c.size(); ++r) {
            double v = float((r + 1) * ((i % 5) + 1) % 7 + 1);
            if (op == ReduceOp::kSum || op == ReduceOp::kAverage) ref += v;
            if (op == ReduceOp::kProduct) ref *= v;
            if (op == ReduceOp::kMin) ref = std::min(ref, v);
            if (op == ReduceOp::kMax) ref = std::max(ref, v);
          }
          if (op == ReduceOp::kAverage) ref /= c.size();
          ASSERT_NEAR(out[i], ref, 1e-5 * std::abs(ref))
              << "op " << toString(op) << " count " << count << " index " << i;
        }
      });
    }
  }
}

TEST_P(CommunicatorTest, AllreduceInPlaceEveryAlgorithmAndDtype) {
  std::vector<std::string> algorithms = {"ring", "rhd", "tree"};
  if (std::string(GetParam().transport) != "tcp") algorithms.push_back("shm");
  for (const auto& algo : algorithms) {
    for (DataType dtype :
         {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
          DataType::kInt32, DataType::kInt64, DataType::kUInt8}) {
      withCommunicators(n(), settings(), [&](Communicator& c) {
        const size_t count = 300001;
        const size_t es = elementSize(dtype);
        std::vector<uint8_t> buf(count * es);
        // Value (rank + i) % 4 is exact in every dtype; sums stay small.
        for (size_t i = 0; i < count; ++i) {
          int v = (c.rank() + static_cast<int>(i)) % 4;
          switch (dtype) {
            case DataType::kFloat32: reinterpret_cast<float*>(buf.data())[i] = v; break;
            case DataType::kFloat64: reinterpret_cast<double*>(buf.data())[i] = v; break;
            case DataType::kFloat16:
              reinterpret_cast<uint16_t*>(buf.data())[i] =
                  v == 0 ? 0
                         : static_cast<uint16_t>(0x3C00 + (v == 2   ? 0x400
                                                           : v == 3 ? 0x600
                                                                    : 0));
              break;
            case DataType::kBFloat16:
              reinterpret_cast<uint16_t*>(buf.data())[i] =
                  v == 0 ? 0
                         : static_cast<uint16_t>(0x3F80 + (v == 2   ? 0x80
                                                           : v == 3 ? 0xC0
                                                                    : 0));
              break;
            case DataType::kInt32: reinterpret_cast<int32_t*>(buf.data())[i] = v; break;
            case DataType::kInt64: reinterpret_cast<int64_t*>(buf.data())[i] = v; break;
            case DataType::kUInt8: buf[i] = static_cast<uint8_t>(v); break;
          }
        }
        AllreduceOptions o;
        o.send = buf.data();
        o.recv = buf.data();
        o.count = count;
        o.dtype = dtype;
        o.algorithm = algo;
        c.allreduce(o);
        for (size_t i = 0; i < count; ++i) {
          double expect = 0;
          for (int r = 0; r < c.size(); ++r) expect += (r + static_cast<int>(i)) % 4;
          double got = 0;
          switch (dtype) {
            case DataType::kFloat32: got = reinterpret_cast<float*>(buf.data())[i]; break;
            case DataType::kFloat64:
              got = reinterpret_cast<double*>(buf.data())[i];
              break;
            case DataType::kFloat16: {
              uint16_t h = reinterpret_cast<uint16_t*>(buf.data())[i];
              int e = (h >> 10) & 0x1f;
              got = h == 0 ? 0 : std::ldexp(1.0 + (h & 0x3ff) / 1024.0, e - 15);
              break;
            }
            case DataType::kBFloat16: {
              uint32_t bits = uint32_t(reinterpret_cast<uint16_t*>(buf.data())[i]) << 16;
              float f;
              std::memcpy(&f, &bits, 4);
              got = f;
              break;
            }
            case DataType::kInt32: got = reinterpret_cast<int32_t*>(buf.data())[i]; break;
            case DataType::kInt64: got = reinterpret_cast<int64_t*>(buf.data())[i]; break;
            case DataType::kUInt8: got = buf[i]; break;
          }
          ASSERT_EQ(got, expect) << algo << " " << toString(dtype) << " index " << i;
        }
      });
    }
  }
}

TEST_P(CommunicatorTest, OtherCollectives) {
  withCommunicators(n(), settings(), [&](Communicator& c) {
    const int size = c.size(), rank = c.rank();
    // broadcast from every root
    for (int root = 0; root < size; ++root) {
      std::vector<int64_t> b(1000, rank == root ? 42 + root : -1);
      BroadcastOptions bo;
      bo.buffer = b.data();
      bo.count = b.size();
      bo.dtype = DataType::kInt64;
      bo.root = root;
      c.broadcast(bo);
      for (auto v : b) ASSERT_EQ(v, 42 + root);
    }
    // allgather, equal and varying counts
    std::vector<float> mine(5, float(rank)), all(5 * size, -1);
    AllgatherOptions ao;
    ao.send = mine.data();
    ao.recv = all.data();
    ao.count = 5;
    c.allgather(ao);
    for (int i = 0; i < 5 * size; ++i) ASSERT_EQ(all[i], float(i / 5));
    std::vector<size_t> counts(size);
    for (int r = 0; r < size; ++r) counts[r] = r % 3;  // includes zeros
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<float> vmine(counts[rank], float(rank)), vall(total, -1);
    AllgatherOptions vo;
    vo.send = vmine.data();
    vo.recv = vall.data();
    vo.counts = counts;
    c.allgather(vo);
    size_t at = 0;
    for (int r = 0; r < size; ++r) {
      for (size_t k = 0; k < counts[r]; ++k) ASSERT_EQ(vall[at++], float(r));
    }
    // reduce-scatter (average)
    std::vector<double> rs(3 * size), rsOut(3, -1);
    for (int i = 0; i < 3 * size; ++i) rs[i] = rank + i;
    ReduceScatterOptions ro;
    ro.send = rs.data();
    ro.recv = rsOut.data();
    ro.recvCount = 3;
    ro.dtype = DataType::kFloat64;
    ro.op = ReduceOp::kAverage;
    c.reduceScatter(ro);
    for (int k = 0; k < 3; ++k) {
      double expect = (size - 1) / 2.0 + rank * 3 + k;
      ASSERT_DOUBLE_EQ(rsOut[k], expect);
    }
    // alltoall
    std::vector<int32_t> s(2 * size), r2(2 * size, -1);
    for (int j = 0; j < size; ++j) s[2 * j] = s[2 * j + 1] = rank * 100 + j;
    AlltoallOptions to;
    to.send = s.data();
    to.recv = r2.data();
    to.countPerRank = 2;
    to.dtype = DataType::kInt32;
    c.alltoall(to);
    for (int i = 0; i < size; ++i) ASSERT_EQ(r2[2 * i], i * 100 + rank);
    c.barrier();
  });
}

TEST_P(CommunicatorTest, AsyncOperationsRunInOrder) {
  withCommunicators(n(), settings(), [&](Communicator& c) {
    std::vector<std::vector<float>> bufs(20, std::vector<float>(4096));
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 20; ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), float(k + c.rank()));
      AllreduceOptions o;
      o.send = o.recv = bufs[k].data();
      o.count = bufs[k].size();
      works.push_back(c.allreduceAsync(o));
    }
    works.push_back(c.barrierAsync());
    for (auto& w : works) w->wait();
    for (int k = 0; k < 20; ++k) {
      float expect = 0;
      for (int r = 0; r < c.size(); ++r) expect += float(k + r);
      ASSERT_EQ(bufs[k][0], expect);
      ASSERT_EQ(bufs[k][4095], expect);
    }
  });
}

TEST_P(CommunicatorTest, MismatchedCountsFailOnEveryRankAndCommunicatorRecovers) {
  std::atomic<int> failures{0};
  withCommunicators(n(), settings(), [&](Communicator& c) {
    std::vector<float> buf(100, 1);
    AllreduceOptions o;
    o.send = o.recv = buf.data();
    o.count = c.rank() == 1 ? 60 : 50;
    try {
      c.allreduce(o);
      ADD_FAILURE() << "rank " << c.rank() << ": mismatch not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
      std::string m = e.what();
      EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
      EXPECT_NE(m.find("count=50"), std::string::npos) << m;
      EXPECT_NE(m.find("count=60"), std::string::npos) << m;
      ++failures;
    }
    // Different dtypes.
    o.count = 10;
    o.dtype = c.rank() == 1 ? DataType::kFloat64 : DataType::kFloat32;
    EXPECT_THROW(c.allreduce(o), Error);
    // Different roots.
    BroadcastOptions b;
    b.buffer = buf.data();
    b.count = 4;
    b.root = c.rank() == 1 ? 1 : 0;
    try {
      c.broadcast(b);
      ADD_FAILURE() << "root mismatch not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_NE(std::string(e.what()).find("root=1"), std::string::npos) << e.what();
    }
    // Still usable.
    o.dtype = DataType::kFloat32;
    o.count = 100;
    std::fill(buf.begin(), buf.end(), 1.0f);
    c.allreduce(o);
    EXPECT_EQ(buf[99], float(c.size()));
  });
  EXPECT_EQ(failures.load(), n());
}

TEST_P(CommunicatorTest, InvalidArgumentOnOneRankFailsAllRanks) {
  withCommunicators(n(), settings(), [&](Communicator& c) {
    std::vector<float> buf(16, 1);
    AllreduceOptions o;
    o.send = c.rank() == 1 ? nullptr : buf.data();
    o.recv = buf.data();
    o.count = 16;
    try {
      c.allreduce(o);
      ADD_FAILURE() << "null buffer not detected on rank " << c.rank();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      std::string m = e.what();
      if (c.rank() == 1) {
        EXPECT_NE(m.find("send buffer is null but count is 16"), std::string::npos) << m;
      } else {
        EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
      }
    }
    o.send = buf.data();
    o.count = SIZE_MAX / 2;
    try {
      c.allreduce(o);
      ADD_FAILURE() << "overflow not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
    o.count = 16;
    o.algorithm = "nonsense";
    try {
      c.allreduce(o);
      ADD_FAILURE() << "bad algorithm not detected";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ring"), std::string::npos) << e.what();
    }
    BroadcastOptions b;
    b.buffer = buf.data();
    b.count = 1;
    b.root = c.size();
    EXPECT_THROW(c.broadcast(b), Error);
    c.barrier();
  });
}

// A segmented allreduce gives, bit for bit, what the contiguous one gives
// on the same vector, with every rank cutting the vector differently
// (empty segments included), segments in place and out of place, through
// the shm algorithm's direct path and the packed path of the others, on the
// inline, single-chunk and multi-chunk sizes.
TEST_P(CommunicatorTest, SegmentedAllreduceMatchesContiguous) {
  // (algorithm, KOLO_SHM_STORES): the shm algorithm with each kind of
  // staging stores, and with the measured choice.
  std::vector<std::pair<std::string, std::string>> runs = {
      {"", "auto"}, {"ring", "auto"}, {"rhd", "auto"}};
  if (std::string(GetParam().transport) != "tcp") {
    for (const char* stores : {"plain", "streaming", "auto"})
      runs.push_back({"shm", stores});
  }
  for (const auto& [algo, stores] : runs) {
    Settings s = settings();
    s.shmStores = stores;
    // The last count spans two pipeline chunks of the shm algorithm (1 MiB).
    for (size_t count :
         {size_t{5}, size_t{20011}, size_t{(1 << 17) + 77}, size_t{(3 << 17) + 77}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        withCommunicators(n(), s, [&](Communicator& c) {
          std::vector<float> in(count), expect(count);
          for (size_t i = 0; i < count; ++i)
            in[i] = float((c.rank() * 7 + i * 13) % 101) * 0.37f;
          AllreduceOptions o;
          o.send = in.data();
          o.recv = expect.data();
          o.count = count;
          o.op = op;
          o.algorithm = algo;
          c.allreduce(o);

          // Rank-dependent cuts: lengths 0, 1, 2r+3, 997, ... repeating.
          std::vector<float> work = in, out(count, -1);
          std::vector<AllreduceSegment> segs;
          const size_t lengths[] = {0, 1, size_t(2 * c.rank() + 3), 997, 65536 + 5};
          for (size_t at = 0, k = 0; at < count; ++k) {
            const size_t len = std::min(lengths[(k + c.rank()) % 5], count - at);
            const bool inPlace = k % 2 == 0;
            segs.push_back({inPlace ? work.data() + at : in.data() + at,
                            inPlace ? work.data() + at : out.data() + at, len});
            if (inPlace) std::fill(out.begin() + at, out.begin() + at + len, 0.0f);
            at += len;
          }
          AllreduceOptions so;
          so.count = count;
          so.op = op;
          so.algorithm = algo;
          so.segments = segs.data();
          so.segmentCount = segs.size();
          c.allreduce(so);
          size_t at = 0;
          for (size_t k = 0; k < segs.size(); ++k) {
            const float* got = static_cast<const float*>(segs[k].recv);
            for (size_t i = 0; i < segs[k].count; ++i) {
              ASSERT_EQ(std::memcmp(&got[i], &expect[at + i], sizeof(float)), 0)
                  << "algorithm '" << algo << "' stores " << stores << " op "
                  << toString(op) << " count " << count << " segment " << k << " element "
                  << at + i << ": " << got[i] << " != " << expect[at + i];
            }
            at += segs[k].count;
          }
          // The out-of-place segments left their inputs alone.
          for (size_t k = 1; k < segs.size(); k += 2) {
            const float* src = static_cast<const float*>(segs[k].send);
            const size_t base = static_cast<size_t>(src - in.data());
            for (size_t i = 0; i < segs[k].count; ++i) {
              ASSERT_EQ(src[i], float((c.rank() * 7 + (base + i) * 13) % 101) * 0.37f);
            }
          }
        });
      }
    }
  }
}

TEST_P(CommunicatorTest, SegmentedAllreduceBadArgumentsFailEveryRank) {
  withCommunicators(n(), settings(), [&](Communicator& c) {
    std::vector<float> a(8, 1), b(8, 1);
    AllreduceSegment segs[2] = {{a.data(), a.data(), 8}, {b.data(), b.data(), 8}};
    AllreduceOptions o;
    o.segments = segs;
    o.segmentCount = 2;
    o.count = c.rank() == 1 ? 15 : 16;
    try {
      c.allreduce(o);
      ADD_FAILURE() << "count 15 against segments of 16 not detected";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      const std::string m = e.what();
      if (c.rank() == 1) {
        EXPECT_NE(m.find("the 2 segments hold 16 elements, count is 15"),
                  std::string::npos)
            << m;
      } else {
        EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
      }
    }
    o.count = 16;
    segs[1].recv = c.rank() == 0 ? nullptr : b.data();
    try {
      c.allreduce(o);
      ADD_FAILURE() << "null segment buffer not detected";
    } catch (const Error& e) {
      if (c.rank() == 0) {
        EXPECT_NE(
            std::string(e.what()).find("segment 1 has a null recv buffer but count 8"),
            std::string::npos)
            << e.what();
      }
    }
    segs[1].recv = b.data();
    o.send = a.data();
    EXPECT_THROW(c.allreduce(o), Error);  // send with segments
    o.send = nullptr;
    c.allreduce(o);  // the communicator still works
    EXPECT_EQ(a[0], float(c.size()));
    EXPECT_EQ(b[7], float(c.size()));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommunicatorTest,
                         ::testing::Values(Param{2, "auto"}, Param{3, "auto"},
                                           Param{4, "auto"}, Param{2, "tcp"},
                                           Param{3, "tcp"}),
                         [](const auto& info) {
                           return std::string(info.param.transport) + "_" +
                                  std::to_string(info.param.ranks);
                         });

// Ranks on pretend hosts (KOLO_HOST_ID): layout facts, and the allreduce
// algorithms that span hosts, hierarchical included, even and uneven.
TEST(CommunicatorHosts, LayoutAndHierarchicalAllreduce) {
  struct Case {
    int n;
    std::vector<int> host;  // host of each rank
  };
  for (const Case& k :
       {Case{4, {0, 0, 1, 1}}, Case{6, {0, 1, 2, 0, 1, 2}}, Case{5, {0, 0, 0, 1, 1}}}) {
    test::withCommunicators(
        k.n, test::testSettings(),
        [&](Communicator& c) {
          const Layout& l = c.layout();
          int hosts = *std::max_element(k.host.begin(), k.host.end()) + 1;
          EXPECT_EQ(l.crossSize, hosts);
          EXPECT_EQ(l.crossRank, k.host[l.rank]);
          EXPECT_EQ(l.localSize,
                    std::count(k.host.begin(), k.host.end(), k.host[l.rank]));
          for (const char* algo : {"hier", "ring", "rhd", "tree", ""}) {
            for (size_t count : {size_t{0}, size_t{5}, size_t{(1 << 20) + 11}}) {
              std::vector<float> buf(count);
              for (size_t i = 0; i < count; ++i) buf[i] = float(l.rank + 1 + i % 3);
              AllreduceOptions o;
              o.send = o.recv = buf.data();
              o.count = count;
              o.op = ReduceOp::kAverage;
              o.algorithm = algo;
              c.allreduce(o);
              for (size_t i = 0; i < count; ++i) {
                float expect = (k.n + 1) / 2.0f + float(i % 3);
                ASSERT_NEAR(buf[i], expect, 1e-5)
                    << algo << " count " << count << " i " << i;
              }
            }
          }
          // The selection's choice is the scale model's (predict_test).
          const std::string large = c.allreduceAlgorithm(64 << 20);
          EXPECT_TRUE(large == "hier" || large == "rhd" || large == "ring") << large;
          c.barrier();
        },
        [&](int r) { return "host" + std::to_string(k.host[r]); });
  }
}

// KOLO_HIERARCHICAL_ALLREDUCE (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE):
// every size uses hier across hosts; one host keeps the table (as Horovod
// ignores it there); KOLO_ALLREDUCE_ALGO wins.
TEST(CommunicatorTest, HierarchicalAllreduceSettingAppliesAcrossHostsOnly) {
  Settings s = test::testSettings();
  s.hierarchicalAllreduce = 1;
  test::withCommunicators(2, s, [](Communicator& c) {
    EXPECT_EQ(c.allreduceAlgorithm(64), "shm");
    c.barrier();
  });
  test::withCommunicators(
      4, s,
      [](Communicator& c) {
        EXPECT_EQ(c.allreduceAlgorithm(64), "hier");  // the table: tree
        EXPECT_EQ(c.allreduceAlgorithm(64 << 20), "hier");
        std::vector<float> buf(5, float(c.rank()));
        AllreduceOptions o;
        o.send = o.recv = buf.data();
        o.count = buf.size();
        c.allreduce(o);
        EXPECT_EQ(buf[4], 6.0f);
      },
      [](int r) { return "host" + std::to_string(r / 2); });
  s.allreduceAlgorithm = "ring";
  test::withCommunicators(
      4, s, [](Communicator& c) { EXPECT_EQ(c.allreduceAlgorithm(64), "ring"); },
      [](int r) { return "host" + std::to_string(r / 2); });
}

TEST(CommunicatorSingle, BadShmStoresIsAnErrorNamingTheVariable) {
  CommunicatorConfig config;
  Settings s = test::testSettings();
  s.shmStores = "fast";
  try {
    api::CommunicatorImpl c(config, s);
    FAIL() << "KOLO_SHM_STORES=fast was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(
        std::string(e.what()).find("KOLO_SHM_STORES='fast' (expected auto, plain or "
                                   "streaming)"),
        std::string::npos)
        << e.what();
  }
}

TEST(CommunicatorSingle, OneRankWorksWithoutRendezvous) {
  CommunicatorConfig config;
  api::CommunicatorImpl c(config, test::testSettings());
  std::vector<float> in(10, 3), out(10, 0);
  AllreduceOptions o;
  o.send = in.data();
  o.recv = out.data();
  o.count = 10;
  o.op = ReduceOp::kAverage;
  c.allreduce(o);
  EXPECT_EQ(out[9], 3.0f);
  c.barrier();
}

}  // namespace
}  // namespace kolo
