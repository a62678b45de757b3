// The CUDA IPC collectives' protocol and parts, on any machine:
// - the caches of exported handles and mapped peer buffers (LRU bounds);
// - the rule of when IPC can serve a host's ranks (ipc_support.h);
// - the fan-in / fan-out kernel's per-element functions (element_ops.h's
//   fanIn*, run on the host by the test double) against the CPU kernels,
//   every dtype and op, NaN and infinities included;
// - the real protocol between forked processes over the host double of the
//   device (tests/support/ipc_host_device.h): mappings cached across calls,
//   disagreeing calls failing on every rank (and the object broken after),
//   a silent peer, a peer whose device work never runs, and a peer killed
//   in the middle of a collective, each named within KOLO_TIMEOUT.
// Every collective, dtype and op between 2 and 3 processes runs in
// cuda_ipc_check (CTest cuda_ipc_host_2ranks / _3ranks, under kolorun).
#include <execinfo.h>
#include <gtest/gtest.h>
#include <kolo/error.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/ipc_collectives.h"
#include "collectives/cuda/ipc_support.h"
#include "collectives/half_bits.h"
#include "collectives/reduce.h"
#include "rendezvous/store.h"
#include "support/ipc_host_device.h"
#include "support/process_ranks.h"
#include "support/special_values.h"
#include "transport/cuda_ipc/ipc_caches.h"

namespace {

using namespace std::chrono_literals;
using kolo::DataType;
using kolo::Error;
using kolo::ErrorCode;
using kolo::ReduceOp;
namespace cuda = kolo::collectives::cuda;
namespace ipc = kolo::cuda_ipc;

// ---- caches ----------------------------------------------------------------------

// Counts what the caches ask of a device.
class CountingDevice : public ipc::IpcDevice {
 public:
  int device() const override { return 0; }
  bool locate(const void*, ipc::Allocation*, std::string*) override { return false; }
  bool exportMemory(const void* base, ipc::Handle* out, std::string* why) override {
    ++exports;
    if (reinterpret_cast<uintptr_t>(base) % 2 == 1) {
      *why = "odd";
      return false;
    }
    std::memset(out->bytes, 0, sizeof out->bytes);
    std::memcpy(out->bytes, &base, sizeof base);
    return true;
  }
  void* openMemory(const ipc::Handle& h) override {
    ++opens;
    void* p;
    std::memcpy(&p, h.bytes, sizeof p);
    return p;
  }
  void closeMemory(void* base) noexcept override { closedBases.push_back(base); }
  void* allocate(size_t) override { return nullptr; }
  void release(void*) noexcept override {}
  Event createEvent() override { return nullptr; }
  ipc::Handle exportEvent(Event) override { return {}; }
  Event openEvent(const ipc::Handle&) override { return nullptr; }
  void destroyEvent(Event) noexcept override {}
  void record(Event, void*) override {}
  void streamWait(void*, Event) override {}
  bool query(Event) override { return true; }
  void copy(void*, const void*, size_t, void*) override {}
  void reduce(void* const*, int, const void* const*, int, size_t, DataType, ReduceOp,
              void*) override {}

  int exports = 0;
  int opens = 0;
  std::vector<void*> closedBases;
};

ipc::Handle handleOf(uintptr_t v) {
  ipc::Handle h{};
  std::memcpy(h.bytes, &v, sizeof v);
  return h;
}

TEST(IpcCaches, MappingsAreOpenedOnceAndTheLeastRecentlyUsedClosed) {
  CountingDevice device;
  {
    ipc::MappingCache cache(device, 3);
    EXPECT_EQ(cache.open(1, 10, handleOf(0x1000)), reinterpret_cast<void*>(0x1000));
    EXPECT_EQ(cache.open(2, 10, handleOf(0x2000)), reinterpret_cast<void*>(0x2000));
    EXPECT_EQ(cache.open(1, 11, handleOf(0x3000)), reinterpret_cast<void*>(0x3000));
    EXPECT_EQ(cache.open(1, 10, handleOf(0x1000)), reinterpret_cast<void*>(0x1000));
    EXPECT_EQ(device.opens, 3);  // (peer, id) seen again: no new mapping
    EXPECT_TRUE(device.closedBases.empty());
    // Full: (2, 10) is the least recently used.
    cache.open(3, 10, handleOf(0x4000));
    ASSERT_EQ(device.closedBases.size(), 1u);
    EXPECT_EQ(device.closedBases[0], reinterpret_cast<void*>(0x2000));
    EXPECT_EQ(cache.size(), 3u);
    // Reopened after its eviction: a new mapping.
    cache.open(2, 10, handleOf(0x2000));
    EXPECT_EQ(device.opens, 5);
    EXPECT_EQ(cache.opened(), 5u);
    EXPECT_EQ(cache.closed(), 2u);
  }
  EXPECT_EQ(device.closedBases.size(), 5u);  // the destructor closed the other 3
}

TEST(IpcCaches, ExportsAreCachedByAllocationIdRefusalsToo) {
  CountingDevice device;
  ipc::ExportCache cache(device, 2);
  ipc::Handle h;
  std::string why;
  ipc::Allocation a{reinterpret_cast<const void*>(0x1000), 64, 1};
  ipc::Allocation odd{reinterpret_cast<const void*>(0x1001), 64, 2};
  EXPECT_TRUE(cache.handleFor(a, &h, &why));
  EXPECT_TRUE(cache.handleFor(a, &h, &why));
  EXPECT_FALSE(cache.handleFor(odd, &h, &why));
  EXPECT_EQ(why, "odd");
  why.clear();
  EXPECT_FALSE(cache.handleFor(odd, &h, &why));
  EXPECT_EQ(why, "odd");
  EXPECT_EQ(device.exports, 2);
  ipc::Allocation b{reinterpret_cast<const void*>(0x2000), 64, 3};
  EXPECT_TRUE(cache.handleFor(b, &h, &why));  // evicts id 1, the least recently used
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.handleFor(a, &h, &why));
  EXPECT_EQ(device.exports, 4);
}

// ---- when IPC can serve --------------------------------------------------------------

TEST(IpcSupport, OneGpuOrEveryPairWithPeerAccessVisibleHere) {
  const auto all = [](const std::string&) { return true; };
  const auto none = [](const std::string&, const std::string&) { return false; };
  const auto peers = [](const std::string&, const std::string&) { return true; };
  auto r =
      cuda::ipcSupportWith({"0000:3b:00.0", "0000:3b:00.0", "0000:3b:00.0"}, all, none);
  EXPECT_TRUE(r.usable) << r.reason;
  EXPECT_NE(r.reason.find("share GPU 0000:3b:00.0"), std::string::npos) << r.reason;
  r = cuda::ipcSupportWith({"0000:3b:00.0", "0000:5e:00.0"}, all, peers);
  EXPECT_TRUE(r.usable) << r.reason;
  r = cuda::ipcSupportWith(
      {"0000:3b:00.0", "0000:5e:00.0"}, all,
      [](const std::string& a, const std::string&) { return a == "0000:3b:00.0"; });
  EXPECT_FALSE(r.usable);
  EXPECT_EQ(r.reason, "GPU 0000:5e:00.0 has no peer access to GPU 0000:3b:00.0");
  r = cuda::ipcSupportWith(
      {"0000:3b:00.0", "0000:5e:00.0"},
      [](const std::string& g) { return g != "0000:5e:00.0"; }, peers);
  EXPECT_FALSE(r.usable);
  EXPECT_EQ(r.reason, "GPU 0000:5e:00.0 is not visible to this process");
  r = cuda::ipcSupportWith({"0000:3b:00.0", ""}, all, peers);
  EXPECT_FALSE(r.usable);
  EXPECT_EQ(r.reason, "local rank 1 has no CUDA device");
}

TEST(IpcSupport, WithoutADeviceItSaysWhy) {
  if (cuda::probeDevices().count > 0) GTEST_SKIP() << "a CUDA device is present";
  const auto r = cuda::ipcSupport({"0000:3b:00.0", "0000:3b:00.0"});
  EXPECT_FALSE(r.usable);
  EXPECT_FALSE(r.reason.empty());
}

TEST(IpcCollectivesFactory, WithoutADeviceItSaysWhy) {
  if (cuda::probeDevices().count > 0) GTEST_SKIP() << "a CUDA device is present";
  char dir[] = "/tmp/kolo-ipc-factory-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto store = kolo::rendezvous::openStore(std::string("file://") + dir, false, 5s);
  cuda::IpcOptions o;
  o.globalRanks = {0};
  try {
    cuda::makeIpcCollectives(o, *store);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("CUDA IPC collectives: "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(cuda::probeDevices().reason), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// One rank, in this process: bad arguments are named before any step, and
// leave the object usable; one rank's reductions are its values as they
// are (a float16 NaN keeps its payload).
TEST(IpcCollectivesFactory, BadArgumentsAreNamedAndLeaveTheObjectUsable) {
  char dir[] = "/tmp/kolo-ipc-args-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  {
    auto store = kolo::rendezvous::openStore(std::string("file://") + dir, false, 5s);
    auto device = std::make_shared<kolo::test::IpcHostDevice>();
    kolo::test::HostStream stream(0);
    cuda::IpcOptions o;
    o.globalRanks = {7};
    o.name = "args";
    auto ipc = cuda::makeIpcCollectives(o, *store, device);
    EXPECT_EQ(ipc->name(), "ipc");
    auto* buf = static_cast<uint16_t*>(device->allocate(64));
    auto message = [&](const std::function<void()>& call) -> std::string {
      try {
        call();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
        return e.what();
      }
      return "no error";
    };
    EXPECT_EQ(message([&] {
                ipc->allreduce(nullptr, buf, 4, DataType::kFloat16, ReduceOp::kSum,
                               &stream);
              }),
              "rank 7: allreduce through CUDA IPC: null send with 4 elements");
    EXPECT_EQ(
        message([&] { ipc->broadcast(buf, 4, DataType::kFloat16, 1, &stream); }),
        "rank 7: broadcast through CUDA IPC: root 1 is not a rank of the group of 1");
    EXPECT_EQ(message([&] {
                ipc->allgather(buf, buf, {1, 2}, DataType::kFloat16, &stream);
              }),
              "rank 7: allgather through CUDA IPC: counts has 2 entries, the group has 1 "
              "ranks");
    int local = 0;
    EXPECT_NE(message([&] {
                ipc->allreduce(&local, &local, 1, DataType::kInt32, ReduceOp::kSum,
                               &stream);
              }).find("is not memory of CUDA device 0"),
              std::string::npos);
    buf[0] = 0x7e01;  // a float16 NaN with a payload
    buf[1] = 0x3c00;  // 1.0
    ipc->allreduce(buf, buf + 8, 2, DataType::kFloat16, ReduceOp::kAverage, &stream);
    stream.drain();
    EXPECT_EQ(buf[8], 0x7e01);
    EXPECT_EQ(buf[9], 0x3c00);
  }
  std::filesystem::remove_all(dir);
}

// ---- the fan-in's per-element arithmetic, on the host
// ----------------------------------

constexpr DataType kDtypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt32,   DataType::kInt64,   DataType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                             ReduceOp::kMax, ReduceOp::kProduct};

// reduceToMany's arithmetic (the double runs element_ops.h's fanInElement,
// which the kernel runs per lane) against the CPU's reduceMany then
// divideInPlace, two destinations, one of them in place.
TEST(IpcFanIn, EveryDtypeAndOpMatchesTheCpuKernelsOnTheHost) {
  kolo::test::IpcHostDevice device;
  kolo::test::HostStream stream(0);
  unsigned seed = 33;
  for (DataType dtype : kDtypes) {
    const size_t es = kolo::elementSize(dtype);
    for (ReduceOp op : kOps) {
      for (int n : {2, 3, 5}) {
        const size_t count = 4099;
        std::vector<std::vector<uint8_t>> inputs;
        std::vector<const void*> srcs;
        for (int k = 0; k < n; ++k)
          inputs.push_back(kolo::test::randomSpecialValues(dtype, count, seed++));
        for (const auto& in : inputs) srcs.push_back(in.data());
        std::vector<uint8_t> want(count * es);
        kolo::collectives::reduceMany(want.data(), srcs.data(), n, count, dtype, op);
        if (op == ReduceOp::kAverage)
          kolo::collectives::divideInPlace(want.data(), count, dtype, n);
        std::vector<uint8_t> other(count * es);
        std::vector<uint8_t> firstInput = inputs[0];
        void* dsts[2] = {inputs[0].data(),
                         other.data()};  // dsts[0] is source 0: in place
        device.reduce(dsts, 2, srcs.data(), n, count, dtype, op, &stream);
        stream.drain();
        for (const auto* got : {&inputs[0], &other}) {
          for (size_t i = 0; i < count * es; i += es) {
            if (std::memcmp(&want[i], &(*got)[i], es) == 0 ||
                (kolo::test::isNanElement(dtype, &want[i]) &&
                 kolo::test::isNanElement(dtype, &(*got)[i])))
              continue;
            ADD_FAILURE() << kolo::toString(dtype) << " " << kolo::toString(op)
                          << " n=" << n << ": element " << i / es
                          << " differs from the CPU kernels";
            break;
          }
        }
      }
    }
  }
}

// ---- the protocol between processes
// ----------------------------------------------------

// A rank's side of a test: its collectives (over its own host double),
// stream and device.
struct RankSide {
  int rank;
  cuda::DeviceCollectives& ipc;
  kolo::test::IpcHostDevice& device;
  kolo::test::HostStream& stream;
};

// Runs `script` on `n` forked ranks (a file store, the host double,
// KOLO_TIMEOUT `timeout`); a kolo::Error ends the rank with "rank R error
// code C: MESSAGE" (exitWithError).
// `wrap` (optional) gives the device the collectives use in place of the
// host double itself (which still serves RankSide::device).
using WrapDevice = std::function<std::shared_ptr<ipc::IpcDevice>(
    int rank, std::shared_ptr<kolo::test::IpcHostDevice>)>;

std::vector<kolo::test::RankOutcome> runRanks(
    int n, std::chrono::milliseconds timeout,
    const std::function<void(RankSide&)>& script,
    const std::function<void(kolo::test::ProcessRanks&)>& parent = nullptr,
    const WrapDevice& wrap = nullptr) {
  kolo::test::ProcessRanks ranks(n, [&](int rank, const std::string& rendezvous) {
    // A crash in a rank shows its stack in the rank's output (status 77).
    signal(SIGSEGV, [](int) {
      void* frames[40];
      const int depth = backtrace(frames, 40);
      backtrace_symbols_fd(frames, depth, 1);
      _exit(77);
    });
    try {
      auto store = kolo::rendezvous::openStore(rendezvous, false, 20s);
      auto device = std::make_shared<kolo::test::IpcHostDevice>();
      kolo::test::HostStream stream(50);
      cuda::IpcOptions o;
      o.localRank = rank;
      o.localSize = n;
      for (int r = 0; r < n; ++r) o.globalRanks.push_back(r);
      o.timeout = timeout;
      o.name = "protocol";
      auto collectives =
          cuda::makeIpcCollectives(o, *store, wrap ? wrap(rank, device) : device);
      RankSide side{rank, *collectives, *device, stream};
      script(side);
      stream.drain();
    } catch (const Error& e) {
      kolo::test::exitWithError(rank, e);
    }
    return 0;
  });
  std::vector<int> pids;  // waitAll forgets them
  for (int r = 0; r < n; ++r) pids.push_back(ranks.pid(r));
  if (parent) parent(ranks);
  auto outcomes = ranks.waitAll(60s);
  for (auto& o : outcomes) {
    o.output += "\n[exited " + std::to_string(o.exited) + " code " +
                std::to_string(o.exitCode) + " signal " + std::to_string(o.signal) + "]";
  }
  for (int pid : pids) kolo::test::removeHostDeviceSegments(pid);
  return outcomes;
}

std::string codeText(ErrorCode code) {
  return "error code " + std::to_string(static_cast<int>(code)) + ": ";
}

TEST(IpcProtocol, MappingsAreMadeOncePerPeerBufferAcrossCalls) {
  const auto outcomes = runRanks(3, 20s, [](RankSide& s) {
    float* send = static_cast<float*>(s.device.allocate(4096 * sizeof(float)));
    float* recv = static_cast<float*>(s.device.allocate(4096 * sizeof(float)));
    for (int step = 0; step < 5; ++step) {
      for (int i = 0; i < 4096; ++i) send[i] = static_cast<float>(s.rank + step);
      s.ipc.allreduce(send, recv, 4096, DataType::kFloat32, ReduceOp::kSum, &s.stream);
      s.stream.drain();
      for (int i = 0; i < 4096; ++i) {
        if (recv[i] != static_cast<float>(3 + 3 * step)) {
          std::printf("rank %d step %d element %d = %g\n", s.rank, step, i, recv[i]);
          _exit(3);
        }
      }
    }
    // Two buffers of each of the two peers, mapped in the first call only.
    std::printf("rank %d mappings %zu\n", s.rank, s.device.openMappings());
  });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.exited && o.exitCode == 0) << o.output;
    EXPECT_NE(o.output.find("mappings 4"), std::string::npos) << o.output;
  }
}

// Stream order: each rank's input is written by work on its stream,
// enqueued right before the call, rank 0's late (150 ms); every rank's
// kernel must still read it (the peers' streams wait on its ready event).
TEST(IpcProtocol, InputsWrittenOnTheStreamBeforeTheCallAreRead) {
  const auto outcomes = runRanks(3, 20s, [](RankSide& s) {
    constexpr int kCount = 3000;
    auto* send = static_cast<int32_t*>(s.device.allocate(kCount * sizeof(int32_t)));
    auto* recv = static_cast<int32_t*>(s.device.allocate(kCount * sizeof(int32_t)));
    for (int i = 0; i < kCount; ++i) send[i] = -1000;
    const int rank = s.rank;
    s.stream.enqueue([send, rank] {
      if (rank == 0) std::this_thread::sleep_for(150ms);
      for (int i = 0; i < kCount; ++i) send[i] = rank + 1;
    });
    s.ipc.allreduce(send, recv, kCount, DataType::kInt32, ReduceOp::kSum, &s.stream);
    for (int i = 0; i < kCount; ++i) {
      if (recv[i] != 6) {
        std::printf("rank %d element %d = %d\n", s.rank, i, recv[i]);
        _exit(3);
      }
    }
  });
  for (const auto& o : outcomes) EXPECT_TRUE(o.exited && o.exitCode == 0) << o.output;
}

TEST(IpcProtocol, DisagreeingCallsFailOnEveryRankAndBreakTheObject) {
  const auto outcomes = runRanks(2, 20s, [](RankSide& s) {
    void* buf = s.device.allocate(64 * sizeof(float));
    const size_t count = s.rank == 0 ? 10 : 12;
    try {
      s.ipc.allreduce(buf, buf, count, DataType::kFloat32, ReduceOp::kSum, &s.stream);
    } catch (const Error& e) {
      std::printf("rank %d first: %s\n", s.rank, e.what());
    }
    // Broken: the same error again, without a step.
    s.ipc.allreduce(buf, buf, 10, DataType::kFloat32, ReduceOp::kSum, &s.stream);
  });
  for (const auto& o : outcomes) {
    EXPECT_NE(o.output.find(codeText(ErrorCode::kMismatch)), std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("count 12"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("count 10"), std::string::npos) << o.output;
    const std::string other = "rank " + std::to_string(1 - o.rank) + " called";
    EXPECT_NE(o.output.find(other), std::string::npos) << o.output;
  }
}

// The host double with CUDA's failure messages injected: mapping a peer's
// buffer, or a copy on the device, fails.
class FailingDevice final : public ipc::IpcDevice {
 public:
  enum class Fail { kOpenMemory, kCopy };
  FailingDevice(std::shared_ptr<ipc::IpcDevice> inner, Fail fail)
      : inner_(std::move(inner)), fail_(fail) {}
  int device() const override { return inner_->device(); }
  bool locate(const void* p, ipc::Allocation* out, std::string* why) override {
    return inner_->locate(p, out, why);
  }
  bool exportMemory(const void* base, ipc::Handle* out, std::string* why) override {
    return inner_->exportMemory(base, out, why);
  }
  void* openMemory(const ipc::Handle& handle) override {
    if (fail_ == Fail::kOpenMemory) {
      throw Error(ErrorCode::kInternal,
                  "cudaIpcOpenMemHandle of a peer's buffer on CUDA device 0 failed: "
                  "cudaErrorMapBufferObjectFailed");
    }
    return inner_->openMemory(handle);
  }
  void closeMemory(void* base) noexcept override { inner_->closeMemory(base); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* p) noexcept override { inner_->release(p); }
  Event createEvent() override { return inner_->createEvent(); }
  ipc::Handle exportEvent(Event event) override { return inner_->exportEvent(event); }
  Event openEvent(const ipc::Handle& handle) override {
    return inner_->openEvent(handle);
  }
  void destroyEvent(Event event) noexcept override { inner_->destroyEvent(event); }
  void record(Event event, void* stream) override { inner_->record(event, stream); }
  void streamWait(void* stream, Event event) override {
    inner_->streamWait(stream, event);
  }
  bool query(Event event) override { return inner_->query(event); }
  void copy(void* dst, const void* src, size_t bytes, void* stream) override {
    if (fail_ == Fail::kCopy) {
      throw Error(ErrorCode::kInternal,
                  "cudaMemcpyAsync (CUDA IPC) on CUDA device 0 failed: "
                  "cudaErrorIllegalAddress");
    }
    inner_->copy(dst, src, bytes, stream);
  }
  void reduce(void* const* dsts, int m, const void* const* srcs, int n, size_t count,
              DataType dtype, ReduceOp op, void* stream) override {
    inner_->reduce(dsts, m, srcs, n, count, dtype, op, stream);
  }

 private:
  std::shared_ptr<ipc::IpcDevice> inner_;
  Fail fail_;
};

// A device error names this rank and the collective (and, for a peer's
// buffer that cannot be mapped, the peer), then breaks the object.
TEST(IpcProtocol, DeviceErrorsNameTheRankThePeerAndTheCollective) {
  auto allreduce = [](RankSide& s) {
    void* buf = s.device.allocate(1024 * sizeof(float));
    s.ipc.allreduce(buf, buf, 1024, DataType::kFloat32, ReduceOp::kSum, &s.stream);
  };
  const auto opens = runRanks(2, 1500ms, allreduce, nullptr, [](int rank, auto device) {
    return rank == 0
               ? std::make_shared<FailingDevice>(device, FailingDevice::Fail::kOpenMemory)
               : std::shared_ptr<ipc::IpcDevice>(device);
  });
  EXPECT_NE(opens[0].output.find(
                "rank 0: allreduce through CUDA IPC: mapping buffer 0 of rank 1 (4096 "
                "bytes) failed: cudaIpcOpenMemHandle of a peer's buffer on CUDA device 0 "
                "failed: cudaErrorMapBufferObjectFailed"),
            std::string::npos)
      << opens[0].output;

  const auto copies = runRanks(
      1, 1500ms,
      [](RankSide& s) {
        auto* buf = static_cast<float*>(s.device.allocate(1024 * sizeof(float)));
        try {
          s.ipc.allgather(buf, buf + 512, {100}, DataType::kFloat32, &s.stream);
        } catch (const Error& e) {
          std::printf("first: %s\n", e.what());
        }
        s.ipc.allreduce(buf, buf, 8, DataType::kFloat32, ReduceOp::kSum, &s.stream);
      },
      nullptr,
      [](int, auto device) {
        return std::make_shared<FailingDevice>(device, FailingDevice::Fail::kCopy);
      });
  const std::string want =
      "rank 0: allgather through CUDA IPC: cudaMemcpyAsync (CUDA IPC) on CUDA device 0 "
      "failed: cudaErrorIllegalAddress";
  EXPECT_NE(copies[0].output.find("first: " + want), std::string::npos)
      << copies[0].output;
  // Broken: the later allreduce throws the same error.
  EXPECT_NE(copies[0].output.find(codeText(ErrorCode::kInternal) + want),
            std::string::npos)
      << copies[0].output;
}

TEST(IpcProtocol, ASilentPeerIsNamedWithinTheTimeout) {
  const auto outcomes = runRanks(3, 1500ms, [](RankSide& s) {
    void* buf = s.device.allocate(1024 * sizeof(float));
    if (s.rank == 2) {
      std::this_thread::sleep_for(5s);  // alive, never calls (past the timeout)
      return;
    }
    s.ipc.allreduce(buf, buf, 1024, DataType::kFloat32, ReduceOp::kSum, &s.stream);
  });
  for (int r = 0; r < 2; ++r) {
    const auto& o = outcomes[r];
    EXPECT_NE(o.output.find(codeText(ErrorCode::kTimeout)), std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("waiting for rank 2"), std::string::npos) << o.output;
    EXPECT_LT(o.seconds, 4.5) << o.output;
  }
}

// Rank 2's stream is busy with work from before the collective that never
// ends (a hung kernel): every rank's step waits on it on the device.
void hangRankTwo(RankSide& s) {
  void* buf = s.device.allocate(1024 * sizeof(float));
  if (s.rank == 2) {
    kolo::test::HostStream* stream = &s.stream;
    stream->enqueue([stream] {
      while (!stream->cancelled()) std::this_thread::sleep_for(1ms);
    });
  }
  kolo::test::sayRank(s.rank, "calling");
  s.ipc.allreduce(buf, buf, 1024, DataType::kFloat32, ReduceOp::kSum, &s.stream);
}

TEST(IpcProtocol, APeerWhoseDeviceWorkNeverRunsIsNamedWithinTheTimeout) {
  const auto outcomes = runRanks(3, 1500ms, hangRankTwo);
  for (const auto& o : outcomes) {
    EXPECT_NE(o.output.find(codeText(ErrorCode::kTimeout)), std::string::npos)
        << o.output;
    EXPECT_LT(o.seconds, 5.0) << o.output;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(outcomes[r].output.find("rank 2's stream has not reached the collective"),
              std::string::npos)
        << outcomes[r].output;
  }
  EXPECT_NE(outcomes[2].output.find("this rank's stream has not reached the collective"),
            std::string::npos)
      << outcomes[2].output;
}

TEST(IpcProtocol, APeerKilledInTheMiddleOfACollectiveIsNamed) {
  // A long timeout: the loss must be seen from the process, not the clock.
  const auto outcomes =
      runRanks(3, 20s, hangRankTwo, [](kolo::test::ProcessRanks& ranks) {
        ASSERT_TRUE(ranks.waitForOutput("calling", 20s));
        std::this_thread::sleep_for(300ms);  // the others are in the step
        ranks.signal(2, SIGKILL);
      });
  for (int r = 0; r < 2; ++r) {
    const auto& o = outcomes[r];
    EXPECT_NE(o.output.find(codeText(ErrorCode::kPeerLost)), std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("rank 2 (pid"), std::string::npos) << o.output;
    EXPECT_LT(o.seconds, 8.0) << o.output;
  }
}

}  // namespace
