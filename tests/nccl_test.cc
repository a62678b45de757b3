// The NCCL path (collectives/cuda/nccl_collectives.h) as far as a machine
// without a GPU can run it: the entry points NCCL must have, the config
// struct's layout and the enum mapping against nccl.h (where the header is
// installed), ncclGetUniqueId (it needs no GPU) exchanged across real
// processes through the real (file) store, the store-side waits that name
// a rank that never came, a published failure ending the others' wait at
// once, and the errors without a device. What needs a GPU is in
// tests/nccl_device_test.cc.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/device_runtime.h"
#include "collectives/cuda/nccl_collectives.h"
#include "collectives/cuda/nccl_init.h"
#include "collectives/cuda/nccl_library.h"
#include "collectives/cuda/nccl_rendezvous.h"
#include "collectives/cuda/nccl_types.h"
#include "common/check.h"
#include "rendezvous/store.h"
#include "support/expect_error.h"
#include "support/process_ranks.h"

#if KOLO_TEST_NCCL_H
#include <nccl.h>
#endif

namespace kolo {
namespace {

namespace cuda = collectives::cuda;
namespace nccl = collectives::cuda::nccl;
using std::chrono::milliseconds;
using test::contains;

const cuda::NcclLibrary* loadOrSkipReason(std::string* reason) {
  try {
    return &cuda::NcclLibrary::load();
  } catch (const Error& e) {
    *reason = e.what();
    return nullptr;
  }
}

// A file store in a fresh directory, removed at the end.
struct TempStore {
  TempStore() {
    char dir[] = "/tmp/kolo-nccl-test-XXXXXX";
    path = ::mkdtemp(dir) ? dir : "";
    store = rendezvous::openStore("file://" + path, false, milliseconds(1000));
  }
  ~TempStore() { std::filesystem::remove_all(path); }
  std::string path;
  std::unique_ptr<rendezvous::Store> store;
};

std::string hex(const cuda::NcclLibrary::UniqueId& id) {
  std::string out;
  char two[3];
  for (char c : id.internal) {
    std::snprintf(two, sizeof(two), "%02x", static_cast<unsigned char>(c));
    out += two;
  }
  return out;
}

// ---- the library, the struct, the enums ----------------------------------------

TEST(NcclLibrary, ResolvesWhatTheNcclPathNeeds) {
  std::string reason;
  const cuda::NcclLibrary* lib = loadOrSkipReason(&reason);
  if (lib == nullptr) GTEST_SKIP() << "no NCCL on this machine: " << reason;
  EXPECT_NE(lib->reduce, nullptr);
  if (lib->version() >= cuda::kNcclMinimumVersion) {
    EXPECT_NE(lib->commInitRankConfig, nullptr);
    EXPECT_NE(lib->commFinalize, nullptr);
    EXPECT_NE(lib->getLastError, nullptr);
  }
}

TEST(NcclTypes, MapEveryDtypeAndOp) {
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kFloat32), 7);
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kFloat64), 8);
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kFloat16), 6);
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kBFloat16), 9);
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kInt32), 2);
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kInt64), 4);
  EXPECT_EQ(nccl::ncclDataTypeOf(DataType::kUInt8), 1);
  const std::pair<ReduceOp, nccl::Reduction> ops[] = {{ReduceOp::kSum, {0, false}},
                                                      {ReduceOp::kAverage, {0, true}},
                                                      {ReduceOp::kMin, {3, false}},
                                                      {ReduceOp::kMax, {2, false}},
                                                      {ReduceOp::kProduct, {1, false}}};
  for (const auto& [op, want] : ops) {
    const nccl::Reduction got = nccl::ncclReductionOf(op);
    EXPECT_EQ(got.op, want.op) << toString(op);
    EXPECT_EQ(got.divideBySize, want.divideBySize) << toString(op);
  }
  const Error bad =
      test::expectError([] { nccl::ncclDataTypeOf(static_cast<DataType>(42)); });
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad.what(), "dtype 42")) << bad.what();
  EXPECT_EQ(
      test::expectError([] { nccl::ncclReductionOf(static_cast<ReduceOp>(9)); }).code(),
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(nccl::errorCodeOf(nccl::kRemoteError), ErrorCode::kPeerLost);
  EXPECT_EQ(nccl::errorCodeOf(nccl::kSystemError), ErrorCode::kPeerLost);
  EXPECT_EQ(nccl::errorCodeOf(nccl::kInvalidUsage), ErrorCode::kInternal);
}

#if KOLO_TEST_NCCL_H
// kolo's copies of NCCL's ABI against the installed header, at compile time.
static_assert(nccl::kInt8 == ncclInt8 && nccl::kUint8 == ncclUint8 &&
              nccl::kInt32 == ncclInt32 && nccl::kUint32 == ncclUint32 &&
              nccl::kInt64 == ncclInt64 && nccl::kUint64 == ncclUint64 &&
              nccl::kFloat16 == ncclFloat16 && nccl::kFloat32 == ncclFloat32 &&
              nccl::kFloat64 == ncclFloat64 && nccl::kBfloat16 == ncclBfloat16);
static_assert(nccl::kSum == ncclSum && nccl::kProd == ncclProd && nccl::kMax == ncclMax &&
              nccl::kMin == ncclMin && nccl::kAvg == ncclAvg);
static_assert(nccl::kSuccess == ncclSuccess &&
              nccl::kUnhandledCudaError == ncclUnhandledCudaError &&
              nccl::kSystemError == ncclSystemError &&
              nccl::kInternalError == ncclInternalError &&
              nccl::kInvalidArgument == ncclInvalidArgument &&
              nccl::kInvalidUsage == ncclInvalidUsage &&
              nccl::kRemoteError == ncclRemoteError &&
              nccl::kInProgress == ncclInProgress);
static_assert(sizeof(cuda::NcclLibrary::UniqueId) == sizeof(ncclUniqueId));
static_assert(sizeof(cuda::NcclLibrary::Result) == sizeof(ncclResult_t));
// The config's leading fields sit where every NCCL since 2.14 reads them.
static_assert(offsetof(cuda::NcclLibrary::Config, size) == offsetof(ncclConfig_t, size));
static_assert(offsetof(cuda::NcclLibrary::Config, magic) ==
              offsetof(ncclConfig_t, magic));
static_assert(offsetof(cuda::NcclLibrary::Config, version) ==
              offsetof(ncclConfig_t, version));
static_assert(offsetof(cuda::NcclLibrary::Config, blocking) ==
              offsetof(ncclConfig_t, blocking));

TEST(NcclTypes, TheHeaderAgreesOnWidthsAndTheConfigsMagic) {
  // Each mapped NCCL type has the kolo dtype's width (ncclTypeSize's table).
  const std::pair<DataType, size_t> widths[] = {
      {DataType::kFloat32, sizeof(float)},  {DataType::kFloat64, sizeof(double)},
      {DataType::kFloat16, sizeof(__half)}, {DataType::kBFloat16, 2},
      {DataType::kInt32, sizeof(int32_t)},  {DataType::kInt64, sizeof(int64_t)},
      {DataType::kUInt8, sizeof(uint8_t)}};
  for (const auto& [dtype, width] : widths) EXPECT_EQ(elementSize(dtype), width);
  const ncclConfig_t initializer = NCCL_CONFIG_INITIALIZER;
  const cuda::NcclLibrary::Config ours;
  EXPECT_EQ(ours.magic, initializer.magic);
  EXPECT_LE(ours.size, initializer.size);
  EXPECT_EQ(ours.version, 21400u);
}
#endif

// ---- without a device ------------------------------------------------------------

TEST(NcclAvailability, SaysWhyNotOrGivesTheVersion) {
  const cuda::NcclAvailability a = cuda::ncclAvailability();
  if (!cuda::built()) {
    EXPECT_EQ(a.version, 0);
    EXPECT_TRUE(contains(a.reason, "no CUDA support")) << a.reason;
  } else if (cuda::probeDevices().count == 0) {
    EXPECT_EQ(a.version, 0);
    EXPECT_TRUE(contains(a.reason, "no CUDA device: cudaGetDeviceCount")) << a.reason;
  } else if (a.version > 0) {
    EXPECT_TRUE(a.reason.empty()) << a.reason;
    EXPECT_EQ(a.version, cuda::NcclLibrary::load().version());
  } else {
    EXPECT_FALSE(a.reason.empty());
  }
  EXPECT_EQ(cuda::ncclAvailability().reason, a.reason) << "asked once";
}

TEST(NcclAvailability, TheRuleNamesWhatIsMissing) {
  const std::unique_ptr<cuda::NcclLibrary> lib =
      cuda::NcclLibrary::open(KOLO_TEST_FAKE_NCCL);
  auto setVersion = reinterpret_cast<void (*)(int)>(::dlsym(
      ::dlopen(KOLO_TEST_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD), "fakeNcclSetVersion"));
  const cuda::DeviceProbe none{0, "cudaGetDeviceCount failed with cudaErrorNoDevice: x",
                               0, 0};
  const cuda::DeviceProbe one{1, "", 13000, 13000};
  auto fake = [&]() -> const cuda::NcclLibrary& { return *lib; };
  auto missing = []() -> const cuda::NcclLibrary& {
    throw Error(ErrorCode::kIo, "cannot load the NCCL library libnccl.so.2: not found");
  };
  EXPECT_TRUE(
      contains(cuda::ncclAvailabilityOf(false, one, fake).reason, "no CUDA support"));
  EXPECT_EQ(cuda::ncclAvailabilityOf(true, none, fake).reason,
            "no CUDA device: cudaGetDeviceCount failed with cudaErrorNoDevice: x");
  EXPECT_EQ(cuda::ncclAvailabilityOf(true, one, missing).reason,
            "cannot load the NCCL library libnccl.so.2: not found");
  const cuda::NcclAvailability ok = cuda::ncclAvailabilityOf(true, one, fake);
  EXPECT_EQ(ok.version, 22809);
  EXPECT_EQ(ok.reason, "");
  setVersion(21207);
  const cuda::NcclAvailability old = cuda::ncclAvailabilityOf(true, one, fake);
  setVersion(22809);
  EXPECT_EQ(old.version, 0);
  EXPECT_TRUE(contains(old.reason, "NCCL 2.12.7 (")) << old.reason;
  EXPECT_TRUE(contains(old.reason, ") is older than 2.14.3, which kolo needs"))
      << old.reason;
}

TEST(NcclCollectives, WithoutADeviceTheFactoryNamesTheRankDeviceAndCause) {
  if (cuda::ncclAvailability().version > 0) GTEST_SKIP() << "the NCCL path is available";
  TempStore temp;
  cuda::NcclOptions options;
  options.rank = 0;
  options.size = 1;
  options.globalRanks = {7};
  options.device = 0;
  options.timeout = milliseconds(2000);
  options.key = "nodevice";
  const Error e =
      test::expectError([&] { cuda::makeNcclCollectives(options, *temp.store); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  const std::string want =
      cuda::built() ? "no CUDA device: cudaGetDeviceCount failed" : "no CUDA support";
  EXPECT_TRUE(
      contains(e.what(), "rank 7: the NCCL path on CUDA device 0 is unavailable: "))
      << e.what();
  EXPECT_TRUE(contains(e.what(), want)) << e.what();
}

TEST(NcclRendezvous, BadGroupsAreRefusedByName) {
  TempStore temp;
  const auto deadline = cuda::NcclRendezvous::Clock::now();
  auto make = [&](cuda::NcclGroup g) {
    cuda::NcclRendezvous r(*temp.store, std::move(g), deadline);
  };
  Error e = test::expectError([&] { make({3, 3, {}, "k", milliseconds(1)}); });
  EXPECT_TRUE(contains(e.what(), "rank 3 is not in a group of 3 ranks")) << e.what();
  e = test::expectError([&] { make({0, 2, {}, "", milliseconds(1)}); });
  EXPECT_TRUE(contains(e.what(), "the store key is empty")) << e.what();
  e = test::expectError([&] { make({0, 2, {4, 5, 6}, "k", milliseconds(1)}); });
  EXPECT_TRUE(contains(e.what(), "3 global ranks given for a group of 2")) << e.what();
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

TEST(NcclRendezvous, AKeyUsedAgainStartsAFreshRound) {
  TempStore temp;
  int made = 0;
  auto makeId = [&] {
    cuda::NcclLibrary::UniqueId id{};
    id.internal[0] = static_cast<char>(++made);
    return id;
  };
  // One round of a two-member group (members as threads): both join and
  // read the id; rank 1 then publishes a failure.
  auto round = [&](bool failAfter) {
    const auto deadline = cuda::NcclRendezvous::Clock::now() + milliseconds(2000);
    cuda::NcclRendezvous a(*temp.store, {0, 2, {}, "again", milliseconds(2000)},
                           deadline);
    cuda::NcclRendezvous b(*temp.store, {1, 2, {}, "again", milliseconds(2000)},
                           deadline);
    char ids[2] = {0, 0};
    std::thread other([&] {
      b.join();
      ids[1] = b.exchangeId(makeId).internal[0];
    });
    a.join();
    ids[0] = a.exchangeId(makeId).internal[0];
    other.join();
    if (failAfter) b.fail("rank 1: failed after the first round (test)");
    EXPECT_EQ(ids[0], ids[1]);
    return ids[0];
  };
  EXPECT_EQ(round(true), 1);
  // The same key again: neither the old failure, nor the old arrivals, nor
  // the old id is seen.
  EXPECT_EQ(round(false), 2);
}

// ---- the store side across processes ---------------------------------------------

// Every body opens the job's file store and runs one rank's part; it prints
// "rank R id HEX" or "rank R error code C: ..." (test::exitWithError).
cuda::NcclGroup groupOf(int rank, int size, const std::string& key, int timeoutMs) {
  cuda::NcclGroup g;
  g.rank = rank;
  g.size = size;
  g.globalRanks = {10, 11, 12, 13};  // global ranks 10.. in messages
  g.globalRanks.resize(static_cast<size_t>(size));
  g.key = key;
  g.timeout = milliseconds(timeoutMs);
  return g;
}

int exchangeRealIds(int rank, int size, const std::string& address) {
  try {
    auto store = rendezvous::openStore(address, false, milliseconds(5000));
    cuda::NcclRendezvous r(*store, groupOf(rank, size, "job/comm1", 20000),
                           cuda::NcclRendezvous::Clock::now() + milliseconds(20000));
    r.join();
    const cuda::NcclLibrary::UniqueId id = r.exchangeId([] {
      const cuda::NcclLibrary& lib = cuda::NcclLibrary::load();
      cuda::NcclLibrary::UniqueId made{};
      const int result = lib.getUniqueId(&made);
      if (result != 0) KOLO_THROW(ErrorCode::kInternal, lib.getErrorString(result));
      return made;
    });
    std::printf("rank %d id %s\n", rank, hex(id).c_str());
    return 0;
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
}

TEST(NcclRendezvous, EveryRankGetsRank0sUniqueIdThroughTheStore) {
  std::string reason;
  if (loadOrSkipReason(&reason) == nullptr) GTEST_SKIP() << "no NCCL: " << reason;
  const int n = 3;
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return exchangeRealIds(rank, n, address);
  });
  const auto outcomes = ranks.waitAll(milliseconds(30000));
  std::vector<std::string> ids;
  for (const auto& o : outcomes) {
    ASSERT_TRUE(o.exited && o.exitCode == 0) << "rank " << o.rank << ":\n" << o.output;
    const std::string marker = "rank " + std::to_string(o.rank) + " id ";
    const size_t at = o.output.find(marker);
    ASSERT_NE(at, std::string::npos) << o.output;
    ids.push_back(o.output.substr(at + marker.size(), 256));
  }
  EXPECT_NE(ids[0], std::string(256, '0')) << "ncclGetUniqueId made an id";
  for (int r = 1; r < n; ++r)
    EXPECT_EQ(ids[static_cast<size_t>(r)], ids[0]) << "rank " << r;
}

// Rank `absent` never joins; the others wait `timeoutMs`.
int joinWithout(int rank, int size, int absent, const std::string& address, int timeoutMs,
                bool publishFailure) {
  try {
    auto store = rendezvous::openStore(address, false, milliseconds(5000));
    cuda::NcclRendezvous r(*store, groupOf(rank, size, "job/comm2", timeoutMs),
                           cuda::NcclRendezvous::Clock::now() + milliseconds(timeoutMs));
    if (rank == absent) {
      if (publishFailure) r.fail("rank 12: no NCCL on this host (test)");
      return 0;
    }
    r.join();
    test::sayRank(rank, "joined");
    return 0;
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
}

TEST(NcclRendezvous, ARankThatNeverJoinsIsNamedAtTheTimeout) {
  const int n = 3;
  const int timeoutMs = 1500;
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return joinWithout(rank, n, 2, address, timeoutMs, false);
  });
  const auto outcomes = ranks.waitAll(milliseconds(15000));
  for (int r : {0, 1}) {
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_FALSE(o.hung) << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kTimeout)) << o.output;
    EXPECT_TRUE(
        contains(o.output, "rank 1" + std::to_string(r) +
                               ": NCCL communicator 'job/comm2' (3 ranks): rank 12 "
                               "never joined within 1.5 s (KOLO_TIMEOUT)"))
        << o.output;
    EXPECT_GE(o.seconds, 1.4) << o.output;
  }
}

TEST(NcclRendezvous, APublishedFailureEndsTheOthersWaitAtOnce) {
  const int n = 3;
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return joinWithout(rank, n, 2, address, 20000, true);
  });
  const auto outcomes = ranks.waitAll(milliseconds(30000));
  for (int r : {0, 1}) {
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kPeerLost)) << o.output;
    EXPECT_TRUE(
        contains(o.output, "rank 12 failed to join: rank 12: no NCCL on this host"))
        << o.output;
    EXPECT_LT(o.seconds, 10.0) << "waited for the timeout instead:\n" << o.output;
  }
}

// Rank 0 joins but never publishes the id (it dies in between).
int idNeverComes(int rank, const std::string& address) {
  try {
    auto store = rendezvous::openStore(address, false, milliseconds(5000));
    cuda::NcclRendezvous r(*store, groupOf(rank, 2, "job/comm3", 1500),
                           cuda::NcclRendezvous::Clock::now() + milliseconds(1500));
    r.join();
    if (rank == 0) return 0;
    r.exchangeId([]() -> cuda::NcclLibrary::UniqueId { std::abort(); });
    return 0;
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
}

TEST(NcclRendezvous, AnIdThatNeverComesNamesRank0) {
  test::ProcessRanks ranks(2, [&](int rank, const std::string& address) {
    return idNeverComes(rank, address);
  });
  const auto outcomes = ranks.waitAll(milliseconds(15000));
  EXPECT_EQ(outcomes[0].exitCode, 0) << outcomes[0].output;
  EXPECT_EQ(outcomes[1].exitCode, static_cast<int>(ErrorCode::kTimeout))
      << outcomes[1].output;
  EXPECT_TRUE(contains(outcomes[1].output,
                       "rank 11: NCCL communicator 'job/comm3' (2 ranks): rank 10 never "
                       "published the NCCL unique id within 1.5 s"))
      << outcomes[1].output;
}

// The real factory on a machine where the path is unavailable: rank 0
// fails locally and publishes it; rank 1, waiting in the store, fails at
// once quoting rank 0's cause.
int factoryFailsOnRank0(int rank, const std::string& address) {
  try {
    auto store = rendezvous::openStore(address, false, milliseconds(5000));
    if (rank == 0) {
      cuda::NcclOptions o;
      o.rank = 0;
      o.size = 2;
      o.globalRanks = {10, 11};
      o.timeout = milliseconds(20000);
      o.key = "job/comm4";
      cuda::makeNcclCollectives(o, *store);
      return 0;
    }
    cuda::NcclRendezvous r(*store, groupOf(1, 2, "job/comm4", 20000),
                           cuda::NcclRendezvous::Clock::now() + milliseconds(20000));
    r.join();
    return 0;
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
}

TEST(NcclCollectives, AFailedMemberEndsTheOthersCreationAtOnce) {
  if (cuda::ncclAvailability().version > 0) GTEST_SKIP() << "the NCCL path is available";
  test::ProcessRanks ranks(2, [&](int rank, const std::string& address) {
    return factoryFailsOnRank0(rank, address);
  });
  const auto outcomes = ranks.waitAll(milliseconds(30000));
  EXPECT_EQ(outcomes[0].exitCode, static_cast<int>(ErrorCode::kInvalidArgument))
      << outcomes[0].output;
  EXPECT_EQ(outcomes[1].exitCode, static_cast<int>(ErrorCode::kPeerLost))
      << outcomes[1].output;
  EXPECT_TRUE(
      contains(outcomes[1].output,
               "rank 10 failed to join: rank 10: the NCCL path on CUDA device 0 is "
               "unavailable"))
      << outcomes[1].output;
  EXPECT_LT(outcomes[1].seconds, 10.0) << outcomes[1].output;
}

// ---- the init's poll, against a stand-in NCCL ------------------------------------

// tests/support/fake_nccl.cc, opened by path as NcclLibrary opens NCCL.
struct FakeNccl {
  FakeNccl() : lib(cuda::NcclLibrary::open(KOLO_TEST_FAKE_NCCL)) {
    void* handle = ::dlopen(KOLO_TEST_FAKE_NCCL, RTLD_NOW | RTLD_NOLOAD);
    script = reinterpret_cast<void (*)(int, int)>(::dlsym(handle, "fakeNcclScript"));
    count = reinterpret_cast<int (*)(const char*)>(::dlsym(handle, "fakeNcclCount"));
  }
  std::unique_ptr<cuda::NcclLibrary> lib;
  void (*script)(int polls, int state) = nullptr;
  int (*count)(const char* what) = nullptr;
};

struct InitCase {
  TempStore temp;
  FakeNccl fake;
  cuda::NcclLibrary::UniqueId id{};
  std::unique_ptr<cuda::NcclRendezvous> rendezvous;
  InitCase(int size, const std::string& key, int timeoutMs) {
    cuda::NcclGroup g{0, size, {}, key, milliseconds(timeoutMs)};
    rendezvous = std::make_unique<cuda::NcclRendezvous>(
        *temp.store, g, cuda::NcclRendezvous::Clock::now() + milliseconds(timeoutMs));
  }
  cuda::NcclLibrary::Comm init() {
    return cuda::initCommunicator(*fake.lib, id, *rendezvous, "rank 0: communicator c");
  }
};

TEST(NcclInit, ReturnsTheCommunicatorOnceNcclIsDone) {
  InitCase c(1, "init1", 5000);
  c.fake.script(3, nccl::kSuccess);
  const int aborts = c.fake.count("abort");
  EXPECT_NE(c.init(), nullptr);
  EXPECT_EQ(c.fake.count("abort"), aborts);
  c.fake.script(0, nccl::kSuccess);  // done at once (a blocking NCCL's answer)
  EXPECT_NE(c.init(), nullptr);
}

TEST(NcclInit, AnInitThatNeverEndsIsAbortedAtTheDeadline) {
  InitCase c(1, "init2", 300);
  c.fake.script(-1, nccl::kSuccess);
  const int aborts = c.fake.count("abort");
  const auto start = std::chrono::steady_clock::now();
  const Error e = test::expectError([&] { c.init(); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_TRUE(contains(e.what(),
                       "rank 0: communicator c: ncclCommInitRankConfig not done "
                       "within 0.3 s (KOLO_TIMEOUT), though every rank had "
                       "joined; the communicator was aborted"))
      << e.what();
  EXPECT_EQ(c.fake.count("abort"), aborts + 1);
  EXPECT_GE(seconds, 0.29);
  EXPECT_LT(seconds, 5.0);
}

TEST(NcclInit, NcclsFailureIsNamedAndTheCommunicatorAborted) {
  InitCase c(1, "init3", 5000);
  const int aborts = c.fake.count("abort");
  c.fake.script(2, nccl::kInvalidUsage);
  Error e = test::expectError([&] { c.init(); });
  EXPECT_EQ(e.code(), ErrorCode::kInternal);
  EXPECT_TRUE(contains(e.what(),
                       "rank 0: communicator c: ncclCommInitRankConfig failed: "
                       "invalid usage (fake) (the fake's last error)"))
      << e.what();
  c.fake.script(0, nccl::kRemoteError);  // failed at once
  e = test::expectError([&] { c.init(); });
  EXPECT_EQ(e.code(), ErrorCode::kPeerLost) << e.what();
  EXPECT_TRUE(contains(e.what(), "remote process exited")) << e.what();
  EXPECT_EQ(c.fake.count("abort"), aborts + 2);
}

TEST(NcclInit, AMembersPublishedFailureEndsTheInitAtOnce) {
  InitCase c(2, "init4", 20000);
  cuda::NcclRendezvous other(*c.temp.store, {1, 2, {}, "init4", milliseconds(20000)},
                             cuda::NcclRendezvous::Clock::now() + milliseconds(20000));
  other.fail("rank 1: cudaSetDevice(1) failed (test)");
  c.fake.script(-1, nccl::kSuccess);
  const int aborts = c.fake.count("abort");
  const auto start = std::chrono::steady_clock::now();
  const Error e = test::expectError([&] { c.init(); });
  EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
  EXPECT_EQ(e.peer(), 1);
  EXPECT_TRUE(contains(e.what(),
                       "rank 0: NCCL communicator 'init4': rank 1 failed to join: "
                       "rank 1: cudaSetDevice(1) failed (test)"))
      << e.what();
  EXPECT_EQ(c.fake.count("abort"), aborts + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace kolo
