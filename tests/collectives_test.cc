// The collective algorithms on the grid: every algorithm x world sizes
// 1, 2, 3, 4, 7, 8 (ranks as threads, each with its own real transport) x
// every dtype and op x counts 0, 1, 7, 1023 and one over 1 MiB, in place and
// out of place, checked against a reference each rank computes locally with
// its own scalar code.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/registry.h"
#include "support/thread_world.h"

namespace kolo::collectives {
namespace {

using test::ThreadWorld;
using Kind = ThreadWorld::Kind;

constexpr DataType kDataTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
// kAverage is reduced as kSum by the algorithms (the caller divides).
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};
constexpr size_t kCounts[] = {0, 1, 7, 1023};
constexpr size_t kOneMiB = 1 << 20;
constexpr int kWorldSizes[] = {1, 2, 3, 4, 7, 8};

// ---- scalar reference code: float16 / bfloat16 encodings ---------------

double halfToDouble(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), -24);
  } else if (exp == 31) {
    v = man != 0 ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<double>(man | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

// Exact for the values the tests use (checked by the caller).
uint16_t doubleToHalf(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < -14) return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  long man = std::lround(std::ldexp(a, 10 - e));
  if (man == 2048) {
    man = 1024;
    ++e;
  }
  return sign | static_cast<uint16_t>((e + 15) << 10) | static_cast<uint16_t>(man - 1024);
}

double bfloat16ToDouble(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t doubleToBfloat16(double d) {
  const float f = static_cast<float>(d);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact: test values have <= 8 bits
}

void store(DataType t, void* base, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = doubleToHalf(v); break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = doubleToBfloat16(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUInt8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
  }
}

double load(DataType t, const void* base, size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kFloat16: return halfToDouble(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16:
      return bfloat16ToDouble(static_cast<const uint16_t*>(base)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(base)[i];
  }
  return NAN;
}

bool isFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

// Unit roundoff of each float type.
double roundoff(DataType t) {
  switch (t) {
    case DataType::kFloat32: return std::ldexp(1.0, -24);
    case DataType::kFloat64: return std::ldexp(1.0, -53);
    case DataType::kFloat16: return std::ldexp(1.0, -11);
    case DataType::kBFloat16: return std::ldexp(1.0, -8);
    default: return 0;
  }
}

// The input of `rank` at element i: exactly representable in every dtype,
// different across ranks and positions, and such that no reduction over up
// to 8 ranks overflows (uint8 sums stay below 256, integer products small).
double inputValue(int rank, size_t i, DataType t, ReduceOp op) {
  const size_t h = static_cast<size_t>(rank) * 131 + i * 17 + 7;
  if (op == ReduceOp::kProduct) {
    const int k = static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3) % 5);
    if (t == DataType::kUInt8) return k == 1 ? 2 : 1;
    static const double kFloat[] = {1, 2, -1, 0.5, 1};
    static const double kInt[] = {1, 2, -1, 1, 1};
    return isFloat(t) ? kFloat[k] : kInt[k];
  }
  const double base = static_cast<double>(h % 97);
  if (t == DataType::kUInt8) return static_cast<double>(h % 32);
  if (isFloat(t)) return (base - 48) / 8;
  return base - 48;
}

struct Expected {
  double value;
  double tolerance;
};

Expected reference(int n, size_t i, DataType t, ReduceOp op) {
  double acc = inputValue(0, i, t, op);
  double mag = std::fabs(acc);
  for (int r = 1; r < n; ++r) {
    const double v = inputValue(r, i, t, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        mag += std::fabs(v);
        break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct:
        acc *= v;
        mag = std::fabs(acc);
        break;
    }
  }
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) mag = 0;
  // Each of at most n roundings of a partial result errs by <= u * |partial|.
  return {acc, 2.0 * n * roundoff(t) * mag};
}

// A buffer with guard bytes after the payload, to catch overruns.
class Buffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;
  explicit Buffer(size_t bytes, uint8_t fill = 0xCD)
      : bytes_(bytes), data_(bytes + kGuard, fill) {
    std::memset(data_.data() + bytes, kGuardByte, kGuard);
  }
  uint8_t* data() { return data_.data(); }
  size_t bytes() const { return bytes_; }
  bool guardIntact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (data_[bytes_ + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<uint8_t> data_;
};

std::string describe(std::string_view algo, int rank, int n, DataType t, ReduceOp op,
                     size_t count, bool inPlace) {
  std::ostringstream os;
  os << algo << " rank " << rank << "/" << n << " " << toString(t) << " " << toString(op)
     << " count " << count << (inPlace ? " in place" : " out of place");
  return os.str();
}

// Runs one allreduce on rank r and checks its output; returns false (after
// reporting) on a mismatch.
bool allreduceCase(ThreadWorld& w, int r, const AllreduceAlgorithm& algo, DataType t,
                   ReduceOp op, size_t count, bool inPlace) {
  const int n = w.size();
  const size_t es = elementSize(t);
  Buffer send(count * es);
  for (size_t i = 0; i < count; ++i) store(t, send.data(), i, inputValue(r, i, t, op));
  Buffer out(count * es);
  Buffer& recv = inPlace ? send : out;
  Context ctx = w.context(r);
  algo.run(ctx, AllreduceArgs{send.data(), recv.data(), count, t, op});
  const std::string what = describe(algo.name, r, n, t, op, count, inPlace);
  EXPECT_TRUE(recv.guardIntact()) << what << ": wrote past the end of recv";
  for (size_t i = 0; i < count; ++i) {
    const Expected e = reference(n, i, t, op);
    const double got = load(t, recv.data(), i);
    if (!(std::fabs(got - e.value) <= e.tolerance)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got << ", expected "
                    << e.value << " (tolerance " << e.tolerance << ")";
      return false;
    }
  }
  return true;
}

// ---- the allreduce grid ---------------------------------------------------

struct GridParam {
  std::string algorithm;
  Kind kind;
  std::vector<int> hostOf;  // one entry per rank
  std::string label;
};

std::vector<int> oneHost(int n) {
  return std::vector<int>(n, 0);
}

std::vector<GridParam> gridParams() {
  std::vector<GridParam> params;
  for (const char* algo : {"ring", "rhd", "tree"}) {
    for (int n : kWorldSizes) {
      params.push_back({algo, Kind::kTcp, oneHost(n), "tcp" + std::to_string(n)});
    }
    for (int n : {3, 4}) {
      params.push_back({algo, Kind::kShm, oneHost(n), "shm" + std::to_string(n)});
    }
  }
  for (int n : kWorldSizes) {
    params.push_back({"shm", Kind::kShm, oneHost(n), "shm" + std::to_string(n)});
  }
  // Pretend hosts for the hierarchical algorithm: ranks of a host need not
  // be contiguous, and hosts may hold different numbers of ranks.
  const std::vector<std::pair<std::string, std::vector<int>>> layouts = {
      {"1host_1", {0}},
      {"2hosts_1x2", {0, 1}},
      {"2hosts_2_1", {0, 0, 1}},
      {"2hosts_2x2", {0, 0, 1, 1}},
      {"2hosts_interleaved", {0, 1, 0, 1}},
      {"3hosts_2x3", {0, 0, 1, 1, 2, 2}},
      {"3hosts_3_2_2", {0, 0, 0, 1, 1, 2, 2}},
      {"2hosts_4x2", {0, 0, 0, 0, 1, 1, 1, 1}},
  };
  for (const auto& [label, hosts] : layouts) {
    params.push_back({"hier", Kind::kHosts, hosts, label});
  }
  // The same schedule with tcp inside the pretend hosts too.
  params.push_back({"hier", Kind::kTcpHosts, {0, 0, 1, 1, 2, 2}, "tcp_3hosts_2x3"});
  params.push_back({"hier", Kind::kTcpHosts, {0, 1, 0, 0}, "tcp_2hosts_3_1"});
  return params;
}

class AllreduceGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(AllreduceGrid, MatchesReference) {
  const GridParam& p = GetParam();
  ThreadWorld w(p.kind, static_cast<int>(p.hostOf.size()), p.hostOf);
  w.run([&](int r) {
    Context probe = w.context(r);
    const AllreduceAlgorithm& algo = findAllreduce(p.algorithm, probe);
    for (DataType t : kDataTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : kCounts) {
          for (bool inPlace : {false, true}) {
            allreduceCase(w, r, algo, t, op, count, inPlace);
          }
        }
      }
    }
    // Over 1 MiB, on a few dtype/op pairs (the pipeline's many chunks).
    allreduceCase(w, r, algo, DataType::kFloat32, ReduceOp::kSum, kOneMiB / 4 + 37,
                  false);
    allreduceCase(w, r, algo, DataType::kBFloat16, ReduceOp::kSum, kOneMiB / 2 + 11,
                  true);
    allreduceCase(w, r, algo, DataType::kInt64, ReduceOp::kMax, kOneMiB / 8 + 5, true);
  });
}

INSTANTIATE_TEST_SUITE_P(Collectives, AllreduceGrid, ::testing::ValuesIn(gridParams()),
                         [](const ::testing::TestParamInfo<GridParam>& info) {
                           return info.param.algorithm + "_" + info.param.label;
                         });

// ---- the other collectives -------------------------------------------------

// A byte pattern that differs by rank, block and position.
uint8_t patternByte(int rank, int block, size_t i) {
  return static_cast<uint8_t>(rank * 37 + block * 101 + i * 7 + (i >> 8) * 13 + 1);
}

struct WorldParam {
  Kind kind;
  int n;
};

std::vector<WorldParam> worldParams() {
  std::vector<WorldParam> params;
  for (int n : kWorldSizes) params.push_back({Kind::kTcp, n});
  for (int n : {2, 3}) params.push_back({Kind::kShm, n});
  return params;
}

std::string worldName(const ::testing::TestParamInfo<WorldParam>& info) {
  return std::string(ThreadWorld::name(info.param.kind)) + std::to_string(info.param.n);
}

class CollectiveWorld : public ::testing::TestWithParam<WorldParam> {
 protected:
  ThreadWorld& world() {
    if (!world_) world_ = std::make_unique<ThreadWorld>(GetParam().kind, GetParam().n);
    return *world_;
  }

 private:
  std::unique_ptr<ThreadWorld> world_;
};

TEST_P(CollectiveWorld, BroadcastFromEveryRoot) {
  ThreadWorld& w = world();
  const int n = w.size();
  w.run([&](int r) {
    for (int root = 0; root < n; ++root) {
      std::vector<size_t> counts = {0, 1, 7, 1023};
      if (root == 0 || root == n - 1) counts.push_back(kOneMiB / 4 + 3);
      for (size_t count : counts) {
        const DataType t = count % 2 ? DataType::kFloat32 : DataType::kFloat16;
        const size_t bytes = count * elementSize(t);
        Buffer buf(bytes);
        if (r == root) {
          for (size_t i = 0; i < bytes; ++i) buf.data()[i] = patternByte(root, 0, i);
        }
        Context ctx = w.context(r);
        broadcastBinomial(ctx, BroadcastArgs{buf.data(), count, t, root});
        EXPECT_TRUE(buf.guardIntact());
        for (size_t i = 0; i < bytes; ++i) {
          if (buf.data()[i] != patternByte(root, 0, i)) {
            ADD_FAILURE() << "broadcast root " << root << " count " << count << " rank "
                          << r << ": byte " << i << " differs";
            break;
          }
        }
      }
    }
  });
}

void allgatherCase(ThreadWorld& w, int r, const std::vector<size_t>& counts, DataType t,
                   bool inPlace) {
  const int n = w.size();
  const size_t es = elementSize(t);
  std::vector<size_t> displs(n + 1, 0);
  for (int i = 0; i < n; ++i) displs[i + 1] = displs[i] + counts[i];
  Buffer recv(displs[n] * es);
  Buffer send(counts[r] * es);
  uint8_t* mine = inPlace ? recv.data() + displs[r] * es : send.data();
  for (size_t i = 0; i < counts[r] * es; ++i) mine[i] = patternByte(r, 0, i);
  Context ctx = w.context(r);
  allgatherRing(ctx, AllgatherArgs{mine, recv.data(), counts, t});
  EXPECT_TRUE(recv.guardIntact());
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < counts[q] * es; ++i) {
      if (recv.data()[displs[q] * es + i] != patternByte(q, 0, i)) {
        ADD_FAILURE() << "allgather rank " << r << "/" << n
                      << (inPlace ? " in" : " out of") << " place: block of rank " << q
                      << " (" << counts[q] << " elements) differs at byte " << i;
        return;
      }
    }
  }
}

TEST_P(CollectiveWorld, AllgatherEqualAndVaryingCounts) {
  ThreadWorld& w = world();
  const int n = w.size();
  w.run([&](int r) {
    for (bool inPlace : {false, true}) {
      for (size_t count : kCounts) {
        allgatherCase(w, r, std::vector<size_t>(n, count), DataType::kFloat32, inPlace);
      }
      // Varying, with empty blocks (every third rank contributes nothing).
      std::vector<size_t> varying(n);
      for (int i = 0; i < n; ++i) varying[i] = i % 3 == 1 ? 0 : (i * 37 + 5) % 300;
      allgatherCase(w, r, varying, DataType::kFloat16, inPlace);
      allgatherCase(w, r, varying, DataType::kUInt8, inPlace);
    }
    allgatherCase(w, r, std::vector<size_t>(n, kOneMiB / 8 / n + 1), DataType::kFloat64,
                  false);
  });
}

void reduceScatterCase(ThreadWorld& w, int r, DataType t, ReduceOp op, size_t recvCount,
                       bool inPlace) {
  const int n = w.size();
  const size_t es = elementSize(t);
  const size_t total = recvCount * n;
  Buffer send(total * es);
  for (size_t i = 0; i < total; ++i) store(t, send.data(), i, inputValue(r, i, t, op));
  Buffer out(recvCount * es);
  uint8_t* recv = inPlace ? send.data() + r * recvCount * es : out.data();
  Context ctx = w.context(r);
  reduceScatterRing(ctx, ReduceScatterArgs{send.data(), recv, recvCount, t, op});
  EXPECT_TRUE(send.guardIntact() && out.guardIntact());
  for (size_t i = 0; i < recvCount; ++i) {
    const Expected e = reference(n, r * recvCount + i, t, op);
    const double got = load(t, recv, i);
    if (!(std::fabs(got - e.value) <= e.tolerance)) {
      ADD_FAILURE() << "reduce-scatter "
                    << describe("ring", r, n, t, op, recvCount, inPlace) << ": element "
                    << i << " is " << got << ", expected " << e.value;
      return;
    }
  }
}

TEST_P(CollectiveWorld, ReduceScatter) {
  ThreadWorld& w = world();
  w.run([&](int r) {
    for (DataType t : kDataTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : kCounts) {
          for (bool inPlace : {false, true})
            reduceScatterCase(w, r, t, op, count, inPlace);
        }
      }
    }
    reduceScatterCase(w, r, DataType::kFloat32, ReduceOp::kSum,
                      kOneMiB / 4 / w.size() + 3, false);
  });
}

TEST_P(CollectiveWorld, Alltoall) {
  ThreadWorld& w = world();
  const int n = w.size();
  w.run([&](int r) {
    for (bool inPlace : {false, true}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}}) {
        const DataType t = count % 2 ? DataType::kInt32 : DataType::kUInt8;
        const size_t block = count * elementSize(t);
        Buffer send(n * block), out(n * block);
        for (int j = 0; j < n; ++j) {
          for (size_t i = 0; i < block; ++i)
            send.data()[j * block + i] = patternByte(r, j, i);
        }
        uint8_t* recv = inPlace ? send.data() : out.data();
        Context ctx = w.context(r);
        alltoallPairwise(ctx, AlltoallArgs{send.data(), recv, count, t});
        EXPECT_TRUE(send.guardIntact() && out.guardIntact());
        bool ok = true;
        for (int q = 0; q < n && ok; ++q) {
          for (size_t i = 0; i < block; ++i) {
            if (recv[q * block + i] != patternByte(q, r, i)) {
              ADD_FAILURE() << "alltoall rank " << r << "/" << n << " count " << count
                            << (inPlace ? " in place" : "") << ": block from rank " << q
                            << " differs at byte " << i;
              ok = false;
              break;
            }
          }
        }
      }
    }
  });
}

TEST_P(CollectiveWorld, BarrierHoldsEveryoneBack) {
  ThreadWorld& w = world();
  const int n = w.size();
  std::atomic<int> arrived{0};
  constexpr int kRounds = 5;
  w.run([&](int r) {
    for (int round = 0; round < kRounds; ++round) {
      // One rank is late each round; nobody may leave before it arrives.
      if (r == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      arrived.fetch_add(1);
      Context ctx = w.context(r);
      barrierDissemination(ctx);
      EXPECT_GE(arrived.load(), (round + 1) * n) << "rank " << r << " round " << round;
      // Second barrier so the next round's arrivals cannot be counted early.
      Context ctx2 = w.context(r);
      barrierDissemination(ctx2);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Collectives, CollectiveWorld, ::testing::ValuesIn(worldParams()),
                         worldName);

// ---- registry and selection ----------------------------------------------

TEST(AllreduceRegistry, UnknownNameListsTheValidOnes) {
  ThreadWorld w(Kind::kTcp, 1);
  Context ctx = w.context(0);
  try {
    findAllreduce("ringg", ctx);
    FAIL() << "no error for an unknown name";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ringg"), std::string::npos) << msg;
    for (const auto& a : allreduceAlgorithms()) {
      EXPECT_NE(msg.find(std::string(a.name)), std::string::npos) << msg;
    }
  }
}

TEST(AllreduceRegistry, UnusableAlgorithmSaysWhy) {
  ThreadWorld w(Kind::kTcp, 2);
  Context ctx = w.context(0);
  for (const char* name : {"hier", "shm"}) {
    try {
      findAllreduce(name, ctx);
      FAIL() << name << " accepted without host groups / shared memory";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("needs"), std::string::npos) << e.what();
    }
  }
  for (const char* name : {"ring", "rhd", "tree"}) {
    EXPECT_EQ(findAllreduce(name, ctx).name, name);
  }
}

// The selection is the scale model's (tests/predict_selection_test.cc checks that it
// is exactly the model's choice and the same on every rank); here, what
// any sane constants give: the latency-bound tree for tiny vectors, a
// bandwidth-optimal algorithm (never the tree's log2(n) whole vectors) for
// large ones, hier among the candidates only across hosts.
TEST(AllreduceRegistry, SelectionFollowsSizeAndTopology) {
  {
    ThreadWorld flat(Kind::kTcp, 4);
    Context ctx = flat.context(0);
    EXPECT_EQ(selectAllreduce(8, ctx).name, "tree");
    const std::string_view large = selectAllreduce(64 << 20, ctx).name;
    EXPECT_TRUE(large == "ring" || large == "rhd") << large;
  }
  {
    ThreadWorld hosts(Kind::kHosts, 4, {0, 0, 1, 1});
    Context ctx = hosts.context(0);
    EXPECT_EQ(selectAllreduce(8, ctx).name, "tree");
    const std::string_view large = selectAllreduce(64 << 20, ctx).name;
    EXPECT_TRUE(large == "ring" || large == "rhd" || large == "hier") << large;
  }
  {
    ThreadWorld host(Kind::kShm, 2);
    Context ctx = host.context(1);
    EXPECT_EQ(selectAllreduce(8, ctx).name, "shm");
    EXPECT_EQ(selectAllreduce(64 << 20, ctx).name, "shm");
  }
}

TEST(AllreduceRegistry, AverageIsLeftToTheCaller) {
  // The Communicator reduces kAverage as kSum and divides; an algorithm
  // handed kAverage refuses before sending anything.
  ThreadWorld w(Kind::kHosts, 1, {0});
  float x = 1, y = 0;
  for (const auto& a : allreduceAlgorithms()) {
    Context ctx = w.context(0);
    if (!a.usable(ctx)) continue;
    EXPECT_THROW(
        a.run(ctx, AllreduceArgs{&x, &y, 1, DataType::kFloat32, ReduceOp::kAverage}),
        Error)
        << a.name;
  }
}

// ---- GroupTransport ------------------------------------------------------

TEST(GroupTransport, MapsRanksBothWays) {
  // 5 ranks; the group is ranks {4, 1, 3} in that order.
  ThreadWorld w(Kind::kTcp, 5);
  const std::vector<int> members = {4, 1, 3};
  w.run([&](int r) {
    auto it = std::find(members.begin(), members.end(), r);
    if (it == members.end()) {
      EXPECT_THROW(transport::GroupTransport(w.transport(r), members), Error);
      return;
    }
    transport::GroupTransport g(w.transport(r), members);
    const int me = static_cast<int>(it - members.begin());
    EXPECT_EQ(g.rank(), me);
    EXPECT_EQ(g.size(), 3);
    // Everyone sends its group rank to group rank 0, which receives from
    // any source and must see group ranks.
    int value = me * 10;
    if (me != 0) {
      g.send(0, 7, &value, sizeof value);
    } else {
      std::vector<bool> seen(3, false);
      for (int k = 0; k < 2; ++k) {
        int got = -1;
        auto req = g.irecv(transport::kAnySource, 7, &got, sizeof got);
        g.wait(req);
        ASSERT_GE(req->peer, 1);
        ASSERT_LE(req->peer, 2);
        EXPECT_EQ(got, req->peer * 10);
        seen[req->peer] = true;
      }
      EXPECT_TRUE(seen[1] && seen[2]);
    }
    // A ring inside the group with named peers.
    int out = me, in = -1;
    g.sendRecv((me + 1) % 3, &out, sizeof out, (me + 2) % 3, &in, sizeof in, 8);
    EXPECT_EQ(in, (me + 2) % 3);
    EXPECT_THROW(g.isend(3, 9, &out, sizeof out), Error);
  });
}

TEST(GroupTransport, TimeoutNamesGlobalRanks) {
  auto ranks = test::makeTcpTransports(3, [](transport::TcpTransport::Options& o) {
    o.timeout = std::chrono::milliseconds(300);
  });
  transport::GroupTransport g(*ranks[0], {2, 0});  // we are group rank 1
  int x = 0;
  try {
    g.recv(0, 1, &x, sizeof x);  // group rank 0 = global rank 2 never sends
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_EQ(e.peer(), 2);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 timed out"), std::string::npos) << msg;
    EXPECT_NE(msg.find("for rank 2"), std::string::npos) << msg;
  }
}

TEST(GroupTransport, RejectsBadMembers) {
  ThreadWorld w(Kind::kTcp, 3);
  EXPECT_THROW(transport::GroupTransport(w.transport(0), {0, 3}), Error);
  EXPECT_THROW(transport::GroupTransport(w.transport(0), {0, 1, 0}), Error);
  EXPECT_THROW(transport::GroupTransport(w.transport(0), {1, 2}), Error);
}

}  // namespace
}  // namespace kolo::collectives
