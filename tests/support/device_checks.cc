// The device collectives' checks (device_checks.h).
#include "support/device_checks.h"

#include <cstdio>
#include <cstring>
#include <numeric>

#include "collectives/reduce.h"
#include "common/check.h"

namespace kolo::test {
namespace {

// Small whole numbers, exact in every dtype and under every op's reduction
// in any order: 1..5 (products of 1s and 2s for kProduct).
double valueAt(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return (rank + i) % 3 == 0 ? 2 : 1;
  return double((rank * 7 + i * 3) % 5 + 1);
}

void store(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = float(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = collectives::floatToHalf(float(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = collectives::floatToBfloat16(float(v));
      break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = int32_t(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = int64_t(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = uint8_t(v); break;
  }
}

// Compares `got` with `want`; reports a mismatch on this rank's output;
// false when there was one.
bool same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t bytes,
          const std::string& what) {
  if (bytes == 0 || std::memcmp(got.data(), want.data(), bytes) == 0) return true;
  size_t at = 0;
  while (got[at] == want[at]) ++at;
  std::printf("MISMATCH %s at byte %zu: %d != %d\n", what.c_str(), at, got[at], want[at]);
  std::fflush(stdout);
  return false;
}

// Every rank's count of allgather and reducescatter: different, zeros
// included.
std::vector<size_t> blockCounts(int size) {
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r % 3 == 1 ? 0 : size_t(r + 2);
  return counts;
}

}  // namespace

std::vector<uint8_t> inputOf(int rank, size_t count, DataType t, ReduceOp op) {
  std::vector<uint8_t> buf(count * elementSize(t) + 1);
  for (size_t i = 0; i < count; ++i) store(t, buf.data(), i, valueAt(rank, i, op));
  return buf;
}

// The reduction of every rank's input by the CPU kernels, rank by rank.
std::vector<uint8_t> expectedOf(int size, size_t count, DataType t, ReduceOp op) {
  const ReduceOp r = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  std::vector<uint8_t> acc = inputOf(0, count, t, op);
  for (int q = 1; q < size; ++q) {
    const std::vector<uint8_t> in = inputOf(q, count, t, op);
    if (count > 0) collectives::reduce2(acc.data(), acc.data(), in.data(), count, t, r);
  }
  if (op == ReduceOp::kAverage && count > 0) {
    collectives::divideInPlace(acc.data(), count, t, size);
  }
  return acc;
}

bool checkAllreduce(Rig& rig, int rank, int size) {
  bool ok = true;
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto dtype = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      for (size_t count : {size_t{0}, size_t{1}, size_t{4}, size_t{1003}}) {
        const std::string what = "allreduce " + std::string(toString(dtype)) + " " +
                                 std::string(toString(op)) + " count " +
                                 std::to_string(count);
        const size_t bytes = count * elementSize(dtype);
        const std::vector<uint8_t> want = expectedOf(size, count, dtype, op);
        rig.put(0, inputOf(rank, count, dtype, op));
        rig.paths->allreduce(rig.buf[0], rig.buf[1], count, dtype, op, rig.stream);
        ok &= same(rig.get(1), want, bytes, what);
        rig.paths->allreduce(rig.buf[0], rig.buf[0], count, dtype, op, rig.stream);
        ok &= same(rig.get(0), want, bytes, what + " in place");
      }
    }
  }
  return ok;
}

bool checkBroadcastAndAllgather(Rig& rig, int rank, int size) {
  bool ok = true;
  const DataType t = DataType::kFloat32;
  for (int root = 0; root < size; ++root) {
    rig.put(0, inputOf(rank, 37, t, ReduceOp::kSum));
    rig.paths->broadcast(rig.buf[0], 37, t, root, rig.stream);
    ok &= same(rig.get(0), inputOf(root, 37, t, ReduceOp::kSum), 37 * 4,
               "broadcast from " + std::to_string(root));
  }
  const std::vector<size_t> counts = blockCounts(size);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<uint8_t> want(total * 4 + 1);
  for (int r = 0, at = 0; r < size; at += int(counts[r]), ++r) {
    for (size_t i = 0; i < counts[r]; ++i) store(t, want.data(), at + i, r * 100 + i);
  }
  const size_t mine = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  rig.put(0, std::vector<uint8_t>(want.begin() + mine * 4, want.end()));
  rig.paths->allgather(rig.buf[0], rig.buf[1], counts, t, rig.stream);
  ok &= same(rig.get(1), want, total * 4, "allgather");
  return ok;
}

bool checkReduceScatterAndAlltoall(Rig& rig, int rank, int size) {
  bool ok = true;
  const DataType t = DataType::kFloat32;
  const std::vector<size_t> counts = blockCounts(size);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t mine = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
    const std::vector<uint8_t> whole = expectedOf(size, total, t, op);
    rig.put(0, inputOf(rank, total, t, op));
    rig.paths->reduceScatter(rig.buf[0], rig.buf[1], counts, t, op, rig.stream);
    ok &= same(rig.get(1), std::vector<uint8_t>(whole.begin() + mine * 4, whole.end()),
               counts[rank] * 4, "reducescatter " + std::string(toString(op)));
  }
  // alltoall: rank r sends (r + j) % 3 elements to rank j, valued
  // r*1000 + j*10 + i.
  auto n = [](int from, int to) { return size_t((from + to) % 3); };
  std::vector<size_t> sendCounts(size), recvCounts(size);
  for (int j = 0; j < size; ++j) sendCounts[j] = n(rank, j), recvCounts[j] = n(j, rank);
  std::vector<uint8_t> out(64 * 4), expect(64 * 4);
  for (int j = 0, s = 0, r = 0; j < size;
       s += int(sendCounts[j]), r += int(recvCounts[j]), ++j) {
    for (size_t i = 0; i < sendCounts[j]; ++i)
      store(t, out.data(), s + i, rank * 1000 + j * 10 + i);
    for (size_t i = 0; i < recvCounts[j]; ++i)
      store(t, expect.data(), r + i, j * 1000 + rank * 10 + i);
  }
  rig.put(0, out);
  rig.paths->alltoall(rig.buf[0], sendCounts, rig.buf[1], recvCounts, t, rig.stream);
  ok &= same(rig.get(1), expect,
             std::accumulate(recvCounts.begin(), recvCounts.end(), size_t{0}) * 4,
             "alltoall");
  return ok;
}

bool checkAll(Rig& rig, int rank, int size) {
  bool ok = checkAllreduce(rig, rank, size);
  ok = checkBroadcastAndAllgather(rig, rank, size) && ok;
  return checkReduceScatterAndAlltoall(rig, rank, size) && ok;
}

Rig Rig::hostAddressable(collectives::cuda::DeviceCollectives* paths, void* a, void* b,
                         void* stream, std::function<void()> sync) {
  Rig rig;
  rig.paths = paths;
  rig.buf[0] = a;
  rig.buf[1] = b;
  rig.stream = stream;
  rig.put = [a, b, sync](int i, const std::vector<uint8_t>& bytes) {
    sync();
    KOLO_CHECK(bytes.size() <= kRigBufferBytes);
    std::memcpy(i == 0 ? a : b, bytes.data(), bytes.size());
  };
  rig.get = [a, b, sync](int i) {
    sync();
    const auto* p = static_cast<const uint8_t*>(i == 0 ? a : b);
    return std::vector<uint8_t>(p, p + kRigBufferBytes);
  };
  return rig;
}

}  // namespace kolo::test
