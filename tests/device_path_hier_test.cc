// The hierarchical device path (collectives/cuda/hier_collectives.h) across
// real processes on pretend hosts, with host doubles for what needs a GPU:
// the intra-host DeviceCollectives is a team of the host's ranks running
// kolo's host collectives (TeamCollectives), and the device memory is host
// memory (HostDeviceMemory). What runs for real: the composition, the
// communicator's cross-host transport and host algorithms, the tags of
// HierHost, uneven hosts. Every result is compared bit for bit with the
// same reduction done locally by kolo's CPU kernels.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "api/communicator_impl.h"
#include "collectives/cuda/hier_collectives.h"
#include "collectives/reduce.h"
#include "common/check.h"
#include "support/comm_world.h"
#include "support/process_ranks.h"

namespace kolo {
namespace {

namespace dc = collectives::cuda;

// The intra-host double: the host's ranks as a team of the communicator,
// buffers in host memory.
class TeamCollectives : public dc::DeviceCollectives {
 public:
  explicit TeamCollectives(std::shared_ptr<Communicator> team) : team_(std::move(team)) {}
  std::string_view name() const override { return "team"; }
  int device() const override { return 0; }
  int rank() const override { return team_->rank(); }
  int size() const override { return team_->size(); }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 void*) override {
    AllreduceOptions o;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = dtype;
    o.op = op;
    team_->allreduce(o);
  }
  void broadcast(void* buffer, size_t count, DataType dtype, int root, void*) override {
    team_->broadcast(BroadcastOptions{buffer, count, dtype, root});
  }
  void allgather(const void* send, void* recv, const std::vector<size_t>& counts,
                 DataType dtype, void*) override {
    AllgatherOptions o;
    o.send = send;
    o.recv = recv;
    o.counts = counts;
    o.dtype = dtype;
    team_->allgather(o);
  }
  void reduceScatter(const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, void* stream) override {
    const size_t es = elementSize(dtype);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<uint8_t> whole(total * es + 1);
    allreduce(send, whole.data(), total, dtype, op, stream);
    const size_t offset =
        std::accumulate(counts.begin(), counts.begin() + rank(), size_t{0});
    std::memcpy(recv, whole.data() + offset * es, counts[rank()] * es);
  }
  void alltoall(const void*, const std::vector<size_t>&, void*,
                const std::vector<size_t>&, DataType, void*) override {
    KOLO_THROW(ErrorCode::kInternal, "the hierarchical path stages alltoall");
  }

 private:
  std::shared_ptr<Communicator> team_;
};

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

// Reports a mismatch on this rank's output; false when there was one.
bool same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t bytes,
          const std::string& what) {
  if (bytes == 0 || std::memcmp(got.data(), want.data(), bytes) == 0) return true;
  size_t at = 0;
  while (got[at] == want[at]) ++at;
  std::printf("MISMATCH %s at byte %zu: %d != %d\n", what.c_str(), at, got[at], want[at]);
  return false;
}

bool checkAllreduce(dc::DeviceCollectives& hier, int rank, int size) {
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
        std::vector<uint8_t> buf = inputOf(rank, count, dtype, op);
        std::vector<uint8_t> out(buf.size());
        hier.allreduce(buf.data(), out.data(), count, dtype, op, nullptr);
        ok &= same(out, want, bytes, what);
        hier.allreduce(buf.data(), buf.data(), count, dtype, op, nullptr);  // in place
        ok &= same(buf, want, bytes, what + " in place");
      }
    }
  }
  return ok;
}

// broadcast from every root; allgather, reduceScatter and alltoall with
// counts that differ by rank (zeros included).
bool checkOthers(dc::DeviceCollectives& hier, int rank, int size) {
  bool ok = true;
  const DataType t = DataType::kFloat32;
  for (int root = 0; root < size; ++root) {
    std::vector<uint8_t> buf = inputOf(rank, 37, t, ReduceOp::kSum);
    hier.broadcast(buf.data(), 37, t, root, nullptr);
    ok &= same(buf, inputOf(root, 37, t, ReduceOp::kSum), 37 * 4,
               "broadcast from " + std::to_string(root));
  }
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r % 3 == 1 ? 0 : size_t(r + 2);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<uint8_t> want(total * 4 + 1), got(total * 4 + 1);
  for (int r = 0, at = 0; r < size; at += int(counts[r]), ++r) {
    for (size_t i = 0; i < counts[r]; ++i) store(t, want.data(), at + i, r * 100 + i);
  }
  const size_t mine = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  hier.allgather(want.data() + mine * 4, got.data(), counts, t, nullptr);
  ok &= same(got, want, total * 4, "allgather");

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
    const std::vector<uint8_t> whole = expectedOf(size, total, t, op);
    std::vector<uint8_t> in = inputOf(rank, total, t, op), block(total * 4 + 1);
    hier.reduceScatter(in.data(), block.data(), counts, t, op, nullptr);
    std::vector<uint8_t> expect(whole.begin() + mine * 4, whole.end());
    ok &= same(block, expect, counts[rank] * 4,
               "reducescatter " + std::string(toString(op)));
  }

  // alltoall: rank r sends (r + j) % 3 elements to rank j, valued r*1000 + j*10 + i.
  auto n = [](int from, int to) { return size_t((from + to) % 3); };
  std::vector<size_t> sendCounts(size), recvCounts(size);
  for (int j = 0; j < size; ++j) sendCounts[j] = n(rank, j), recvCounts[j] = n(j, rank);
  std::vector<uint8_t> out(64 * 4), in(64 * 4), expect(64 * 4);
  for (int j = 0, s = 0, r = 0; j < size;
       s += int(sendCounts[j]), r += int(recvCounts[j]), ++j) {
    for (size_t i = 0; i < sendCounts[j]; ++i)
      store(t, out.data(), s + i, rank * 1000 + j * 10 + i);
    for (size_t i = 0; i < recvCounts[j]; ++i)
      store(t, expect.data(), r + i, j * 1000 + rank * 10 + i);
  }
  hier.alltoall(out.data(), sendCounts, in.data(), recvCounts, t, nullptr);
  ok &= same(in, expect,
             std::accumulate(recvCounts.begin(), recvCounts.end(), size_t{0}) * 4,
             "alltoall");
  return ok;
}

// Each case: the pretend host of every rank.
TEST(HierCollectives, EveryCollectiveAcrossPretendHostsMatchesTheCpu) {
  const std::vector<std::vector<int>> cases = {
      {0, 0, 1, 1},     // even
      {0, 0, 0, 1, 1},  // uneven: two shards
      {0, 1, 0, 1, 2},  // interleaved, one host of one rank: one shard
  };
  for (const std::vector<int>& hostOf : cases) {
    const int n = static_cast<int>(hostOf.size());
    test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
      CommunicatorConfig config;
      config.rank = rank;
      config.size = n;
      config.rendezvous = address;
      config.hostStore = false;
      config.hostId = "host" + std::to_string(hostOf[rank]);
      api::CommunicatorImpl comm(config, test::testSettings());
      std::vector<int> mates;
      for (int r = 0; r < n; ++r) {
        if (hostOf[r] == hostOf[rank]) mates.push_back(r);
      }
      auto team = comm.split(mates, "intra" + std::to_string(hostOf[rank]));
      auto hier = comm.hierarchical(std::make_unique<TeamCollectives>(team),
                                    std::make_unique<dc::HostDeviceMemory>());
      bool ok = checkAllreduce(*hier, rank, n);
      ok = checkOthers(*hier, rank, n) && ok;
      hier.reset();
      team.reset();
      comm.barrier();
      return ok ? 0 : 1;
    });
    for (const test::RankOutcome& o : ranks.waitAll(std::chrono::seconds(90))) {
      EXPECT_TRUE(o.exited && o.exitCode == 0 && !o.hung)
          << "hosts case of " << n << " ranks, rank " << o.rank << " exit " << o.exitCode
          << (o.hung ? " hung" : "") << ":\n"
          << o.output;
    }
  }
}

}  // namespace
}  // namespace kolo
