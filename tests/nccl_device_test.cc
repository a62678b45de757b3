// The NCCL path on a GPU (collectives/cuda/nccl_collectives.h): a 1-rank
// NCCL communicator through every collective, dtype and op, element by
// element against the CPU kernels (collectives/reduce.h, which the host
// collectives run); with 2 or more GPUs the same grid with one rank per GPU
// (ranks as threads of this process, up to 4), uneven counts included, and
// a collective a peer never joins timing out by name; on one GPU the stream
// order, the timeout of a collective held back on its stream, and two
// ranks on one GPU failing (NCCL refuses them) without a hang.
//
// Needs a GPU and NCCL 2.14+: every test skips without them, saying why.
// KOLO_TEST_REQUIRE_GPU=1 turns those skips into failures (the GPU check).
// Run: build/tests/nccl_device_test (scripts/gpu-check.d/ hooks run it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/nccl_collectives.h"
#include "collectives/half_bits.h"
#include "collectives/reduce.h"
#include "rendezvous/store.h"
#include "support/expect_error.h"

#if KOLO_TEST_EXPECT_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kolo {
namespace {

namespace cuda = collectives::cuda;
using std::chrono::milliseconds;

// Why the NCCL path cannot run here ("" when it can).
std::string unavailable() {
#if !KOLO_TEST_EXPECT_CUDA
  return "this kolo build has no CUDA support";
#else
  return cuda::ncclAvailability().version > 0 ? "" : cuda::ncclAvailability().reason;
#endif
}

#define SKIP_WITHOUT_NCCL()                                                    \
  do {                                                                         \
    const std::string why = unavailable();                                     \
    if (!why.empty()) {                                                        \
      if (std::getenv("KOLO_TEST_REQUIRE_GPU")) FAIL() << "required: " << why; \
      GTEST_SKIP() << why;                                                     \
    }                                                                          \
  } while (0)

#if KOLO_TEST_EXPECT_CUDA

using Bytes = std::vector<uint8_t>;

const DataType kDtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                            DataType::kUInt8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                         ReduceOp::kMax, ReduceOp::kProduct};

// Small whole values (and halves): sums and products of up to 4 ranks are
// exact in every dtype, so NCCL's order and precision of reduction (which
// differ from the CPU kernels', docs/gpu.md) cannot change the bits.
Bytes values(DataType d, size_t n, int rank, int salt) {
  const size_t w = elementSize(d);
  Bytes out(n * w);
  for (size_t i = 0; i < n; ++i) {
    const int v =
        static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3 + salt) % 5) - 2;
    uint8_t* p = out.data() + i * w;
    const float f = static_cast<float>(v) * 0.5f;
    const double g = v * 0.25;
    const uint16_t h = collectives::floatToHalfBits(f);
    const uint16_t b = collectives::floatToBfloat16Bits(f);
    const int32_t x = v;
    const int64_t y = v;
    switch (d) {
      case DataType::kFloat32: std::memcpy(p, &f, 4); break;
      case DataType::kFloat64: std::memcpy(p, &g, 8); break;
      case DataType::kFloat16: std::memcpy(p, &h, 2); break;
      case DataType::kBFloat16: std::memcpy(p, &b, 2); break;
      case DataType::kInt32: std::memcpy(p, &x, 4); break;
      case DataType::kInt64: std::memcpy(p, &y, 8); break;
      case DataType::kUInt8: *p = static_cast<uint8_t>(v + 2); break;
    }
  }
  return out;
}

// The CPU kernels' reduction of every rank's block (offset, count).
Bytes reduced(DataType d, ReduceOp op, const std::vector<Bytes>& inputs, size_t offset,
              size_t count) {
  const size_t w = elementSize(d);
  std::vector<const void*> srcs;
  for (const Bytes& in : inputs) srcs.push_back(in.data() + offset * w);
  Bytes out(count * w);
  if (count == 0) return out;
  collectives::reduceMany(out.data(), srcs.data(), static_cast<int>(srcs.size()), count,
                          d, op);
  if (op == ReduceOp::kAverage) {
    collectives::divideInPlace(out.data(), count, d, static_cast<double>(inputs.size()));
  }
  return out;
}

class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes ? bytes : 1), cudaSuccess);
  }
  ~DeviceMem() { cudaFree(p_); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  void* get() const { return p_; }
  char* at(size_t byte) const { return static_cast<char*>(p_) + byte; }
  void upload(const Bytes& host, size_t byte = 0) {
    if (host.empty()) return;
    EXPECT_EQ(cudaMemcpy(at(byte), host.data(), host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  Bytes download(size_t byte = 0, size_t bytes = SIZE_MAX) const {
    Bytes out(bytes == SIZE_MAX ? bytes_ - byte : bytes);
    if (out.empty()) return out;
    EXPECT_EQ(cudaMemcpy(out.data(), at(byte), out.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// "" when equal, else the first element that differs, named.
std::string differs(const Bytes& got, const Bytes& want, DataType d,
                    const std::string& what) {
  if (got.size() != want.size()) {
    return what + ": " + std::to_string(got.size()) + " bytes, expected " +
           std::to_string(want.size());
  }
  const size_t w = elementSize(d);
  for (size_t i = 0; i * w < got.size(); ++i) {
    if (std::memcmp(got.data() + i * w, want.data() + i * w, w) != 0) {
      return what + ": element " + std::to_string(i) + " of " +
             std::to_string(got.size() / w) + " differs from the CPU kernels' result";
    }
  }
  return "";
}

// A file store in a fresh directory, removed at the end.
struct TempStore {
  TempStore() {
    char dir[] = "/tmp/kolo-nccl-gpu-XXXXXX";
    path = ::mkdtemp(dir) ? dir : "";
    store = rendezvous::openStore("file://" + path, false, milliseconds(1000));
  }
  ~TempStore() { std::filesystem::remove_all(path); }
  std::string path;
  std::unique_ptr<rendezvous::Store> store;
};

std::string nameOf(const char* what, DataType d, size_t n, const std::string& more = "") {
  return std::string(what) + " of " + std::to_string(n) + " " + std::string(toString(d)) +
         (more.empty() ? "" : " " + more);
}

std::vector<size_t> prefix(const std::vector<size_t>& counts) {
  std::vector<size_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

size_t sum(const std::vector<size_t>& counts) {
  size_t s = 0;
  for (size_t c : counts) s += c;
  return s;
}

// Equal counts, and uneven ones with an empty block (rank 1's).
std::vector<std::vector<size_t>> countsFor(int size, size_t n) {
  std::vector<size_t> equal(static_cast<size_t>(size), n), uneven;
  for (int i = 0; i < size; ++i)
    uneven.push_back(i == 1 ? 0 : n + static_cast<size_t>(i) * 3);
  return {equal, uneven};
}

using Notes = std::vector<std::string>;

void checkAllreduce(cuda::DeviceCollectives& c, DataType d, size_t n, void* stream,
                    Notes& notes) {
  const size_t w = elementSize(d);
  std::vector<Bytes> inputs;
  for (int r = 0; r < c.size(); ++r) inputs.push_back(values(d, n, r, 1));
  for (ReduceOp op : kOps) {
    const Bytes want = reduced(d, op, inputs, 0, n);
    DeviceMem send(n * w), recv(n * w);
    send.upload(inputs[static_cast<size_t>(c.rank())]);
    c.allreduce(send.get(), recv.get(), n, d, op, stream);
    notes.push_back(differs(recv.download(), want, d,
                            nameOf("allreduce", d, n, std::string(toString(op)))));
    c.allreduce(send.get(), send.get(), n, d, op, stream);
    notes.push_back(
        differs(send.download(), want, d,
                nameOf("allreduce in place", d, n, std::string(toString(op)))));
  }
}

void checkReduceScatter(cuda::DeviceCollectives& c, DataType d, size_t n, void* stream,
                        Notes& notes) {
  const size_t w = elementSize(d);
  const auto me = static_cast<size_t>(c.rank());
  for (const auto& counts : countsFor(c.size(), n)) {
    const std::vector<size_t> at = prefix(counts);
    std::vector<Bytes> inputs;
    for (int r = 0; r < c.size(); ++r) inputs.push_back(values(d, sum(counts), r, 2));
    for (ReduceOp op : kOps) {
      DeviceMem send(sum(counts) * w), recv(counts[me] * w);
      send.upload(inputs[me]);
      c.reduceScatter(send.get(), recv.get(), counts, d, op, stream);
      notes.push_back(differs(
          recv.download(), reduced(d, op, inputs, at[me], counts[me]), d,
          nameOf("reduceScatter", d, sum(counts),
                 std::string(toString(op)) + " block " + std::to_string(counts[me]))));
    }
  }
}

void checkBroadcastAndAllgather(cuda::DeviceCollectives& c, DataType d, size_t n,
                                void* stream, Notes& notes) {
  const size_t w = elementSize(d);
  const auto me = static_cast<size_t>(c.rank());
  for (int root = 0; root < c.size(); ++root) {
    DeviceMem buffer(n * w);
    buffer.upload(values(d, n, c.rank(), 5 + root));
    c.broadcast(buffer.get(), n, d, root, stream);
    notes.push_back(differs(buffer.download(), values(d, n, root, 5 + root), d,
                            nameOf("broadcast", d, n, "from " + std::to_string(root))));
  }
  for (const auto& counts : countsFor(c.size(), n)) {
    const std::vector<size_t> at = prefix(counts);
    Bytes want;
    for (int r = 0; r < c.size(); ++r) {
      const Bytes block = values(d, counts[static_cast<size_t>(r)], r, 3);
      want.insert(want.end(), block.begin(), block.end());
    }
    const Bytes mine = values(d, counts[me], c.rank(), 3);
    DeviceMem send(mine.size()), recv(want.size()), inPlace(want.size());
    send.upload(mine);
    c.allgather(send.get(), recv.get(), counts, d, stream);
    notes.push_back(
        differs(recv.download(), want, d, nameOf("allgather", d, sum(counts))));
    inPlace.upload(mine, at[me] * w);
    c.allgather(inPlace.at(at[me] * w), inPlace.get(), counts, d, stream);
    notes.push_back(differs(inPlace.download(), want, d,
                            nameOf("allgather in place", d, sum(counts))));
  }
}

// Rank r sends (2r + j) % 3 + n elements to rank j.
size_t sendCount(int from, int to, size_t n) {
  return static_cast<size_t>((2 * from + to) % 3) + n;
}

void checkAlltoall(cuda::DeviceCollectives& c, DataType d, size_t n, void* stream,
                   Notes& notes) {
  const size_t w = elementSize(d);
  const int size = c.size();
  auto sendsOf = [&](int r) {
    std::vector<size_t> counts;
    for (int j = 0; j < size; ++j) counts.push_back(sendCount(r, j, n));
    return counts;
  };
  std::vector<size_t> recvCounts;
  Bytes want;
  for (int i = 0; i < size; ++i) {
    const std::vector<size_t> theirs = sendsOf(i);
    const Bytes all = values(d, sum(theirs), i, 4);
    const size_t from = prefix(theirs)[static_cast<size_t>(c.rank())] * w;
    recvCounts.push_back(theirs[static_cast<size_t>(c.rank())]);
    want.insert(want.end(), all.begin() + static_cast<long>(from),
                all.begin() + static_cast<long>(from + recvCounts.back() * w));
  }
  const std::vector<size_t> sendCounts = sendsOf(c.rank());
  DeviceMem send(sum(sendCounts) * w), recv(want.size());
  send.upload(values(d, sum(sendCounts), c.rank(), 4));
  c.alltoall(send.get(), sendCounts, recv.get(), recvCounts, d, stream);
  notes.push_back(
      differs(recv.download(), want, d, nameOf("alltoall", d, sum(recvCounts))));
}

// One rank's run of the whole grid on a stream of its own; returns the
// differences found (at most 20).
Notes runGrid(cuda::DeviceCollectives& c, const std::vector<size_t>& sizes) {
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Notes notes;
  for (DataType d : kDtypes) {
    for (size_t n : sizes) {
      checkAllreduce(c, d, n, stream, notes);
      checkReduceScatter(c, d, n, stream, notes);
      checkBroadcastAndAllgather(c, d, n, stream, notes);
      checkAlltoall(c, d, n, stream, notes);
    }
  }
  cudaStreamDestroy(stream);
  Notes failures;
  for (std::string& note : notes) {
    if (!note.empty() && failures.size() < 20) failures.push_back(std::move(note));
  }
  return failures;
}

// Runs body(rank) on `size` threads, rank r on deviceOf(r), each with its
// communicator from one store; returns each rank's failures.
std::vector<Notes> onThreads(int size, int timeoutMs,
                             const std::function<int(int)>& deviceOf,
                             const std::function<Notes(cuda::DeviceCollectives&)>& body) {
  static int counter = 0;
  TempStore temp;
  const std::string key = "nccl-device-test/" + std::to_string(++counter);
  std::vector<Notes> failures(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Notes& out = failures[static_cast<size_t>(r)];
      try {
        cudaSetDevice(deviceOf(r));
        cuda::NcclOptions o;
        o.rank = r;
        o.size = size;
        o.device = deviceOf(r);
        o.timeout = milliseconds(timeoutMs);
        o.key = key;
        auto c = cuda::makeNcclCollectives(o, *temp.store);
        out = body(*c);
      } catch (const Error& e) {
        out.push_back(std::string("error code ") +
                      std::to_string(static_cast<int>(e.code())) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

int sameAsRank(int r) {
  return r;
}

int deviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#endif  // KOLO_TEST_EXPECT_CUDA

TEST(NcclDevice, OneRankRunsEveryCollectiveDtypeAndOp) {
  SKIP_WITHOUT_NCCL();
#if KOLO_TEST_EXPECT_CUDA
  const auto failures = onThreads(1, 60000, sameAsRank, [](cuda::DeviceCollectives& c) {
    EXPECT_EQ(c.name(), "nccl");
    EXPECT_EQ(c.size(), 1);
    return runGrid(c, {1, 1000, 70001});
  });
  for (const std::string& f : failures[0]) ADD_FAILURE() << f;
#endif
}

TEST(NcclDevice, OneRankPerGpuRunsEveryCollectiveDtypeAndOp) {
  SKIP_WITHOUT_NCCL();
#if KOLO_TEST_EXPECT_CUDA
  const int n = std::min(deviceCount(), 4);
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, found " << n;
  const auto failures = onThreads(n, 60000, sameAsRank, [](cuda::DeviceCollectives& c) {
    return runGrid(c, {1, 1000, 70001});
  });
  for (size_t r = 0; r < failures.size(); ++r) {
    for (const std::string& f : failures[r]) ADD_FAILURE() << "rank " << r << ": " << f;
  }
#endif
}

#if KOLO_TEST_EXPECT_CUDA
void CUDART_CB holdStream(void* ms) {
  std::this_thread::sleep_for(milliseconds(*static_cast<int*>(ms)));
}
#endif

// The inputs are written on the caller's stream behind a host function
// that holds it for 300 ms, and the collective is called at once: it must
// read them after that work (stream order), not before.
TEST(NcclDevice, ReadsItsInputsInStreamOrder) {
  SKIP_WITHOUT_NCCL();
#if KOLO_TEST_EXPECT_CUDA
  const auto failures = onThreads(1, 60000, sameAsRank, [](cuda::DeviceCollectives& c) {
    cudaStream_t stream = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const size_t n = 1 << 20;
    const Bytes old = values(DataType::kFloat32, n, 0, 1);
    const Bytes fresh = values(DataType::kFloat32, n, 0, 2);
    DeviceMem buffer(n * 4), out(n * 4);
    buffer.upload(old);
    static int ms = 300;
    EXPECT_EQ(cudaLaunchHostFunc(stream, holdStream, &ms), cudaSuccess);
    // Pinned, so that the copy is queued behind the host function instead
    // of blocking this thread until it ran.
    void* pinned = nullptr;
    EXPECT_EQ(cudaMallocHost(&pinned, n * 4), cudaSuccess);
    std::memcpy(pinned, fresh.data(), n * 4);
    EXPECT_EQ(
        cudaMemcpyAsync(buffer.get(), pinned, n * 4, cudaMemcpyHostToDevice, stream),
        cudaSuccess);
    c.allreduce(buffer.get(), out.get(), n, DataType::kFloat32, ReduceOp::kSum, stream);
    Notes notes{differs(out.download(), fresh, DataType::kFloat32, "allreduce")};
    cudaStreamDestroy(stream);
    cudaFreeHost(pinned);
    if (notes[0].empty()) notes.clear();
    return notes;
  });
  for (const std::string& f : failures[0]) ADD_FAILURE() << f;
#endif
}

// A collective whose stream is held past the timeout fails with kTimeout
// naming the rank, the operation and KOLO_TIMEOUT; the object is broken
// after it (the same error again), and nothing hangs.
TEST(NcclDevice, ACollectivePastTheTimeoutFailsByNameAndBreaksTheObject) {
  SKIP_WITHOUT_NCCL();
#if KOLO_TEST_EXPECT_CUDA
  const auto start = std::chrono::steady_clock::now();
  const auto failures = onThreads(1, 1000, sameAsRank, [](cuda::DeviceCollectives& c) {
    cudaStream_t stream = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    DeviceMem buffer(4000);
    static int ms = 3000;
    EXPECT_EQ(cudaLaunchHostFunc(stream, holdStream, &ms), cudaSuccess);
    const Error first = test::expectError([&] {
      c.allreduce(buffer.get(), buffer.get(), 1000, DataType::kFloat32, ReduceOp::kSum,
                  stream);
    });
    const Error again = test::expectError(
        [&] { c.broadcast(buffer.get(), 1000, DataType::kFloat32, 0, stream); });
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    Notes notes;
    if (first.code() != ErrorCode::kTimeout)
      notes.push_back(std::string("code: ") + first.what());
    if (!test::contains(first.what(),
                        "rank 0: NCCL allreduce of 1000 float32 (sum) on CUDA "
                        "device 0 not done after 1 s (KOLO_TIMEOUT)")) {
      notes.push_back(std::string("message: ") + first.what());
    }
    if (std::string(again.what()) != first.what()) {
      notes.push_back(std::string("not broken: ") + again.what());
    }
    return notes;
  });
  for (const std::string& f : failures[0]) ADD_FAILURE() << f;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
#endif
}

// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): creation
// fails on both, by name, without a hang. (Were it to succeed, no
// collective is run: a cudaFree on one rank's thread would wait for the
// other's kernel on the shared device.)
TEST(NcclDevice, TwoRanksOnOneGpuFailWithoutAHang) {
  SKIP_WITHOUT_NCCL();
#if KOLO_TEST_EXPECT_CUDA
  const auto start = std::chrono::steady_clock::now();
  const auto failures = onThreads(
      2, 5000, [](int) { return 0; }, [](cuda::DeviceCollectives&) { return Notes{}; });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  for (size_t r = 0; r < failures.size(); ++r) {
    for (const std::string& f : failures[r]) {
      EXPECT_TRUE(test::contains(f, "rank " + std::to_string(r) + ": NCCL communicator"))
          << f;
      std::printf("rank %zu: %s\n", r, f.c_str());  // for the GPU check's log
    }
  }
#endif
}

// With 2 GPUs: rank 1 never calls the allreduce; rank 0 fails by name at
// the timeout instead of waiting for ever.
TEST(NcclDevice, APeerThatNeverCallsTimesOutByName) {
  SKIP_WITHOUT_NCCL();
#if KOLO_TEST_EXPECT_CUDA
  if (deviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << deviceCount();
  const auto failures = onThreads(2, 2000, sameAsRank, [](cuda::DeviceCollectives& c) {
    Notes notes;
    if (c.rank() == 1) return notes;
    DeviceMem buffer(4000);
    const Error e = test::expectError([&] {
      c.allreduce(buffer.get(), buffer.get(), 1000, DataType::kFloat32, ReduceOp::kSum,
                  nullptr);
    });
    if (e.code() != ErrorCode::kTimeout ||
        !test::contains(e.what(), "rank 0: NCCL allreduce of 1000 float32 (sum)")) {
      notes.push_back(e.what());
    }
    return notes;
  });
  for (const std::string& f : failures[0]) ADD_FAILURE() << f;
#endif
}

}  // namespace
}  // namespace kolo
