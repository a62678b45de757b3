// The runtime's device operations on a device path (runtime_device.cc)
// without a GPU: a host double stands in for the path (HostPath: the host
// collectives of the runtime's communicator on the "device" buffers) and
// for kolo's stream and kernels (DeviceDouble: memcpy and the CPU kernels);
// the "device" buffers are host memory and the ranks are threads of this
// process (tests/support/comm_world.h). Checked: results of every kind
// against the same operation on host memory; a fused bucket gathered once
// and scattered once; a bucket of one tensor in place (the path given the
// tensor's own input and output); prescale / postscale / average on the
// device; an operation a rank joined out of running staged; a tensor off
// its rank's path device failing on every rank, naming the tensor, the rank
// and both devices; the path named in the timeline ("staged" without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <vector>

#include "collectives/cuda/device_collectives.h"
#include "collectives/cuda/device_staging.h"
#include "collectives/elementwise.h"
#include "collectives/reduce.h"
#include "common/check.h"
#include "runtime/runtime.h"
#include "support/comm_world.h"

namespace kolo::runtime {
namespace {

namespace cuda = collectives::cuda;

// kolo's stream, device buffers and kernels on the host; records what the
// runtime asked for ("gather 5": a run of 5 pieces).
class DeviceDouble : public cuda::DeviceStager {
 public:
  uint8_t* hostBuffer(size_t bytes) override {
    if (host_.size() < bytes) host_.resize(bytes);
    return host_.data();
  }
  void toHost(const cuda::StagingRun& run, const std::vector<cuda::StagedPiece>& pieces,
              uint8_t* host) override {
    size_t at = run.offset;
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      if (pieces[i].bytes > 0) std::memcpy(host + at, pieces[i].input, pieces[i].bytes);
      at += pieces[i].bytes;
    }
    note("toHost");
  }
  void fromHost(const cuda::StagingRun& run, const std::vector<cuda::StagedPiece>& pieces,
                const uint8_t* host) override {
    size_t at = run.offset;
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      if (pieces[i].bytes > 0) std::memcpy(pieces[i].output, host + at, pieces[i].bytes);
      at += pieces[i].bytes;
    }
    note("fromHost");
  }
  void* stream(int device) override {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + device));
  }
  void* deviceBuffer(int device, size_t bytes) override {
    auto& b = buffers_[device];
    if (b.size() < bytes) b.resize(bytes);
    return b.data();
  }
  const void* gather(const cuda::StagingRun& run,
                     const std::vector<cuda::StagedPiece>& pieces) override {
    note("gather " + std::to_string(run.count));
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      EXPECT_NE(pieces[i].entry, nullptr) << "a device piece without its entry";
      EXPECT_EQ(pieces[i].device, run.device);
    }
    if (run.count == 1) return pieces[run.first].input;
    auto* dst = static_cast<uint8_t*>(deviceBuffer(run.device, run.bytes));
    size_t at = 0;
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      if (pieces[i].bytes > 0) std::memcpy(dst + at, pieces[i].input, pieces[i].bytes);
      at += pieces[i].bytes;
    }
    return dst;
  }
  void scatter(const cuda::StagingRun& run, const std::vector<cuda::StagedPiece>& pieces,
               const void* src) override {
    note("scatter " + std::to_string(run.count));
    size_t at = 0;
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      const auto* from = static_cast<const uint8_t*>(src) + at;
      if (pieces[i].bytes > 0 && pieces[i].output && pieces[i].output != from) {
        std::memcpy(pieces[i].output, from, pieces[i].bytes);
      }
      at += pieces[i].bytes;
    }
  }
  void copy(int, void* dst, const void* src, size_t bytes) override {
    note("copy");
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void scale(int, void* buf, size_t count, DataType dtype, double factor) override {
    note("scale");
    collectives::scaleInPlace(buf, count, dtype, factor);
  }
  void divide(int, void* buf, size_t count, DataType dtype, double divisor) override {
    note("divide");
    collectives::divideInPlace(buf, count, dtype, divisor);
  }
  void synchronize(int) override {}
  void keepDeviceMemory() override { note("keep"); }

  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.clear();
  }

 private:
  void note(std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(what));
  }
  std::vector<uint8_t> host_;
  std::map<int, std::vector<uint8_t>> buffers_;
  std::mutex mu_;
  std::vector<std::string> calls_;
};

// The path: the host collectives of `comm` on the "device" buffers.
class HostPath : public cuda::DeviceCollectives {
 public:
  HostPath(Communicator& comm, int device) : comm_(comm), device_(device) {}
  std::string_view name() const override { return "hostpath"; }
  int device() const override { return device_; }
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 void* stream) override {
    checkStream(stream);
    sends.push_back(send);
    recvs.push_back(recv);
    AllreduceOptions o;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = dtype;
    o.op = op;
    comm_.allreduce(o);
  }
  void broadcast(void* buffer, size_t count, DataType dtype, int root,
                 void* stream) override {
    checkStream(stream);
    BroadcastOptions o;
    o.buffer = buffer;
    o.count = count;
    o.dtype = dtype;
    o.root = root;
    comm_.broadcast(o);
  }
  void allgather(const void* send, void* recv, const std::vector<size_t>& counts,
                 DataType dtype, void* stream) override {
    checkStream(stream);
    AllgatherOptions o;
    o.send = send;
    o.recv = recv;
    o.counts = counts;
    o.dtype = dtype;
    comm_.allgather(o);
  }
  void reduceScatter(const void* send, void* recv, const std::vector<size_t>& counts,
                     DataType dtype, ReduceOp op, void* stream) override {
    checkStream(stream);
    for (size_t c : counts) EXPECT_EQ(c, counts[0]);
    ReduceScatterOptions o;
    o.send = send;
    o.recv = recv;
    o.recvCount = counts[0];
    o.dtype = dtype;
    o.op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
    comm_.reduceScatter(o);
    if (op == ReduceOp::kAverage) {
      collectives::divideInPlace(recv, counts[0], dtype, comm_.size());
    }
  }
  // Padded blocks of the largest count, then compacted.
  void alltoall(const void* send, const std::vector<size_t>& sendCounts, void* recv,
                const std::vector<size_t>& recvCounts, DataType dtype,
                void* stream) override {
    checkStream(stream);
    const int n = comm_.size();
    const size_t esize = elementSize(dtype);
    size_t most = 0;
    for (size_t c : sendCounts) most = std::max(most, c);
    AllreduceOptions m;
    m.send = m.recv = &most;
    m.count = 1;
    m.dtype = DataType::kInt64;
    m.op = ReduceOp::kMax;
    comm_.allreduce(m);
    std::vector<uint8_t> in(n * most * esize), out(n * most * esize);
    size_t at = 0;
    for (int q = 0; q < n; ++q) {
      std::memcpy(in.data() + q * most * esize, static_cast<const uint8_t*>(send) + at,
                  sendCounts[q] * esize);
      at += sendCounts[q] * esize;
    }
    AlltoallOptions o;
    o.send = in.data();
    o.recv = out.data();
    o.countPerRank = most;
    o.dtype = dtype;
    comm_.alltoall(o);
    at = 0;
    for (int q = 0; q < n; ++q) {
      std::memcpy(static_cast<uint8_t*>(recv) + at, out.data() + q * most * esize,
                  recvCounts[q] * esize);
      at += recvCounts[q] * esize;
    }
  }

  std::vector<const void*> sends;
  std::vector<void*> recvs;

 private:
  void checkStream(void* stream) const {
    EXPECT_EQ(stream, reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + device_)))
        << "a path call not on kolo's stream of its device";
  }
  Communicator& comm_;
  int device_;
};

std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

struct Doubles {
  DeviceDouble* stager = nullptr;
  HostPath* path = nullptr;
  int pathsMade = 0;
};

// Runs fn(runtime, rank, doubles) on n ranks, each runtime with its own
// DeviceDouble and (withPath) HostPath; a final barrier keeps ranks from
// stopping each other early. `timeline`: a file name prefix (+ rank).
void withDeviceRuntimes(int n, bool withPath,
                        const std::function<void(Runtime&, int, Doubles&)>& fn,
                        const std::string& timeline = "") {
  test::withCommunicators(n, test::testSettings(), [&](Communicator& c) {
    Doubles d;
    RuntimeOptions options;
    options.cycleTimeMs = 0.5;
    options.stallWarningSeconds = 0;
    if (!timeline.empty()) options.timelinePath = timeline + std::to_string(c.rank());
    options.makeStager = [&d] {
      auto s = std::make_unique<DeviceDouble>();
      d.stager = s.get();
      return s;
    };
    options.makeDevicePath = [&d, withPath](Communicator& comm,
                                            int device) -> std::shared_ptr<HostPath> {
      ++d.pathsMade;
      if (!withPath) return nullptr;
      auto p = std::make_shared<HostPath>(comm, device);
      d.path = p.get();
      return p;
    };
    Runtime rt(borrow(c), options);
    fn(rt, c.rank(), d);
    OpRequest end;
    end.spec.name = "test.end";
    end.spec.kind = OpKind::kBarrier;
    rt.enqueue(end)->wait();
    rt.shutdown();
  });
}

OpRequest floats(const std::string& name, OpKind kind, std::vector<float>& in, void* out,
                 bool onDevice, int device = 0) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = kind;
  r.spec.dtype = DataType::kFloat32;
  r.spec.shape = {static_cast<int64_t>(in.size())};
  r.spec.onDevice = onDevice;
  r.input = in.data();
  r.output = out;
  if (onDevice) r.device = cuda::DeviceEntry::forTesting(device);
  return r;
}

std::vector<float> outputOf(const HandlePtr& h) {
  std::vector<float> v(h->output().size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), h->output().data(), h->output().size());
  return v;
}

size_t countOf(const std::vector<std::string>& calls, const std::string& what) {
  return static_cast<size_t>(std::count(calls.begin(), calls.end(), what));
}

TEST(RuntimeDevice, AFusedBucketIsGatheredOnceAndScatteredOnceOnThePath) {
  const int n = 3;
  withDeviceRuntimes(n, true, [&](Runtime& rt, int rank, Doubles& d) {
    const size_t sizes[] = {3, 100, 1, 17, 64};
    std::vector<std::vector<float>> dev, host, devOut(5);
    std::vector<OpRequest> devGroup, hostGroup;
    for (size_t t = 0; t < 5; ++t) {
      dev.emplace_back(sizes[t]);
      host.emplace_back(sizes[t]);
      devOut[t].assign(sizes[t], -1.0f);
      for (size_t i = 0; i < sizes[t]; ++i) {
        dev[t][i] = host[t][i] = float(rank + 1) * float(i % 7 + t);
      }
    }
    for (size_t t = 0; t < 5; ++t) {
      for (bool onDevice : {true, false}) {
        auto& in = onDevice ? dev[t] : host[t];
        void* out = onDevice ? devOut[t].data() : host[t].data();
        auto& group = onDevice ? devGroup : hostGroup;
        group.push_back(floats((onDevice ? "d" : "h") + std::to_string(t),
                               OpKind::kAllreduce, in, out, onDevice));
        group.back().spec.op = ReduceOp::kAverage;
        group.back().spec.prescale = 0.5;
        group.back().spec.postscale = 4.0;
      }
    }
    for (auto& h : rt.enqueueGroup(devGroup)) h->wait();
    for (auto& h : rt.enqueueGroup(hostGroup)) h->wait();
    for (size_t t = 0; t < 5; ++t) {
      for (size_t i = 0; i < sizes[t]; ++i) {
        ASSERT_FLOAT_EQ(devOut[t][i], 4.0f * float(i % 7 + t)) << t << "," << i;
        ASSERT_EQ(devOut[t][i], host[t][i]) << "the device path differs from the host's";
      }
    }
    ASSERT_NE(d.path, nullptr) << "the runtime made no device path";
    EXPECT_EQ(d.pathsMade, 1);
    const auto calls = d.stager->calls();
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(calls.front(), "keep") << "device memory kept (the path's peers map it) "
                                        "before its first use";
    EXPECT_EQ(countOf(calls, "gather 5"), 1u) << "one gather of the five members";
    EXPECT_EQ(countOf(calls, "scatter 5"), 1u) << "one scatter of the five members";
    EXPECT_EQ(countOf(calls, "scale"), 2u) << "prescale and postscale, once each";
    EXPECT_EQ(countOf(calls, "toHost") + countOf(calls, "fromHost"), 0u)
        << "nothing went through host memory";
    ASSERT_EQ(d.path->sends.size(), 1u) << "one allreduce on the path";
    EXPECT_EQ(d.path->sends[0], d.path->recvs[0]) << "in place in the fusion buffer";
  });
}

TEST(RuntimeDevice, ASingleTensorGoesFromItsInputToItsOutput) {
  withDeviceRuntimes(2, true, [&](Runtime& rt, int rank, Doubles& d) {
    std::vector<float> in(1000), out(1000, -1.0f), inPlace(1000);
    for (size_t i = 0; i < in.size(); ++i) in[i] = inPlace[i] = float(rank * 10 + i % 5);
    OpRequest sum = floats("big", OpKind::kAllreduce, in, out.data(), true);
    rt.enqueue(sum)->wait();
    OpRequest avg = floats("inplace", OpKind::kAllreduce, inPlace, inPlace.data(), true);
    avg.spec.op = ReduceOp::kAverage;
    avg.spec.postscale = 2.0;
    rt.enqueue(avg)->wait();
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(out[i], float(10 + 2 * (i % 5))) << i;
      ASSERT_EQ(inPlace[i], float(10 + 2 * (i % 5))) << i;  // mean 5 + i%5, times 2
    }
    EXPECT_EQ(in[1], float(rank * 10 + 1)) << "the input is left alone";
    ASSERT_NE(d.path, nullptr);
    ASSERT_EQ(d.path->sends.size(), 2u);
    EXPECT_EQ(d.path->sends[0], in.data()) << "the tensor's own input";
    EXPECT_EQ(d.path->recvs[0], out.data()) << "the tensor's own output";
    EXPECT_EQ(d.path->sends[1], inPlace.data());
    EXPECT_EQ(d.path->recvs[1], inPlace.data());
    const auto calls = d.stager->calls();
    EXPECT_EQ(countOf(calls, "gather 1"), 2u);
    EXPECT_EQ(countOf(calls, "scatter 1"), 2u);
    EXPECT_EQ(countOf(calls, "copy"), 0u) << "no copy without a prescale";
    EXPECT_EQ(countOf(calls, "scale"), 1u) << "the postscale";
    EXPECT_EQ(countOf(calls, "divide"), 0u) << "the path averages";
  });
}

TEST(RuntimeDevice, EveryKindMatchesTheHostPath) {
  const int n = 3;
  withDeviceRuntimes(n, true, [&](Runtime& rt, int rank, Doubles& d) {
    for (bool onDevice : {true, false}) {
      const std::string p = onDevice ? "dev." : "host.";
      // Broadcast from rank 2, out of place.
      std::vector<float> bin(6, float(rank + 1)), bout(6, -1.0f);
      OpRequest b = floats(p + "b", OpKind::kBroadcast, bin, bout.data(), onDevice);
      b.spec.root = 2;
      auto hb = rt.enqueue(b);
      // Allgather: rank r gives r rows of 2 (rank 0 none: the agreed
      // spec's first dimension is 0).
      std::vector<float> rows(2 * rank, float(rank));
      OpRequest g = floats(p + "g", OpKind::kAllgather, rows, nullptr, onDevice);
      g.spec.shape = {rank, 2};
      auto hg = rt.enqueue(g);
      // Reducescatter: 3 blocks of 2, average with pre- and postscale.
      std::vector<float> rsIn(6);
      std::iota(rsIn.begin(), rsIn.end(), float(rank));
      std::vector<float> rsOut(2, -1);
      OpRequest rs =
          floats(p + "rs", OpKind::kReduceScatter, rsIn, rsOut.data(), onDevice);
      rs.spec.op = ReduceOp::kAverage;
      rs.spec.prescale = 3.0;
      rs.spec.postscale = 0.5;
      auto hrs = rt.enqueue(rs);
      // Alltoall with splits: rank r sends q + 1 rows of 1 to rank q.
      std::vector<float> a2a;
      std::vector<int64_t> splits;
      for (int q = 0; q < n; ++q) {
        splits.push_back(q + 1);
        for (int k = 0; k <= q; ++k) a2a.push_back(float(100 * rank + 10 * q + k));
      }
      OpRequest a = floats(p + "a", OpKind::kAlltoall, a2a, nullptr, onDevice);
      a.splits = splits;
      auto ha = rt.enqueue(a);
      hb->wait();
      hg->wait();
      hrs->wait();
      ha->wait();
      EXPECT_EQ(bout, std::vector<float>(6, 3.0f)) << p;
      std::vector<float> gathered;
      for (int q = 0; q < n; ++q) gathered.insert(gathered.end(), 2 * q, float(q));
      EXPECT_EQ(outputOf(hg), gathered) << p;
      EXPECT_EQ(hg->outputShape(), (std::vector<int64_t>{3, 2})) << p;
      // mean over r of 3 * (r + i) * 0.5 = 1.5 * (1 + i), i = 2 * rank + k.
      EXPECT_EQ(rsOut, (std::vector<float>{1.5f * float(2 * rank + 1),
                                           1.5f * float(2 * rank + 2)}))
          << p;
      std::vector<float> want;
      for (int q = 0; q < n; ++q) {
        for (int k = 0; k <= rank; ++k) want.push_back(float(100 * q + 10 * rank + k));
      }
      EXPECT_EQ(outputOf(ha), want) << p;
      EXPECT_EQ(ha->outputShape(), (std::vector<int64_t>{3 * (rank + 1)})) << p;
    }
    const auto calls = d.stager->calls();
    EXPECT_EQ(countOf(calls, "toHost"), 0u) << "no input staged through host memory";
    EXPECT_EQ(countOf(calls, "gather 1"), 4u) << "each kind waited on its input once";
    EXPECT_EQ(countOf(calls, "scatter 1"), 4u) << "each kind recorded its done event";
  });
}

TEST(RuntimeDevice, ATensorOffItsRanksPathDeviceFailsOnEveryRank) {
  withDeviceRuntimes(3, true, [&](Runtime& rt, int rank, Doubles& d) {
    // Rank r's path is bound to device r: its first device operation's.
    std::vector<float> first(4, 1.0f);
    rt.enqueue(floats("first", OpKind::kAllreduce, first, first.data(), true, rank))
        ->wait();
    EXPECT_EQ(first, std::vector<float>(4, 3.0f));
    ASSERT_NE(d.path, nullptr);
    EXPECT_EQ(d.path->device(), rank);
    // Rank 1 submits 'w' on device 2: it fails on every rank, alone in its
    // bucket or fused with others.
    std::vector<float> w(4, 1.0f), x(4, 1.0f);
    const int device = rank == 1 ? 2 : rank;
    std::vector<OpRequest> group{
        floats("w", OpKind::kAllreduce, w, w.data(), true, device),
        floats("x", OpKind::kAllreduce, x, x.data(), true, rank)};
    auto hs = rt.enqueueGroup(group);
    std::vector<float> bw(3, float(rank));
    auto hb = rt.enqueue(floats("bw", OpKind::kBroadcast, bw, bw.data(), true, device));
    for (const HandlePtr& h : {hs[0], hb}) {
      try {
        h->wait();
        ADD_FAILURE() << h->name() << " ran with a tensor off its path's device";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        const std::string want =
            "'" + h->name() +
            "': rank 1's tensor is on CUDA device 2, but the hostpath device path of "
            "rank 1 is bound to CUDA device 1";
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
    }
    hs[1]->wait();
    EXPECT_EQ(x, std::vector<float>(4, 3.0f)) << "the bucket's other member ran";
    EXPECT_EQ(w, std::vector<float>(4, 1.0f)) << "a failed operation leaves its buffer";
    EXPECT_EQ(bw, std::vector<float>(3, float(rank)));
    // The runtime goes on; a name seen before (in the response cache) is
    // routed by each rank's device of this submission.
    for (int round = 0; round < 3; ++round) {
      std::vector<float> again(2, 2.0f);
      const int on = round == 2 && rank == 1 ? 0 : rank;
      auto h =
          rt.enqueue(floats("first", OpKind::kAllreduce, again, again.data(), true, on));
      if (round < 2) {
        h->wait();
        EXPECT_EQ(again, std::vector<float>(2, 6.0f));
        continue;
      }
      try {
        h->wait();
        ADD_FAILURE() << "a cached name ran with a tensor off its path's device";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1's tensor is on CUDA device 0"),
                  std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(d.pathsMade, 1);
  });
}

TEST(RuntimeDevice, AJoinedRanksOperationRunsStagedAndThePathIsMadeLater) {
  withDeviceRuntimes(2, true, [&](Runtime& rt, int rank, Doubles& d) {
    if (rank == 1) {
      rt.join()->wait();
    } else {
      std::vector<float> alone(5, 3.0f);
      rt.enqueue(floats("alone", OpKind::kAllreduce, alone, alone.data(), true))->wait();
      EXPECT_EQ(alone, std::vector<float>(5, 3.0f)) << "rank 1's share: zeros";
      EXPECT_EQ(d.pathsMade, 0) << "no path made while a rank had joined";
      const auto calls = d.stager->calls();
      EXPECT_EQ(countOf(calls, "toHost"), 1u) << "staged through host memory";
      rt.join()->wait();
    }
    std::vector<float> both(3, float(rank + 1));
    rt.enqueue(floats("both", OpKind::kAllreduce, both, both.data(), true))->wait();
    EXPECT_EQ(both, std::vector<float>(3, 3.0f));
    EXPECT_EQ(d.pathsMade, 1) << "made at the first operation every rank submitted";
    ASSERT_NE(d.path, nullptr);
    EXPECT_EQ(d.path->sends.size(), 1u);
  });
}

TEST(RuntimeDevice, APathThatCannotBeMadeFailsEveryDeviceOperation) {
  test::withCommunicators(2, test::testSettings(), [&](Communicator& c) {
    RuntimeOptions options;
    options.cycleTimeMs = 0.5;
    options.stallWarningSeconds = 0;
    options.makeStager = [] { return std::make_unique<DeviceDouble>(); };
    int asked = 0;
    options.makeDevicePath = [&asked](Communicator&, int) -> std::shared_ptr<HostPath> {
      ++asked;
      KOLO_THROW(ErrorCode::kInvalidArgument, "KOLO_DEVICE_PATH=nccl cannot run here");
    };
    Runtime rt(borrow(c), options);
    for (const char* name : {"one", "two"}) {
      std::vector<float> buf(3, 1.0f);
      try {
        rt.enqueue(floats(name, OpKind::kAllreduce, buf, buf.data(), true))->wait();
        ADD_FAILURE() << name << " ran without its path";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("KOLO_DEVICE_PATH=nccl cannot run here"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(buf, std::vector<float>(3, 1.0f));
    }
    EXPECT_EQ(asked, 1) << "asked once";
    std::vector<float> host(2, 1.0f);
    rt.enqueue(floats("host", OpKind::kAllreduce, host, host.data(), false))->wait();
    EXPECT_EQ(host, std::vector<float>(2, 2.0f)) << "the runtime goes on";
    OpRequest end;
    end.spec.name = "test.end";
    end.spec.kind = OpKind::kBarrier;
    rt.enqueue(end)->wait();
    rt.shutdown();
  });
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(RuntimeDevice, TheTimelineNamesThePath) {
  const std::string dir = ::testing::TempDir();
  for (bool withPath : {true, false}) {
    const std::string prefix =
        dir + "/kolo_runtime_device_" + (withPath ? "path" : "staged") + "_";
    withDeviceRuntimes(
        2, withPath,
        [&](Runtime& rt, int rank, Doubles&) {
          std::vector<float> a(8, 1.0f), b(4, float(rank));
          rt.enqueue(floats("ar", OpKind::kAllreduce, a, a.data(), true))->wait();
          rt.enqueue(floats("bc", OpKind::kBroadcast, b, b.data(), true))->wait();
          EXPECT_EQ(a, std::vector<float>(8, 2.0f));
          EXPECT_EQ(b, std::vector<float>(4, 0.0f));
          rt.stopTimeline();
        },
        prefix);
    const std::string text = slurp(prefix + "0");
    const std::string name = withPath ? "hostpath" : "staged";
    EXPECT_NE(text.find(R"("tensors":"1","path":")" + name + "\""), std::string::npos)
        << text;
    EXPECT_NE(text.find(R"("bucket":"0","path":")" + name + "\""), std::string::npos)
        << text;
    EXPECT_EQ(text.find(R"("algorithm")") == std::string::npos, withPath)
        << "the host's algorithm is named only where it ran: " << text;
  }
}

}  // namespace
}  // namespace kolo::runtime
