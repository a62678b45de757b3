// The hierarchical device path (collectives/cuda/hier_collectives.h) across
// real processes on pretend hosts, with host doubles for what needs a GPU.
// Inside hosts: (1) a team of the host's ranks running kolo's host
// collectives (TeamCollectives), on host memory; (2) the real CUDA IPC
// collectives over the IPC host double (support/ipc_host_device.h: "device
// memory" in POSIX shared memory, a stream as a worker thread). What runs
// for real: the composition, the communicator's cross-host transport and
// host algorithms, the tags of HierHost, uneven hosts, and in (2) the IPC
// protocol under it. Every result is compared bit for bit with the
// same reduction done locally by kolo's CPU kernels.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "api/communicator_impl.h"
#include "collectives/cuda/hier_collectives.h"
#include "collectives/cuda/ipc_collectives.h"
#include "collectives/reduce.h"
#include "common/check.h"
#include "support/comm_world.h"
#include "support/ipc_host_device.h"
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

// What the checks run on: the hierarchical collectives, two buffers they
// accept ("device memory" of the double in use, kBufferBytes each), the
// stream to pass and a wait for it.
constexpr size_t kBufferBytes = 16 * 1024;

struct Rig {
  dc::DeviceCollectives* hier = nullptr;
  uint8_t* buf[2] = {nullptr, nullptr};
  void* stream = nullptr;
  std::function<void()> sync = [] {};

  // Input bytes into buf[i] (the stream's earlier work done first).
  void put(int i, const std::vector<uint8_t>& bytes) {
    sync();
    KOLO_CHECK(bytes.size() <= kBufferBytes);
    std::memcpy(buf[i], bytes.data(), bytes.size());
  }
};

// Compares buf with `want` once the stream ran; reports a mismatch on this
// rank's output; false when there was one.
bool same(Rig& rig, const uint8_t* got, const std::vector<uint8_t>& want, size_t bytes,
          const std::string& what) {
  rig.sync();
  if (bytes == 0 || std::memcmp(got, want.data(), bytes) == 0) return true;
  size_t at = 0;
  while (got[at] == want[at]) ++at;
  std::printf("MISMATCH %s at byte %zu: %d != %d\n", what.c_str(), at, got[at], want[at]);
  return false;
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
        rig.hier->allreduce(rig.buf[0], rig.buf[1], count, dtype, op, rig.stream);
        ok &= same(rig, rig.buf[1], want, bytes, what);
        rig.hier->allreduce(rig.buf[0], rig.buf[0], count, dtype, op, rig.stream);
        ok &= same(rig, rig.buf[0], want, bytes, what + " in place");
      }
    }
  }
  return ok;
}

// Every rank's count of allgather and reducescatter: different, zeros
// included.
std::vector<size_t> blockCounts(int size) {
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r % 3 == 1 ? 0 : size_t(r + 2);
  return counts;
}

bool checkBroadcastAndAllgather(Rig& rig, int rank, int size) {
  bool ok = true;
  const DataType t = DataType::kFloat32;
  for (int root = 0; root < size; ++root) {
    rig.put(0, inputOf(rank, 37, t, ReduceOp::kSum));
    rig.hier->broadcast(rig.buf[0], 37, t, root, rig.stream);
    ok &= same(rig, rig.buf[0], inputOf(root, 37, t, ReduceOp::kSum), 37 * 4,
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
  rig.hier->allgather(rig.buf[0], rig.buf[1], counts, t, rig.stream);
  ok &= same(rig, rig.buf[1], want, total * 4, "allgather");
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
    rig.hier->reduceScatter(rig.buf[0], rig.buf[1], counts, t, op, rig.stream);
    ok &=
        same(rig, rig.buf[1], std::vector<uint8_t>(whole.begin() + mine * 4, whole.end()),
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
  rig.hier->alltoall(rig.buf[0], sendCounts, rig.buf[1], recvCounts, t, rig.stream);
  ok &= same(rig, rig.buf[1], expect,
             std::accumulate(recvCounts.begin(), recvCounts.end(), size_t{0}) * 4,
             "alltoall");
  return ok;
}

bool checkAll(Rig& rig, int rank, int size) {
  bool ok = checkAllreduce(rig, rank, size);
  ok = checkBroadcastAndAllgather(rig, rank, size) && ok;
  return checkReduceScatterAndAlltoall(rig, rank, size) && ok;
}

// The cases: the pretend host of every rank.
const std::vector<std::vector<int>> kHostCases = {
    {0, 0, 1, 1},     // even
    {0, 0, 0, 1, 1},  // uneven: two shards
    {0, 1, 0, 1, 2},  // interleaved, one host of one rank: one shard
};

// Runs body(comm, the host's ranks) on forked ranks on the pretend hosts
// of each case; every rank must exit with 0.
void runCases(const std::function<int(api::CommunicatorImpl&, const std::vector<int>&,
                                      const std::string& address)>& body) {
  for (const std::vector<int>& hostOf : kHostCases) {
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
      const int code = body(comm, mates, address);
      comm.barrier();
      return code;
    });
    const auto outcomes = ranks.waitAll(std::chrono::seconds(90));
    for (const test::RankOutcome& o : outcomes) {
      test::removeHostDeviceSegments(ranks.pid(o.rank));
      EXPECT_TRUE(o.exited && o.exitCode == 0 && !o.hung)
          << "hosts case of " << n << " ranks, rank " << o.rank << " exit " << o.exitCode
          << (o.hung ? " hung" : "") << ":\n"
          << o.output;
    }
  }
}

// The intra-host path as a team running kolo's host collectives; buffers in
// plain host memory.
TEST(HierCollectives, OverATeamInsideHostsEveryCollectiveMatchesTheCpu) {
  runCases(
      [](api::CommunicatorImpl& comm, const std::vector<int>& mates, const std::string&) {
        auto team = comm.split(mates, "intra" + std::to_string(comm.layout().crossRank));
        auto hier = comm.hierarchical(std::make_unique<TeamCollectives>(team),
                                      std::make_unique<dc::HostDeviceMemory>());
        std::vector<uint8_t> a(kBufferBytes), b(kBufferBytes);
        Rig rig;
        rig.hier = hier.get();
        rig.buf[0] = a.data();
        rig.buf[1] = b.data();
        return checkAll(rig, comm.rank(), comm.size()) ? 0 : 1;
      });
}

// DeviceMemory over the CUDA IPC host double: "device memory" is the
// double's (exportable) shared memory, the stream its worker thread.
class IpcDoubleMemory : public dc::DeviceMemory {
 public:
  IpcDoubleMemory(std::shared_ptr<test::IpcHostDevice> device, test::HostStream& stream)
      : device_(std::move(device)), stream_(stream) {}
  ~IpcDoubleMemory() override {
    for (auto& s : scratch_) {
      if (s.data != nullptr) device_->release(s.data);
    }
  }
  void toHost(void* host, const void* device, size_t bytes, void*) override {
    stream_.drain();
    if (bytes > 0) std::memcpy(host, device, bytes);
  }
  void toDevice(void* device, const void* host, size_t bytes, void*) override {
    stream_.drain();
    if (bytes > 0) std::memcpy(device, host, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes, void*) override {
    stream_.drain();
    if (bytes > 0) std::memmove(dst, src, bytes);
  }
  uint8_t* hostScratch(size_t bytes, int slot) override {
    if (host_[slot].size() <= bytes) host_[slot].resize(bytes + 1);
    return host_[slot].data();
  }
  void* deviceScratch(size_t bytes, int slot) override {
    Scratch& s = scratch_[slot];
    if (s.data == nullptr || s.bytes <= bytes) {
      stream_.drain();
      if (s.data != nullptr) device_->release(s.data);
      s.bytes = bytes + 1;
      s.data = device_->allocate(s.bytes);
    }
    return s.data;
  }

 private:
  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::shared_ptr<test::IpcHostDevice> device_;
  test::HostStream& stream_;
  std::vector<uint8_t> host_[2];
  Scratch scratch_[2];
};

// The intra-host path is the real CUDA IPC collectives (IpcCollectives)
// over the host double of the device.
TEST(HierCollectives, OverCudaIpcInsideHostsEveryCollectiveMatchesTheCpu) {
  runCases([](api::CommunicatorImpl& comm, const std::vector<int>& mates,
              const std::string& address) {
    auto store = rendezvous::openStore(address, false, std::chrono::seconds(20));
    auto device = std::make_shared<test::IpcHostDevice>();
    test::HostStream stream(20);
    dc::IpcOptions o;
    o.localRank = comm.layout().localRank;
    o.localSize = comm.layout().localSize;
    o.globalRanks = mates;
    o.timeout = std::chrono::seconds(20);
    o.name = "hier/host" + std::to_string(comm.layout().crossRank);
    auto hier = comm.hierarchical(dc::makeIpcCollectives(o, *store, device),
                                  std::make_unique<IpcDoubleMemory>(device, stream));
    Rig rig;
    rig.hier = hier.get();
    rig.buf[0] = static_cast<uint8_t*>(device->allocate(kBufferBytes));
    rig.buf[1] = static_cast<uint8_t*>(device->allocate(kBufferBytes));
    rig.stream = &stream;
    rig.sync = [&] { stream.drain(); };
    const bool ok = checkAll(rig, comm.rank(), comm.size());
    stream.drain();
    hier.reset();
    return ok ? 0 : 1;
  });
}

}  // namespace
}  // namespace kolo
