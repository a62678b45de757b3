// The runtime's device operations (OpSpec::onDevice) without a GPU: a host
// double stands in for the CUDA copies (RuntimeOptions::makeStager), the
// "device" buffers are host memory, and the ranks are threads of this
// process (tests/support/comm_world.h). Checked: results of every kind
// against the host path's, the staging plan the runtime hands the stager
// (one run of a fused group's device tensors, one host copy each way, host
// tensors never staged, offsets back to back), prescale / postscale /
// average on the staged path, a broadcast written back into the device
// buffer, kolo's outputs of the other kinds, a joined rank's share, and
// device and host memory under one name failing as a mismatch naming
// "memory". What the real CUDA copies do is cuda_collectives_test's.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "collectives/cuda/device_staging.h"
#include "runtime/runtime.h"
#include "support/comm_world.h"

namespace kolo::runtime {
namespace {

namespace cuda = collectives::cuda;

// Records what the runtime asks for and copies with memcpy.
class HostStager : public cuda::DeviceStager {
 public:
  struct Copy {
    bool toHost;
    cuda::StagingRun run;
    std::vector<size_t> pieceBytes;
  };

  uint8_t* hostBuffer(size_t bytes) override {
    if (host_.size() < bytes) host_.resize(bytes);
    return host_.data();
  }
  void toHost(const cuda::StagingRun& run, const std::vector<cuda::StagedPiece>& pieces,
              uint8_t* host) override {
    size_t at = run.offset;
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      EXPECT_NE(pieces[i].entry, nullptr) << "a device piece without its entry";
      EXPECT_EQ(pieces[i].offset, at) << "pieces of a run are back to back";
      if (pieces[i].bytes > 0) std::memcpy(host + at, pieces[i].input, pieces[i].bytes);
      at += pieces[i].bytes;
    }
    EXPECT_EQ(at, run.offset + run.bytes);
    record(true, run, pieces);
  }
  void fromHost(const cuda::StagingRun& run, const std::vector<cuda::StagedPiece>& pieces,
                const uint8_t* host) override {
    size_t at = run.offset;
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      if (pieces[i].bytes > 0) std::memcpy(pieces[i].output, host + at, pieces[i].bytes);
      at += pieces[i].bytes;
    }
    record(false, run, pieces);
  }
  std::vector<Copy> copies() {
    std::lock_guard<std::mutex> lock(mu_);
    return copies_;
  }

 private:
  void record(bool in, const cuda::StagingRun& run,
              const std::vector<cuda::StagedPiece>& pieces) {
    Copy c{in, run, {}};
    for (size_t i = run.first; i < run.first + run.count; ++i) {
      c.pieceBytes.push_back(pieces[i].bytes);
    }
    std::lock_guard<std::mutex> lock(mu_);
    copies_.push_back(std::move(c));
  }
  std::vector<uint8_t> host_;
  std::mutex mu_;
  std::vector<Copy> copies_;
};

std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

// Runs fn(runtime, rank) on n ranks, each runtime staging through its own
// HostStager; a final barrier keeps ranks from stopping each other early.
// stagerOut, when given, receives each rank's stager (null until the
// runtime made one) before the barrier.
void withStagedRuntimes(
    int n, const std::function<void(Runtime&, int)>& fn,
    const std::function<void(HostStager*, int)>& stagerOut = nullptr) {
  test::withCommunicators(n, test::testSettings(), [&](Communicator& c) {
    HostStager* stager = nullptr;
    RuntimeOptions options;
    options.cycleTimeMs = 0.5;
    options.stallWarningSeconds = 0;
    options.makeStager = [&stager] {
      auto s = std::make_unique<HostStager>();
      stager = s.get();
      return s;
    };
    // No device path: every device operation is staged.
    options.makeDevicePath = [](Communicator&, int) { return nullptr; };
    Runtime rt(borrow(c), options);
    fn(rt, c.rank());
    if (stagerOut) stagerOut(stager, c.rank());
    OpRequest end;
    end.spec.name = "test.end";
    end.spec.kind = OpKind::kBarrier;
    rt.enqueue(end)->wait();
    rt.shutdown();
  });
}

OpRequest floats(const std::string& name, OpKind kind, std::vector<float>& in, void* out,
                 bool onDevice) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = kind;
  r.spec.dtype = DataType::kFloat32;
  r.spec.shape = {static_cast<int64_t>(in.size())};
  r.spec.onDevice = onDevice;
  r.input = in.data();
  r.output = out;
  if (onDevice) r.device = cuda::DeviceEntry::forTesting(0);
  return r;
}

TEST(RuntimeStaging, AFusedGroupMovesAsOneRunAndHostTensorsAreNeverStaged) {
  const int n = 3;
  withStagedRuntimes(n, [&](Runtime& rt, int rank) {
    std::vector<std::vector<float>> dev, host;
    const size_t sizes[] = {3, 100, 1, 17, 64};
    std::vector<OpRequest> devGroup, hostGroup;
    for (size_t t = 0; t < 5; ++t) {
      dev.emplace_back(sizes[t]);
      host.emplace_back(sizes[t]);
      for (size_t i = 0; i < sizes[t]; ++i) {
        dev[t][i] = host[t][i] = float(rank + 1) * float(i % 7 + t);
      }
    }
    for (size_t t = 0; t < 5; ++t) {
      devGroup.push_back(floats("d" + std::to_string(t), OpKind::kAllreduce, dev[t],
                                dev[t].data(), true));
      devGroup.back().spec.op = ReduceOp::kAverage;
      devGroup.back().spec.prescale = 0.5;
      devGroup.back().spec.postscale = 4.0;
      hostGroup.push_back(floats("h" + std::to_string(t), OpKind::kAllreduce, host[t],
                                 host[t].data(), false));
      hostGroup.back().spec.op = ReduceOp::kAverage;
      hostGroup.back().spec.prescale = 0.5;
      hostGroup.back().spec.postscale = 4.0;
    }
    auto hd = rt.enqueueGroup(devGroup);
    auto hh = rt.enqueueGroup(hostGroup);
    for (auto& h : hd) h->wait();
    for (auto& h : hh) h->wait();
    for (size_t t = 0; t < 5; ++t) {
      for (size_t i = 0; i < sizes[t]; ++i) {
        // mean over ranks of (r+1) * v * 0.5, times 4: 2 * v * mean(r+1) = 4v.
        const float v = float(i % 7 + t);
        ASSERT_FLOAT_EQ(dev[t][i], 4.0f * v) << "tensor " << t << " element " << i;
        ASSERT_EQ(dev[t][i], host[t][i]) << "the staged path differs from the host's";
      }
    }
  });
}

TEST(RuntimeStaging, TheStagerSeesOneCopyEachWayPerRun) {
  const int n = 2;
  std::vector<std::vector<float>> dev(n * 4, std::vector<float>(10, 1.0f));
  std::vector<std::vector<float>> host(n, std::vector<float>(10, 1.0f));
  withStagedRuntimes(
      n,
      [&](Runtime& rt, int rank) {
        std::vector<OpRequest> group;
        for (int t = 0; t < 4; ++t) {
          auto& d = dev[rank * 4 + t];
          group.push_back(
              floats("g" + std::to_string(t), OpKind::kAllreduce, d, d.data(), true));
        }
        auto hs = rt.enqueueGroup(group);
        auto hh = rt.enqueue(
            floats("host", OpKind::kAllreduce, host[rank], host[rank].data(), false));
        for (auto& h : hs) h->wait();
        hh->wait();
      },
      [&](HostStager* stager, int rank) {
        ASSERT_NE(stager, nullptr) << "the runtime made no stager for device operations";
        const auto copies = stager->copies();
        ASSERT_EQ(copies.size(), 2u) << "one run: one copy to the host, one back";
        EXPECT_TRUE(copies[0].toHost);
        EXPECT_FALSE(copies[1].toHost);
        for (const auto& c : copies) {
          EXPECT_EQ(c.run.count, 4u);
          EXPECT_EQ(c.run.offset, 0u);
          EXPECT_EQ(c.run.bytes, 160u);
          EXPECT_EQ(c.pieceBytes, (std::vector<size_t>{40, 40, 40, 40}));
        }
        for (int t = 0; t < 4; ++t) {
          EXPECT_EQ(dev[rank * 4 + t], std::vector<float>(10, float(n)));
        }
        EXPECT_EQ(host[rank], std::vector<float>(10, float(n)));
      });
}

TEST(RuntimeStaging, OtherKindsStageTheirInputAndABroadcastIsWrittenBack) {
  const int n = 3;
  withStagedRuntimes(n, [&](Runtime& rt, int rank) {
    // Broadcast from rank 2 into the "device" buffer.
    std::vector<float> buf(6, float(rank));
    auto b = rt.enqueue(floats("b", OpKind::kBroadcast, buf, buf.data(), true));
    // Allgather: rank r gives r + 1 rows of 2.
    std::vector<float> rows(2 * (rank + 1), float(rank));
    OpRequest g = floats("g", OpKind::kAllgather, rows, nullptr, true);
    g.spec.shape = {rank + 1, 2};
    auto hg = rt.enqueue(g);
    // Reducescatter: 3 blocks of 2, max.
    std::vector<float> rsIn(6);
    std::iota(rsIn.begin(), rsIn.end(), float(rank));
    std::vector<float> rsOut(2, -1);
    OpRequest rs = floats("rs", OpKind::kReduceScatter, rsIn, rsOut.data(), true);
    rs.spec.op = ReduceOp::kMax;
    auto hrs = rt.enqueue(rs);
    // Alltoall: 1 row of 1 to each rank, the value 10 * rank + destination.
    std::vector<float> a2a(n);
    for (int q = 0; q < n; ++q) a2a[q] = float(10 * rank + q);
    auto ha = rt.enqueue(floats("a", OpKind::kAlltoall, a2a, nullptr, true));
    b->wait();
    EXPECT_EQ(buf, std::vector<float>(6, 0.0f)) << "root 0's values written back";
    hg->wait();
    std::vector<float> gathered(hg->output().size() / 4);
    std::memcpy(gathered.data(), hg->output().data(), hg->output().size());
    std::vector<float> expected;
    for (int q = 0; q < n; ++q) expected.insert(expected.end(), 2 * (q + 1), float(q));
    EXPECT_EQ(gathered, expected);
    hrs->wait();
    EXPECT_EQ(rsOut, (std::vector<float>{float(2 * rank + n - 1), float(2 * rank + n)}));
    ha->wait();
    std::vector<float> got(ha->output().size() / 4);
    std::memcpy(got.data(), ha->output().data(), ha->output().size());
    std::vector<float> want;
    for (int q = 0; q < n; ++q) want.push_back(float(10 * q + rank));
    EXPECT_EQ(got, want);
  });
}

TEST(RuntimeStaging, DeviceAndHostMemoryUnderOneNameIsAMismatch) {
  withStagedRuntimes(2, [&](Runtime& rt, int rank) {
    std::vector<float> buf(4, 1.0f);
    auto h = rt.enqueue(floats("mixed", OpKind::kAllreduce, buf, buf.data(), rank == 0));
    try {
      h->wait();
      FAIL() << "device and host memory were reduced together";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_NE(
          std::string(e.what()).find(
              "memory differs: rank 0 has CUDA device memory, rank 1 has host memory"),
          std::string::npos)
          << e.what();
    }
    EXPECT_EQ(buf, std::vector<float>(4, 1.0f)) << "a failed operation leaves the buffer";
  });
}

TEST(RuntimeStaging, AJoinedRanksShareIsTheIdentity) {
  withStagedRuntimes(2, [&](Runtime& rt, int rank) {
    if (rank == 1) {
      rt.join()->wait();
      return;
    }
    std::vector<float> buf(5, 3.0f);
    OpRequest r = floats("alone", OpKind::kAllreduce, buf, buf.data(), true);
    r.spec.op = ReduceOp::kSum;
    rt.enqueue(r)->wait();
    EXPECT_EQ(buf, std::vector<float>(5, 3.0f));
    rt.join()->wait();
  });
}

TEST(RuntimeStaging, AnOnDeviceSpecNeedsItsEntry) {
  withStagedRuntimes(1, [&](Runtime& rt, int) {
    std::vector<float> buf(4, 1.0f);
    OpRequest r = floats("noentry", OpKind::kAllreduce, buf, buf.data(), true);
    r.device = nullptr;
    try {
      rt.enqueue(r)->wait();
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(
          std::string(e.what()).find(
              "allreduce 'noentry': on CUDA device memory without its device entry"),
          std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace kolo::runtime
