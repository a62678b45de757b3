// Tests of kolo-bench's own parts: flag parsing, the float16 / bfloat16
// conversions of its checker, and the checker itself (it accepts a correct
// result computed here independently and names the first wrong element of a
// corrupted one). The benchmark against a real job is the kolo_bench_np*
// CTest entries in this folder's CMakeLists.txt.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bench_data.h"
#include "bench_options.h"

namespace kolo::bench {
namespace {

Options parse(std::vector<const char*> args) {
  args.insert(args.begin(), "kolo-bench");
  return parseOptions(static_cast<int>(args.size()), args.data());
}

std::string usageErrorOf(std::vector<const char*> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BenchOptions, ParsesSizes) {
  EXPECT_EQ(parseSize("-b", "8"), 8u);
  EXPECT_EQ(parseSize("-b", "1K"), 1024u);
  EXPECT_EQ(parseSize("-b", "4KiB"), 4096u);
  EXPECT_EQ(parseSize("-b", "64M"), 64u << 20);
  EXPECT_EQ(parseSize("-b", "2g"), 2ull << 30);
  EXPECT_EQ(parseSize("-b", "16MB"), 16u << 20);
  EXPECT_THROW(parseSize("-b", ""), UsageError);
  EXPECT_THROW(parseSize("-b", "K"), UsageError);
  EXPECT_THROW(parseSize("-b", "12Q"), UsageError);
  EXPECT_THROW(parseSize("-b", "-4"), UsageError);
  EXPECT_THROW(parseSize("-b", "99999999999999999999"), UsageError);
}

TEST(BenchOptions, BuildsTheSizeSeries) {
  Options o = parse({"-b", "8", "-e", "64M", "-f", "8"});
  std::vector<size_t> want = {8, 64, 512, 4096, 32768, 262144, 2097152, 16777216};
  EXPECT_EQ(o.sizes, want);
  o = parse({"-b", "1K", "-e", "1K"});
  EXPECT_EQ(o.sizes, std::vector<size_t>{1024});
  o = parse({"--sizes", "8,1K,64M"});
  EXPECT_EQ(o.sizes, (std::vector<size_t>{8, 1024, 64u << 20}));
}

TEST(BenchOptions, ReadsEveryFlag) {
  Options o = parse({"-o", "reducescatter", "-n", "7", "-w", "0", "-d", "bfloat16", "-r",
                     "max", "--json", "--no-check", "--min-time", "0.5"});
  EXPECT_EQ(o.collective, Collective::kReduceScatter);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.dtype, DataType::kBFloat16);
  EXPECT_EQ(o.op, ReduceOp::kMax);
  EXPECT_TRUE(o.json);
  EXPECT_FALSE(o.check);
  EXPECT_DOUBLE_EQ(o.minTime, 0.5);
  o = parse({"-a", "ring", "--inplace"});
  EXPECT_EQ(o.algorithm, "ring");
  EXPECT_TRUE(o.inPlace);
}

TEST(BenchOptions, BadFlagsNameTheFlag) {
  EXPECT_EQ(usageErrorOf({"-b", "12Q"}).rfind("-b '12Q'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-d", "float8"}).rfind("-d 'float8'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-r", "median"}).rfind("-r 'median'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-o", "scatter"}).rfind("-o 'scatter'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-n", "0"}).rfind("-n '0'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-f", "1"}).rfind("-f '1'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-e"}), "-e: needs a value");
  EXPECT_EQ(usageErrorOf({"--bogus"}), "--bogus: unknown option");
  EXPECT_EQ(usageErrorOf({"-b", "1M", "-e", "1K"}), "-b '1M': larger than -e '1K'");
  EXPECT_EQ(usageErrorOf({"-o", "alltoall", "-a", "ring"}).rfind("-a 'ring'", 0), 0u);
  EXPECT_EQ(usageErrorOf({"-o", "broadcast", "--inplace"}).rfind("--inplace", 0), 0u);
}

TEST(BenchConversions, HalfRoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float f = halfBitsToFloat(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToHalfBits(f), h) << "half bits 0x" << std::hex << bits;
  }
}

TEST(BenchConversions, HalfRoundsToNearestEven) {
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(2049.0f)), 2048.0f);  // tie, to even
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(2051.0f)), 2052.0f);  // tie, to even
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(2050.9f)), 2050.0f);
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(1.0e6f)), INFINITY);
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(65504.0f)), 65504.0f);
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(std::ldexp(1.0f, -24))),
            std::ldexp(1.0f, -24));
  EXPECT_EQ(halfBitsToFloat(floatToHalfBits(-3.0f)), -3.0f);
}

TEST(BenchConversions, Bfloat16) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float f = bfloat16BitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToBfloat16Bits(f), bits);
  }
  EXPECT_EQ(bfloat16BitsToFloat(floatToBfloat16Bits(257.0f)), 256.0f);  // tie, to even
  EXPECT_EQ(bfloat16BitsToFloat(floatToBfloat16Bits(259.0f)), 260.0f);  // tie, to even
}

// What the collective should produce, computed from the ranks' filled
// buffers with plain loads and stores (independent of Pattern::reduced).
double combine(ReduceOp op, DataType dtype, const std::vector<double>& values) {
  double acc = values[0];
  for (size_t i = 1; i < values.size(); ++i) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += values[i]; break;
      case ReduceOp::kMin: acc = std::min(acc, values[i]); break;
      case ReduceOp::kMax: acc = std::max(acc, values[i]); break;
      case ReduceOp::kProduct: acc *= values[i]; break;
    }
  }
  const bool integer =
      dtype == DataType::kInt32 || dtype == DataType::kInt64 || dtype == DataType::kUInt8;
  if (op == ReduceOp::kAverage) {
    acc /= static_cast<double>(values.size());
    if (integer) acc = std::trunc(acc);
  }
  if (dtype == DataType::kUInt8) acc = std::fmod(acc, 256.0);
  return acc;
}

struct Simulated {
  std::vector<std::vector<unsigned char>> send, recv;  // per rank
};

// Fills every rank's buffers and performs the collective in memory.
Simulated simulate(const Options& o, int n, size_t bytes) {
  const size_t es = elementSize(o.dtype);
  Simulated s;
  std::vector<Case> cases;
  for (int r = 0; r < n; ++r) {
    cases.emplace_back(o, r, n, bytes);
    s.send.emplace_back(cases[r].sendCount() * es + 1);
    s.recv.emplace_back(cases[r].recvCount() * es + 1);
    cases[r].fill(s.send[r].data(), s.recv[r].data());
  }
  const size_t block = cases[0].blockCount();
  std::vector<std::vector<double>> out(n);
  for (int r = 0; r < n; ++r) {
    const Case& c = cases[r];
    for (size_t i = 0; i < c.recvCount(); ++i) {
      std::vector<double> from;
      switch (o.collective) {
        case Collective::kAllreduce:
          for (int j = 0; j < n; ++j) {
            from.push_back(
                loadElement(o.dtype, o.inPlace ? s.recv[j].data() : s.send[j].data(), i));
          }
          out[r].push_back(combine(o.op, o.dtype, from));
          break;
        case Collective::kBroadcast:
          out[r].push_back(loadElement(o.dtype, s.recv[o.root].data(), i));
          break;
        case Collective::kAllgather:
          out[r].push_back(loadElement(o.dtype, s.send[i / block].data(), i % block));
          break;
        case Collective::kReduceScatter:
          for (int j = 0; j < n; ++j) {
            from.push_back(loadElement(o.dtype, s.send[j].data(), r * block + i));
          }
          out[r].push_back(combine(o.op, o.dtype, from));
          break;
        case Collective::kAlltoall:
          out[r].push_back(
              loadElement(o.dtype, s.send[i / block].data(), r * block + i % block));
          break;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < out[r].size(); ++i) {
      storeElement(o.dtype, s.recv[r].data(), i, out[r][i]);
    }
  }
  return s;
}

TEST(BenchCheck, AcceptsCorrectResultsAndNamesTheFirstWrongElement) {
  const DataType dtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                             DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                             DataType::kUInt8};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                          ReduceOp::kMax, ReduceOp::kProduct};
  const Collective collectives[] = {Collective::kAllreduce, Collective::kBroadcast,
                                    Collective::kAllgather, Collective::kReduceScatter,
                                    Collective::kAlltoall};
  for (Collective coll : collectives) {
    for (DataType dtype : dtypes) {
      for (ReduceOp op : ops) {
        for (int n : {1, 2, 3, 7}) {
          for (size_t elements : {0, 1, 7, 333}) {
            Options o;
            o.collective = coll;
            o.dtype = dtype;
            o.op = op;
            o.root = n > 2 ? 2 : 0;
            o.inPlace = coll == Collective::kAllreduce && elements == 7;
            SCOPED_TRACE(testing::Message()
                         << toString(coll) << " " << toString(dtype) << " "
                         << toString(op) << " n=" << n << " elements=" << elements);
            const size_t bytes =
                elements * elementSize(dtype) *
                (coll == Collective::kAllreduce || coll == Collective::kBroadcast ? 1
                                                                                  : n);
            Simulated s = simulate(o, n, bytes);
            const int last = n - 1;
            Case c(o, last, n, bytes);
            auto bad = c.verify(s.recv[last].data());
            ASSERT_FALSE(bad.has_value()) << "index " << bad->index << " expected "
                                          << bad->expected << " got " << bad->got;
            if (c.recvCount() == 0) continue;
            // Corrupt one element: the checker must name it.
            const size_t k = c.recvCount() / 2;
            const double was = loadElement(dtype, s.recv[last].data(), k);
            storeElement(dtype, s.recv[last].data(), k, was == 9 ? 10 : 9);
            bad = c.verify(s.recv[last].data());
            ASSERT_TRUE(bad.has_value());
            EXPECT_EQ(bad->index, k);
            EXPECT_EQ(bad->got, was == 9 ? 10 : 9);
            EXPECT_TRUE(c.verify(s.recv[last].data()).has_value());
          }
        }
      }
    }
  }
}

TEST(BenchCheck, CatchesAnUnwrittenOutput) {
  Options o;
  const size_t bytes = 4096;
  Case c(o, 0, 2, bytes);
  std::vector<float> send(c.sendCount()), recv(c.recvCount());
  c.fill(send.data(), recv.data());  // recv holds the sentinel: never "ok"
  auto bad = c.verify(recv.data());
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 0u);
}

TEST(BenchCheck, SumsStayExactForManyRanks) {
  // 40 ranks of bfloat16 / uint8 sums: inputs shrink so the result is exact.
  for (DataType dtype : {DataType::kBFloat16, DataType::kUInt8, DataType::kFloat16}) {
    Pattern p(dtype, ReduceOp::kSum, 40);
    double limit = dtype == DataType::kFloat16 ? 2048 : 255;
    for (size_t i = 0; i < 1000; ++i) EXPECT_LE(p.reduced(i), limit);
  }
  Pattern p(DataType::kFloat32, ReduceOp::kSum, 2);
  bool varies = false;
  for (size_t i = 1; i < 64; ++i) varies = varies || p.input(0, i) != p.input(0, 0);
  EXPECT_TRUE(varies);
}

}  // namespace
}  // namespace kolo::bench
