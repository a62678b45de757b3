// The host-staged path's logic that runs without a GPU (docs/gpu.md, "The
// host-staged path"): which device tensors are copied together
// (staging_plan.h), device and host tensors in the runtime's specs and
// fusion (never one bucket; a mismatch names "memory"), and the check of a
// device pointer given to a host call on a machine where no CUDA driver is
// loaded (nothing refused, nothing loaded).
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <kolo/error.h>
#include "collectives/cuda/device_pointer.h"
#include "collectives/cuda/staging_plan.h"
#include "runtime/fusion_planner.h"
#include "runtime/op_spec.h"

namespace {

using kolo::collectives::cuda::planRuns;
using kolo::collectives::cuda::StagedPiece;
using kolo::collectives::cuda::StagingRun;

std::vector<StagedPiece> pieces(const std::vector<std::pair<int, size_t>>& deviceBytes) {
  std::vector<StagedPiece> out;
  size_t at = 0;
  for (const auto& [device, bytes] : deviceBytes) {
    StagedPiece p;
    p.device = device;
    p.offset = at;
    p.bytes = bytes;
    out.push_back(p);
    at += bytes;
  }
  return out;
}

void expectRun(const StagingRun& r, int device, size_t first, size_t count, size_t offset,
               size_t bytes) {
  EXPECT_EQ(r.device, device);
  EXPECT_EQ(r.first, first);
  EXPECT_EQ(r.count, count);
  EXPECT_EQ(r.offset, offset);
  EXPECT_EQ(r.bytes, bytes);
}

TEST(StagingPlan, NeighboursOnOneDeviceMoveInOneCopy) {
  const auto runs = planRuns(pieces({{0, 400}, {0, 40}, {0, 4}}));
  ASSERT_EQ(runs.size(), 1u);
  expectRun(runs[0], 0, 0, 3, 0, 444);
}

TEST(StagingPlan, ADeviceChangeOrAPieceWithoutDataEndsARun) {
  // A joined rank's share or a host piece (device -1) sits between runs.
  const auto runs =
      planRuns(pieces({{0, 8}, {1, 16}, {1, 4}, {-1, 100}, {1, 8}, {0, 0}}));
  ASSERT_EQ(runs.size(), 4u);
  expectRun(runs[0], 0, 0, 1, 0, 8);
  expectRun(runs[1], 1, 1, 2, 8, 20);
  expectRun(runs[2], 1, 4, 1, 128, 8);
  expectRun(runs[3], 0, 5, 1, 136, 0);
  EXPECT_TRUE(planRuns({}).empty());
  EXPECT_TRUE(planRuns(pieces({{-1, 8}, {-1, 8}})).empty());
}

TEST(StagingPlan, AGapEndsARunAndOverlapsAreRefusedByPiece) {
  auto p = pieces({{0, 8}, {0, 8}, {0, 8}});
  p[2].offset = 32;  // a gap after piece 1
  const auto runs = planRuns(p);
  ASSERT_EQ(runs.size(), 2u);
  expectRun(runs[0], 0, 0, 2, 0, 16);
  expectRun(runs[1], 0, 2, 1, 32, 8);
  p[2].offset = 12;  // inside piece 1
  try {
    planRuns(p);
    FAIL() << "an overlap was planned";
  } catch (const kolo::Error& e) {
    EXPECT_EQ(e.code(), kolo::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("piece 2 at byte offset 12 overlaps piece 1, "
                                         "which ends at 16"),
              std::string::npos)
        << e.what();
  }
}

kolo::runtime::OpSpec allreduce(const std::string& name, bool onDevice) {
  kolo::runtime::OpSpec s;
  s.name = name;
  s.shape = {10};
  s.onDevice = onDevice;
  return s;
}

TEST(StagedSpecs, MemoryIsAgreedAndEncoded) {
  const auto host = allreduce("g", false), device = allreduce("g", true);
  const auto d = kolo::runtime::compareSpecs(host, device);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->field, "memory");
  EXPECT_EQ(d->a, "host memory");
  EXPECT_EQ(d->b, "CUDA device memory");
  std::vector<uint8_t> bytes;
  device.encode(bytes);
  host.encode(bytes);
  const uint8_t* p = bytes.data();
  EXPECT_TRUE(kolo::runtime::OpSpec::decode(p, bytes.data() + bytes.size()).onDevice);
  EXPECT_FALSE(kolo::runtime::OpSpec::decode(p, bytes.data() + bytes.size()).onDevice);
  EXPECT_EQ(p, bytes.data() + bytes.size());
}

TEST(StagedSpecs, DeviceAndHostTensorsNeverShareABucket) {
  std::vector<kolo::runtime::ReadyOp> ops;
  for (int i = 0; i < 6; ++i) {
    kolo::runtime::ReadyOp r;
    r.spec = std::make_shared<const kolo::runtime::OpSpec>(
        allreduce("t" + std::to_string(i), i % 2 == 1));
    ops.push_back(std::move(r));
  }
  const auto buckets = kolo::runtime::planBuckets(ops, 1 << 20);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].members, (std::vector<size_t>{0, 2, 4}));  // host
  EXPECT_EQ(buckets[1].members, (std::vector<size_t>{1, 3, 5}));  // device
}

// On a machine without a CUDA driver in the process (every CPU-only job):
// a host pointer goes through, and asking neither loads the driver nor
// makes a context. (With a driver loaded, cuda_collectives_test checks the
// refusal of real device memory.)
TEST(DevicePointerCheck, CostsACpuOnlyJobNothing) {
  using kolo::collectives::cuda::devicePointerOrdinal;
  using kolo::collectives::cuda::driverLoaded;
  const bool before = driverLoaded();
  std::vector<float> host(16);
  void* heap = std::malloc(64);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(devicePointerOrdinal(host.data()), -1);
    ASSERT_EQ(devicePointerOrdinal(heap), -1);
  }
  EXPECT_EQ(devicePointerOrdinal(nullptr), -1);
  std::free(heap);
  EXPECT_EQ(driverLoaded(), before) << "the check loaded (or unloaded) libcuda.so.1";
  if (before)
    GTEST_SKIP() << "libcuda.so.1 was loaded before the check: host pointers "
                    "passed; the CPU-only case needs a process without it";
}

// Once a driver is loaded (here the toolkit's stub libcuda.so, whose calls
// all fail as on a machine without a GPU), the check finds it through the
// loader's count, asks it, and still lets host memory through.
TEST(DevicePointerCheck, FindsADriverLoadedLaterAndLetsHostMemoryThrough) {
  using kolo::collectives::cuda::devicePointerOrdinal;
  using kolo::collectives::cuda::driverLoaded;
  std::vector<float> host(16);
  EXPECT_EQ(devicePointerOrdinal(host.data()), -1);
  void* stub = nullptr;
  for (const char* path : {"/usr/local/cuda/lib64/stubs/libcuda.so",
                           "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"}) {
    if (driverLoaded() || (stub = dlopen(path, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  }
  if (!driverLoaded()) GTEST_SKIP() << "no libcuda.so.1 and no CUDA toolkit stub to load";
  EXPECT_EQ(devicePointerOrdinal(host.data()), -1);
  EXPECT_EQ(devicePointerOrdinal(&host), -1);
  if (stub != nullptr) dlclose(stub);
}

}  // namespace
