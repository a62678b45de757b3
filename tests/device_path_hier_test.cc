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
#include <thread>
#include <vector>

#include "api/communicator_impl.h"
#include "collectives/cuda/hier_collectives.h"
#include "collectives/cuda/ipc_collectives.h"
#include "collectives/reduce.h"
#include "common/check.h"
#include "support/comm_world.h"
#include "support/device_checks.h"
#include "support/expect_error.h"
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

// The cases: the pretend host of every rank.
const std::vector<std::vector<int>> kHostCases = {
    {0, 0, 1, 1},     // even
    {0, 0, 0, 1, 1},  // uneven: two shards
    {0, 1, 0, 1, 2},  // interleaved, one host of one rank: one shard
};

// Runs body(comm, the host's ranks) on forked ranks on the pretend hosts
// of each case from `first` on; every rank must exit with 0.
void runCases(const std::function<int(api::CommunicatorImpl&, const std::vector<int>&,
                                      const std::string& address)>& body,
              size_t first = 0) {
  for (size_t c = first; c < kHostCases.size(); ++c) {
    const std::vector<int>& hostOf = kHostCases[c];
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
        std::vector<uint8_t> a(test::kRigBufferBytes), b(test::kRigBufferBytes);
        test::Rig rig =
            test::Rig::hostAddressable(hier.get(), a.data(), b.data(), nullptr, [] {});
        return test::checkAll(rig, comm.rank(), comm.size()) ? 0 : 1;
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
// over the host double of the device; the uneven cases only (the even one
// adds nothing the team test has not shown, and the double is slow).
TEST(HierCollectives, OverCudaIpcInsideHostsEveryCollectiveMatchesTheCpu) {
  runCases(
      [](api::CommunicatorImpl& comm, const std::vector<int>& mates,
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
        test::Rig rig = test::Rig::hostAddressable(
            hier.get(), device->allocate(test::kRigBufferBytes),
            device->allocate(test::kRigBufferBytes), &stream, [&] { stream.drain(); });
        const bool ok = test::checkAll(rig, comm.rank(), comm.size());
        stream.drain();
        hier.reset();
        return ok ? 0 : 1;
      },
      1);
}

// A rank lost before an allreduce: every other rank's call fails (lost
// peer or timeout, by name), none hangs.
TEST(HierCollectives, ALostRankFailsEveryOtherRankWithoutAHang) {
  const std::vector<int> hostOf = {0, 0, 1, 1};
  const int n = 4;
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    CommunicatorConfig config;
    config.rank = rank;
    config.size = n;
    config.rendezvous = address;
    config.hostStore = false;
    config.hostId = "host" + std::to_string(hostOf[rank]);
    Settings settings = test::testSettings();
    settings.timeoutSeconds = 3;
    api::CommunicatorImpl comm(config, settings);
    std::vector<int> mates;
    for (int r = 0; r < n; ++r) {
      if (hostOf[r] == hostOf[rank]) mates.push_back(r);
    }
    auto team = comm.split(mates, "intra" + std::to_string(hostOf[rank]));
    auto hier = comm.hierarchical(std::make_unique<TeamCollectives>(team),
                                  std::make_unique<dc::HostDeviceMemory>());
    std::vector<float> buf(1000, 1.0f);
    try {
      comm.barrier();
      if (rank == 3) {  // gone while the others are in the allreduce
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        _exit(0);
      }
      hier->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32,
                      ReduceOp::kSum, nullptr);
    } catch (const Error& e) {
      test::exitWithError(rank, e);
    }
    std::printf("rank %d: the allreduce returned\n", rank);
    std::fflush(stdout);
    return 0;
  });
  for (const test::RankOutcome& o : ranks.waitAll(std::chrono::seconds(30))) {
    if (o.rank == 3) continue;
    EXPECT_FALSE(o.hung) << "rank " << o.rank << ":\n" << o.output;
    EXPECT_TRUE(o.exited && (o.exitCode == static_cast<int>(ErrorCode::kPeerLost) ||
                             o.exitCode == static_cast<int>(ErrorCode::kTimeout)))
        << "rank " << o.rank << " exit " << o.exitCode << ":\n"
        << o.output;
    EXPECT_TRUE(test::contains(o.output, "rank ")) << o.output;
  }
}

// After an error the object is broken: every later call throws the same
// error, whatever it is (here a broadcast, which the failing intra-host
// path would have served).
class FailingIntra : public TeamCollectives {
 public:
  FailingIntra() : TeamCollectives(nullptr) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void reduceScatter(const void*, void*, const std::vector<size_t>&, DataType, ReduceOp,
                     void*) override {
    KOLO_THROW(ErrorCode::kPeerLost, "rank 0: CUDA IPC peer rank 1 lost");
  }
  void broadcast(void*, size_t, DataType, int, void*) override {}
};

class NoHost : public dc::HierHost {
 public:
  void run(const std::function<void(collectives::Context&)>&) override { ++runs; }
  int runs = 0;
};

TEST(HierCollectives, AnErrorBreaksTheObject) {
  NoHost host;
  dc::HierCollectives hier(std::make_unique<FailingIntra>(), host,
                           std::make_unique<dc::HostDeviceMemory>(), {{0}}, 0);
  float x = 1;
  for (int call = 0; call < 2; ++call) {
    const Error e = test::expectError([&] {
      if (call == 0)
        hier.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, nullptr);
      if (call == 1) hier.broadcast(&x, 1, DataType::kFloat32, 0, nullptr);
    });
    EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
    EXPECT_STREQ(e.what(), "rank 0: CUDA IPC peer rank 1 lost");
  }
  EXPECT_EQ(host.runs, 0);
}

}  // namespace
}  // namespace kolo
