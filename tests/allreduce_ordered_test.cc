// The "ordered" allreduce: exact results for every dtype and op (compared
// bit for bit with a serial rank-order reduction computed here), and
// determinism: the same per-element inputs give the same bits whatever the
// buffer length, the element's offset, in place or not, and the topology.
// Also its selection by name through the Communicator, and that the
// automatic table never picks it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "support/comm_world.h"
#include "support/thread_world.h"

namespace kolo::collectives {
namespace {

using test::ThreadWorld;
using Kind = ThreadWorld::Kind;

constexpr DataType kDataTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// The input of `rank` at element i, as the raw bits of the dtype: varied
// values (not exactly summable in float types), never NaN or -0, products
// kept within range.
void storeInput(DataType t, void* base, size_t i, int rank, ReduceOp op) {
  const uint64_t h = mix(i * 1000003 + static_cast<uint64_t>(rank) * 7919 + 17);
  const double small = static_cast<double>(h % 2001) - 1000.0;  // -1000..1000
  double v;
  if (op == ReduceOp::kProduct) {
    static const double kFactors[] = {0.5, 1.25, -1.5, 2.0, 0.75, -1.0, 1.1};
    v = kFactors[h % 7];
  } else {
    v = small * 0.0123 + (h % 3 == 0 ? 1e4 : 0);
  }
  if (v == 0) v = 0.0;  // no -0
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v * 1.0000001; break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[i] = floatToHalf(static_cast<float>(v / 16));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = floatToBfloat16(static_cast<float>(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(h);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(h);
      break;
    case DataType::kUInt8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(h);
      break;
  }
}

template <typename T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return b > a ? b : a;
  }
  return a;
}

// Integers wrap: computed in the unsigned type of the same width.
template <typename S, typename U>
S combineInt(S a, S b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return static_cast<S>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProduct:
      return static_cast<S>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return b > a ? b : a;
  }
  return a;
}

// The serial reduction of element i over ranks 0..n-1 in that order, written
// to out[0] (one element of dtype t): float16 / bfloat16 accumulate in
// float32 and round once.
void serialReference(DataType t, ReduceOp op, const std::vector<const uint8_t*>& inputs,
                     size_t i, void* out) {
  const int n = static_cast<int>(inputs.size());
  switch (t) {
    case DataType::kFloat32: {
      float acc = reinterpret_cast<const float*>(inputs[0])[i];
      for (int r = 1; r < n; ++r)
        acc = combine(acc, reinterpret_cast<const float*>(inputs[r])[i], op);
      std::memcpy(out, &acc, 4);
      break;
    }
    case DataType::kFloat64: {
      double acc = reinterpret_cast<const double*>(inputs[0])[i];
      for (int r = 1; r < n; ++r)
        acc = combine(acc, reinterpret_cast<const double*>(inputs[r])[i], op);
      std::memcpy(out, &acc, 8);
      break;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      auto widen = t == DataType::kFloat16 ? halfToFloat : bfloat16ToFloat;
      float acc = widen(reinterpret_cast<const uint16_t*>(inputs[0])[i]);
      for (int r = 1; r < n; ++r)
        acc = combine(acc, widen(reinterpret_cast<const uint16_t*>(inputs[r])[i]), op);
      const uint16_t bits =
          t == DataType::kFloat16 ? floatToHalf(acc) : floatToBfloat16(acc);
      std::memcpy(out, &bits, 2);
      break;
    }
    case DataType::kInt32: {
      int32_t acc = reinterpret_cast<const int32_t*>(inputs[0])[i];
      for (int r = 1; r < n; ++r)
        acc = combineInt<int32_t, uint32_t>(
            acc, reinterpret_cast<const int32_t*>(inputs[r])[i], op);
      std::memcpy(out, &acc, 4);
      break;
    }
    case DataType::kInt64: {
      int64_t acc = reinterpret_cast<const int64_t*>(inputs[0])[i];
      for (int r = 1; r < n; ++r)
        acc = combineInt<int64_t, uint64_t>(
            acc, reinterpret_cast<const int64_t*>(inputs[r])[i], op);
      std::memcpy(out, &acc, 8);
      break;
    }
    case DataType::kUInt8: {
      uint8_t acc = inputs[0][i];
      for (int r = 1; r < n; ++r)
        acc = combineInt<uint8_t, uint8_t>(acc, inputs[r][i], op);
      *static_cast<uint8_t*>(out) = acc;
      break;
    }
  }
}

struct OrderedParam {
  Kind kind;
  std::vector<int> hostOf;
  std::string label;
};

class OrderedGrid : public ::testing::TestWithParam<OrderedParam> {};

// Every rank builds every rank's inputs (they are a function of rank and
// index), runs the allreduce on its own, and compares bit for bit.
TEST_P(OrderedGrid, MatchesSerialRankOrder) {
  const OrderedParam& p = GetParam();
  const int n = static_cast<int>(p.hostOf.size());
  ThreadWorld w(p.kind, n, p.hostOf);
  std::vector<size_t> counts = {0,
                                1,
                                static_cast<size_t>(n - 1),
                                static_cast<size_t>(n),
                                static_cast<size_t>(n + 1),
                                1023};
  w.run([&](int r) {
    Context probe = w.context(r);
    const AllreduceAlgorithm& algo = findAllreduce("ordered", probe);
    auto runCase = [&](DataType t, ReduceOp op, size_t count, bool inPlace) {
      const size_t es = elementSize(t);
      std::vector<std::vector<uint8_t>> inputs(n, std::vector<uint8_t>(count * es + 1));
      std::vector<const uint8_t*> ptrs(n);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) storeInput(t, inputs[q].data(), i, q, op);
        ptrs[q] = inputs[q].data();
      }
      std::vector<uint8_t> send = inputs[r];
      std::vector<uint8_t> out(count * es + 1, 0xCD);
      uint8_t* recv = inPlace ? send.data() : out.data();
      Context ctx = w.context(r);
      algo.run(ctx, AllreduceArgs{send.data(), recv, count, t, op});
      std::vector<uint8_t> expected(es);
      for (size_t i = 0; i < count; ++i) {
        serialReference(t, op, ptrs, i, expected.data());
        if (std::memcmp(recv + i * es, expected.data(), es) != 0) {
          ADD_FAILURE() << "ordered rank " << r << "/" << n << " " << toString(t) << " "
                        << toString(op) << " count " << count
                        << (inPlace ? " in place" : "") << ": element " << i
                        << " differs from the serial rank-order result";
          return;
        }
      }
      if (!inPlace) {
        EXPECT_EQ(out[count * es], 0xCD) << "wrote past the end";
        EXPECT_EQ(send, inputs[r]) << "changed its input out of place";
      }
    };
    for (DataType t : kDataTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : counts) {
          for (bool inPlace : {false, true}) runCase(t, op, count, inPlace);
        }
      }
    }
    // Several exchange rounds (more than 256 KiB per slice).
    runCase(DataType::kFloat32, ReduceOp::kSum, 70000 * n + 3, false);
    runCase(DataType::kBFloat16, ReduceOp::kSum, 140000 * n + 1, true);
    runCase(DataType::kFloat64, ReduceOp::kMax, 40000 * n + n - 1, true);
  });
}

std::vector<OrderedParam> orderedParams() {
  std::vector<OrderedParam> params;
  for (int n : {1, 2, 3, 4, 5}) {
    params.push_back({Kind::kTcp, std::vector<int>(n, 0), "tcp" + std::to_string(n)});
  }
  params.push_back({Kind::kShm, {0, 0, 0}, "shm3"});
  params.push_back({Kind::kHosts, {0, 0, 1, 1}, "hosts2x2"});
  return params;
}

INSTANTIATE_TEST_SUITE_P(Collectives, OrderedGrid, ::testing::ValuesIn(orderedParams()),
                         [](const ::testing::TestParamInfo<OrderedParam>& info) {
                           return info.param.label;
                         });

// ---- determinism -------------------------------------------------------

// Per-rank float32 values for which the order of summation matters: each
// row is one element's inputs on ranks 0..3.
const std::vector<std::vector<float>> kColumns = {
    {1e8f, 1.0f, -1e8f, 1.0f},       {1.0f, 1e8f, 1.0f, -1e8f},
    {3.0f, -1e8f, 1e8f, 0.5f},       {1e-3f, 1e7f, 3.25f, -1e7f},
    {16777216.0f, 1.0f, 1.0f, 1.0f}, {0.1f, 0.2f, 0.3f, -0.6f},
    {-1e8f, 1e8f, 1e-8f, 7.0f},      {1.5f, 16777216.0f, -16777216.0f, 0.25f},
};

float serialSum(const std::vector<float>& inputs) {
  float acc = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) acc += inputs[r];
  return acc;
}

// Filler around the special elements: anything.
float filler(int rank, size_t i) {
  return static_cast<float>(mix(i * 31 + rank) % 1000) * 0.001f;
}

struct BufferLayout {
  size_t length;
  size_t firstOffset;  // special element k sits at firstOffset + k * stride
  size_t stride;
};

// The results of the special elements, in column order, for one layout.
std::vector<uint32_t> runLayout(ThreadWorld& w, int r, const BufferLayout& l,
                                bool inPlace) {
  std::vector<float> send(l.length), out(l.length);
  for (size_t i = 0; i < l.length; ++i) send[i] = filler(r, i);
  for (size_t k = 0; k < kColumns.size(); ++k) {
    send[l.firstOffset + k * l.stride] = kColumns[k][r];
  }
  float* recv = inPlace ? send.data() : out.data();
  Context ctx = w.context(r);
  findAllreduce("ordered", ctx)
      .run(ctx, AllreduceArgs{send.data(), recv, l.length, DataType::kFloat32,
                              ReduceOp::kSum});
  std::vector<uint32_t> bits(kColumns.size());
  for (size_t k = 0; k < kColumns.size(); ++k) {
    std::memcpy(&bits[k], &recv[l.firstOffset + k * l.stride], 4);
  }
  return bits;
}

TEST(OrderedDeterminism, TheTestValuesDependOnOrder) {
  // Without this the test below could pass for any order.
  int orderMatters = 0;
  for (const auto& col : kColumns) {
    std::vector<float> reversed(col.rbegin(), col.rend());
    std::vector<float> pairwise = {col[0] + col[1], col[2] + col[3]};
    if (serialSum(col) != serialSum(reversed) ||
        serialSum(col) != pairwise[0] + pairwise[1]) {
      ++orderMatters;
    }
  }
  EXPECT_GE(orderMatters, 6);
}

TEST(OrderedDeterminism, SameBitsAtAnyOffsetLengthAndTopology) {
  const std::vector<BufferLayout> layouts = {
      {kColumns.size(), 0, 1},     // the elements alone
      {1001, 3, 97},               // spread over slices of every rank
      {1001, 990, 1},              // all in the last slice
      {600011, 65536 * 5 + 5, 9},  // several exchange rounds, a late chunk
      {600011, 7, 75000},          // spread over slices and chunks
  };
  std::vector<uint32_t> expected(kColumns.size());
  for (size_t k = 0; k < kColumns.size(); ++k) {
    const float s = serialSum(kColumns[k]);
    std::memcpy(&expected[k], &s, 4);
  }
  struct World {
    Kind kind;
    std::vector<int> hostOf;
  };
  for (const World& wd :
       {World{Kind::kTcp, {0, 0, 0, 0}}, World{Kind::kShm, {0, 0, 0, 0}},
        World{Kind::kHosts, {0, 1, 0, 1}}}) {
    ThreadWorld w(wd.kind, 4, wd.hostOf);
    w.run([&](int r) {
      for (const BufferLayout& l : layouts) {
        for (bool inPlace : {false, true}) {
          const std::vector<uint32_t> got = runLayout(w, r, l, inPlace);
          for (size_t k = 0; k < kColumns.size(); ++k) {
            EXPECT_EQ(got[k], expected[k])
                << ThreadWorld::name(wd.kind) << " rank " << r << " length " << l.length
                << " offset " << l.firstOffset + k * l.stride << " column " << k;
          }
        }
      }
    });
  }
}

// ---- selection -----------------------------------------------------------

TEST(OrderedSelection, NeverChosenByTheTable) {
  ThreadWorld flat(Kind::kTcp, 3);
  Context flatCtx = flat.context(0);
  for (size_t bytes : {size_t{0}, size_t{8}, size_t{4096}, size_t{1} << 20,
                       size_t{1} << 30, ~size_t{0}}) {
    EXPECT_NE(selectAllreduce(bytes, flatCtx).name, "ordered") << bytes;
  }
  ThreadWorld hosts(Kind::kHosts, 4, {0, 0, 1, 1});
  Context ctx = hosts.context(0);
  EXPECT_NE(selectAllreduce(1 << 20, ctx).name, "ordered");
  EXPECT_EQ(findAllreduce("ordered", ctx).name, "ordered");
}

TEST(OrderedSelection, ByNameThroughTheCommunicator) {
  // AllreduceOptions::algorithm, with kAverage (the communicator divides).
  test::withCommunicators(3, test::testSettings("tcp"), [](Communicator& comm) {
    std::vector<float> data(10, static_cast<float>(comm.rank() + 1));
    data[4] = comm.rank() == 1 ? 1e8f : 1.0f;
    AllreduceOptions o;
    o.send = o.recv = data.data();
    o.count = data.size();
    o.op = ReduceOp::kAverage;
    o.algorithm = "ordered";
    comm.allreduce(o);
    EXPECT_EQ(data[0], 2.0f);
    EXPECT_EQ(data[4], ((1.0f + 1e8f) + 1.0f) / 3.0f);
  });
}

TEST(OrderedSelection, ByEnvironment) {
  ::setenv("KOLO_ALLREDUCE_ALGO", "ordered", 1);
  const Settings s = Settings::fromEnvironment();
  ::unsetenv("KOLO_ALLREDUCE_ALGO");
  EXPECT_EQ(s.allreduceAlgorithm, "ordered");
  Settings settings = test::testSettings("tcp");
  settings.allreduceAlgorithm = s.allreduceAlgorithm;
  test::withCommunicators(2, settings, [](Communicator& comm) {
    EXPECT_EQ(comm.allreduceAlgorithm(4), "ordered");
    EXPECT_EQ(comm.allreduceAlgorithm(64 << 20), "ordered");
    int64_t v = comm.rank() == 0 ? INT64_MAX : 1;
    AllreduceOptions o;
    o.send = o.recv = &v;
    o.count = 1;
    o.dtype = DataType::kInt64;
    comm.allreduce(o);
    EXPECT_EQ(v, INT64_MIN);  // wraps
  });
}

}  // namespace
}  // namespace kolo::collectives
