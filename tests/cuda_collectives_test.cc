// Every kolo collective on CUDA device memory (the host-staged path,
// docs/gpu.md), against the same collective on host memory, element by
// element, bit for bit (both run the same CPU collective on the same
// bytes): the synchronous `_cuda` calls of kolo/cuda.h and the runtime's
// `_cuda` submissions of kolo/runtime.h, every dtype and op, fused and
// grouped allreduces, prescale and postscale, the stream order (inputs
// written on the caller's stream, held back 300 ms, right before the
// call), the done event,
// a device pointer given to a host call (refused by name), and device and
// host memory under one name on different ranks (a mismatch naming
// "memory"). The path the synchronous calls took (KOLO_DEVICE_PATH: staged,
// ipc, nccl, hier) is printed as "device path of the synchronous calls:
// <name>" and must be the one KOLO_DEVICE_PATH asks for; the runtime's
// path is its debug log line (KOLO_LOG_LEVEL=debug).
//
// Needs a GPU: every test skips without one, saying why. On the GPU check
// (scripts/gpu-check.sh) it runs with 1 rank (ctest) and under
// `kolorun -np 2` and `-np 3`, the ranks sharing the GPU.
#include <gtest/gtest.h>
#include <kolo/cuda.h>
#include <kolo/kolo.h>
#include <kolo/runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "api/communicator_impl.h"
#include "capi/capi_internal.h"
#include "collectives/half_bits.h"

#if KOLO_TEST_EXPECT_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

#if KOLO_TEST_EXPECT_CUDA

using Bytes = std::vector<uint8_t>;

const kolo_dtype kDtypes[] = {KOLO_FLOAT32, KOLO_FLOAT64, KOLO_FLOAT16, KOLO_BFLOAT16,
                              KOLO_INT32,   KOLO_INT64,   KOLO_UINT8};
const kolo_op kOps[] = {KOLO_SUM, KOLO_AVG, KOLO_MIN, KOLO_MAX, KOLO_PROD};
const char* kDtypeNames[] = {"float32", "float64", "float16", "bfloat16",
                             "int32",   "int64",   "uint8"};
const char* kOpNames[] = {"sum", "average", "min", "max", "product"};

size_t esize(kolo_dtype d) {
  switch (d) {
    case KOLO_FLOAT64:
    case KOLO_INT64: return 8;
    case KOLO_FLOAT16:
    case KOLO_BFLOAT16: return 2;
    case KOLO_UINT8: return 1;
    default: return 4;
  }
}

// Small whole values (products of 3 ranks stay exact), different per rank
// and element, some negative (not for uint8).
Bytes values(kolo_dtype d, size_t n, int rank, int salt) {
  Bytes out(n * esize(d));
  for (size_t i = 0; i < n; ++i) {
    const int v = static_cast<int>((i * 7 + rank * 3 + salt) % 9) - 4;
    uint8_t* p = out.data() + i * esize(d);
    switch (d) {
      case KOLO_FLOAT32: {
        const float f = v * 0.5f;
        std::memcpy(p, &f, 4);
        break;
      }
      case KOLO_FLOAT64: {
        const double f = v * 0.25;
        std::memcpy(p, &f, 8);
        break;
      }
      case KOLO_FLOAT16: {
        const uint16_t h = kolo::collectives::floatToHalfBits(v * 0.5f);
        std::memcpy(p, &h, 2);
        break;
      }
      case KOLO_BFLOAT16: {
        const uint16_t h = kolo::collectives::floatToBfloat16Bits(v * 0.5f);
        std::memcpy(p, &h, 2);
        break;
      }
      case KOLO_INT32: {
        const int32_t x = v;
        std::memcpy(p, &x, 4);
        break;
      }
      case KOLO_INT64: {
        const int64_t x = v;
        std::memcpy(p, &x, 8);
        break;
      }
      case KOLO_UINT8: *p = static_cast<uint8_t>(v + 4); break;
    }
  }
  return out;
}

// Allocations are never returned to CUDA while kolo runs, as a framework's
// caching allocator keeps them: the IPC path's peers keep an allocation
// mapped after a call, and a cudaFree of memory another process maps is
// undefined (collectives/cuda/ipc_collectives.h). A released buffer waits
// here, by size, for the next of that size.
class DevicePool {
 public:
  static void* take(size_t bytes) {
    std::vector<void*>& idle = pool()[bytes];
    if (!idle.empty()) {
      void* p = idle.back();
      idle.pop_back();
      return p;
    }
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    return p;
  }
  static void give(void* p, size_t bytes) { pool()[bytes].push_back(p); }

 private:
  static std::map<size_t, std::vector<void*>>& pool() {
    static std::map<size_t, std::vector<void*>> idle;
    return idle;
  }
};

// Device memory that the test's own CUDA runtime allocates (as a
// framework's would).
class DeviceMem {
 public:
  explicit DeviceMem(size_t bytes)
      : p_(DevicePool::take(bytes ? bytes : 1)), bytes_(bytes) {}
  explicit DeviceMem(const Bytes& host) : DeviceMem(host.size()) { upload(host); }
  ~DeviceMem() { DevicePool::give(p_, bytes_ ? bytes_ : 1); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  void* get() const { return p_; }
  void upload(const Bytes& host) {
    EXPECT_EQ(cudaMemcpy(p_, host.data(), host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  Bytes download() const {
    Bytes out(bytes_);
    EXPECT_EQ(cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// The first element that differs, named; "" when equal.
std::string differs(const Bytes& device, const Bytes& host, kolo_dtype d,
                    const std::string& what) {
  if (device.size() != host.size()) {
    return what + ": " + std::to_string(device.size()) + " bytes on the device path, " +
           std::to_string(host.size()) + " on the host path";
  }
  const size_t e = esize(d);
  for (size_t i = 0; i * e < device.size(); ++i) {
    if (std::memcmp(device.data() + i * e, host.data() + i * e, e) != 0) {
      return what + ": element " + std::to_string(i) + " of " +
             std::to_string(device.size() / e) + " differs from the host result (rank " +
             std::to_string(kolo_rank()) + ", " + kDtypeNames[d] + ")";
    }
  }
  return "";
}

class CudaCollectives : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int count = 0;
    const char* reason = nullptr;
    kolo_cuda_device_count(&count, &reason);
    devices_ = count;
    reason_ = reason ? reason : "";
    if (devices_ > 0) initialized_ = kolo_init() == KOLO_OK;
  }
  static void TearDownTestSuite() {
    if (initialized_) kolo_finalize();
    initialized_ = false;
  }
  void SetUp() override {
    if (devices_ == 0) GTEST_SKIP() << "no CUDA device: " << reason_;
    ASSERT_TRUE(initialized_) << kolo_last_error();
    memory_.device = kolo_local_rank() % devices_;
    ASSERT_EQ(cudaSetDevice(memory_.device), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    memory_.stream = stream_;
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  static std::string name(const char* what, int i) {
    return std::string(what) + "." + std::to_string(i);
  }
  // Waits and returns kolo_handle_output's bytes (and releases).
  static Bytes output(kolo_handle h) {
    EXPECT_EQ(kolo_wait(h), KOLO_OK) << kolo_last_error();
    const void* data = nullptr;
    size_t bytes = 0;
    int ndim = 0;
    const int64_t* shape = nullptr;
    EXPECT_EQ(kolo_handle_output(h, &data, &bytes, &ndim, &shape), KOLO_OK)
        << kolo_last_error();
    Bytes out(static_cast<const uint8_t*>(data),
              static_cast<const uint8_t*>(data) + bytes);
    kolo_release(h);
    return out;
  }

  static inline int devices_ = 0;
  static inline std::string reason_;
  static inline bool initialized_ = false;
  kolo_cuda_memory memory_ = {0, nullptr};
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudaCollectives, SynchronousCallsMatchTheHostForEveryDtypeAndOp) {
  const int size = kolo_size(), rank = kolo_rank();
  for (kolo_dtype d : kDtypes) {
    for (kolo_op op : kOps) {
      for (size_t n : {size_t{1}, size_t{1037}}) {
        const std::string what =
            std::string("allreduce ") + kOpNames[op] + " of " + std::to_string(n);
        const Bytes in = values(d, n, rank, op);
        Bytes host(in.size());
        ASSERT_EQ(kolo_allreduce(in.data(), host.data(), n, d, op), KOLO_OK);
        DeviceMem send(in), recv(in.size());
        ASSERT_EQ(kolo_allreduce_cuda(send.get(), recv.get(), n, d, op, &memory_),
                  KOLO_OK)
            << kolo_last_error();
        ASSERT_EQ(differs(recv.download(), host, d, what), "");
        // In place.
        ASSERT_EQ(kolo_allreduce_cuda(send.get(), send.get(), n, d, op, &memory_),
                  KOLO_OK);
        ASSERT_EQ(differs(send.download(), host, d, what + " in place"), "");
      }
      const size_t block = 301;
      const Bytes in = values(d, block * size, rank, 3 + op);
      Bytes host(block * esize(d));
      ASSERT_EQ(kolo_reduce_scatter(in.data(), host.data(), block, d, op), KOLO_OK);
      DeviceMem send(in), recv(host.size());
      ASSERT_EQ(kolo_reduce_scatter_cuda(send.get(), recv.get(), block, d, op, &memory_),
                KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(differs(recv.download(), host, d,
                        std::string("reduce_scatter ") + kOpNames[op]),
                "");
    }
    const size_t n = 517;
    for (int root = 0; root < size; ++root) {
      Bytes host = values(d, n, rank, root);
      DeviceMem buf(host);
      ASSERT_EQ(kolo_broadcast(host.data(), n, d, root), KOLO_OK);
      ASSERT_EQ(kolo_broadcast_cuda(buf.get(), n, d, root, &memory_), KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(
          differs(buf.download(), host, d, "broadcast from " + std::to_string(root)), "");
    }
    const Bytes in = values(d, n * size, rank, 5);
    Bytes gathered(in.size() * size), exchanged(in.size());
    ASSERT_EQ(kolo_allgather(in.data(), gathered.data(), n * size, d), KOLO_OK);
    ASSERT_EQ(kolo_alltoall(in.data(), exchanged.data(), n, d), KOLO_OK);
    DeviceMem send(in), recvGathered(gathered.size()), recvExchanged(exchanged.size());
    ASSERT_EQ(kolo_allgather_cuda(send.get(), recvGathered.get(), n * size, d, &memory_),
              KOLO_OK)
        << kolo_last_error();
    ASSERT_EQ(kolo_alltoall_cuda(send.get(), recvExchanged.get(), n, d, &memory_),
              KOLO_OK)
        << kolo_last_error();
    ASSERT_EQ(differs(recvGathered.download(), gathered, d, "allgather"), "");
    ASSERT_EQ(differs(recvExchanged.download(), exchanged, d, "alltoall"), "");
  }
}

// Several device allreduces and a group in one cycle (fused on the device,
// one staging copy per run), host allreduces beside them (their own
// buckets), sizes on both sides of the 256 KiB fusion limit, and prescale
// and postscale for the floating types.
TEST_F(CudaCollectives, RuntimeAllreducesMatchTheHostForEveryDtypeAndOp) {
  const int rank = kolo_rank();
  const size_t sizes[] = {1, 100, 4099, 70001};
  constexpr int kTensors = 4, kGroup = 3;
  int step = 0;
  for (kolo_dtype d : kDtypes) {
    const bool floating = d <= KOLO_BFLOAT16;
    for (kolo_op op : kOps) {
      const double pre = floating && op == KOLO_SUM ? 0.5 : 1.0;
      const double post = floating && op == KOLO_SUM ? 4.0 : 1.0;
      ++step;
      std::vector<Bytes> in, host(kTensors + kGroup);
      std::vector<std::unique_ptr<DeviceMem>> dev;
      std::vector<kolo_handle> hd(kTensors + kGroup), hh(kTensors + kGroup);
      for (int t = 0; t < kTensors + kGroup; ++t) {
        const size_t n = sizes[t % 4];
        in.push_back(values(d, n, rank, t + op));
        host[t].resize(in[t].size());
        dev.push_back(std::make_unique<DeviceMem>(in[t]));
      }
      for (int t = 0; t < kTensors; ++t) {
        const int64_t shape[] = {static_cast<int64_t>(sizes[t % 4])};
        ASSERT_EQ(kolo_allreduce_async_cuda(name("dev", step * 100 + t).c_str(),
                                            dev[t]->get(), dev[t]->get(), 1, shape, d, op,
                                            pre, post, 0, &hd[t], &memory_),
                  KOLO_OK)
            << kolo_last_error();
        ASSERT_EQ(
            kolo_allreduce_async(name("host", step * 100 + t).c_str(), in[t].data(),
                                 host[t].data(), 1, shape, d, op, pre, post, 0, &hh[t]),
            KOLO_OK)
            << kolo_last_error();
      }
      std::vector<std::string> dn, hn;
      std::vector<const char*> dnames, hnames;
      std::vector<const void*> dsends, hsends;
      std::vector<void*> drecvs, hrecvs;
      std::vector<int> ndims(kGroup, 1);
      std::vector<int64_t> dims(kGroup);
      std::vector<const int64_t*> shapes;
      for (int g = 0; g < kGroup; ++g) {
        const int t = kTensors + g;
        dn.push_back(name("gdev", step * 100 + g));
        hn.push_back(name("ghost", step * 100 + g));
        dsends.push_back(dev[t]->get());
        drecvs.push_back(dev[t]->get());
        hsends.push_back(in[t].data());
        hrecvs.push_back(host[t].data());
        dims[g] = static_cast<int64_t>(sizes[t % 4]);
      }
      for (int g = 0; g < kGroup; ++g) {
        dnames.push_back(dn[g].c_str());
        hnames.push_back(hn[g].c_str());
        shapes.push_back(&dims[g]);
      }
      ASSERT_EQ(kolo_grouped_allreduce_async_cuda(
                    kGroup, dnames.data(), dsends.data(), drecvs.data(), ndims.data(),
                    shapes.data(), d, op, pre, post, 0, &hd[kTensors], &memory_),
                KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(kolo_grouped_allreduce_async(kGroup, hnames.data(), hsends.data(),
                                             hrecvs.data(), ndims.data(), shapes.data(),
                                             d, op, pre, post, 0, &hh[kTensors]),
                KOLO_OK)
          << kolo_last_error();
      for (int t = 0; t < kTensors + kGroup; ++t) {
        ASSERT_EQ(kolo_wait(hd[t]), KOLO_OK) << kolo_last_error();
        ASSERT_EQ(kolo_wait(hh[t]), KOLO_OK) << kolo_last_error();
        void* event = nullptr;
        ASSERT_EQ(kolo_handle_cuda_event(hd[t], &event), KOLO_OK);
        EXPECT_NE(event, nullptr) << "a done device operation has its done event";
        ASSERT_EQ(kolo_handle_cuda_event(hh[t], &event), KOLO_OK);
        EXPECT_EQ(event, nullptr) << "a host operation has none";
        kolo_release(hd[t]);
        kolo_release(hh[t]);
        ASSERT_EQ(differs(dev[t]->download(), host[t], d,
                          std::string("runtime allreduce ") + kOpNames[op] + " tensor " +
                              std::to_string(t)),
                  "");
      }
    }
  }
}

TEST_F(CudaCollectives, RuntimeBroadcastAllgatherAlltoallReducescatterMatchTheHost) {
  const int size = kolo_size(), rank = kolo_rank();
  int step = 0;
  for (kolo_dtype d : kDtypes) {
    ++step;
    const int64_t row = 33;
    // Broadcast from the last rank.
    {
      const int64_t shape[] = {7, row};
      Bytes host = values(d, 7 * row, rank, 1);
      DeviceMem buf(host);
      kolo_handle a = 0, b = 0;
      ASSERT_EQ(kolo_broadcast_async_cuda(name("bdev", step).c_str(), buf.get(), 2, shape,
                                          d, size - 1, 0, &a, &memory_),
                KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(kolo_broadcast_async(name("bhost", step).c_str(), host.data(), 2, shape,
                                     d, size - 1, 0, &b),
                KOLO_OK);
      ASSERT_EQ(kolo_wait_release(a), KOLO_OK) << kolo_last_error();
      ASSERT_EQ(kolo_wait_release(b), KOLO_OK);
      ASSERT_EQ(differs(buf.download(), host, d, "runtime broadcast"), "");
    }
    // Allgather: rank r gives r + 1 rows.
    {
      const int64_t shape[] = {rank + 1, row};
      const Bytes in = values(d, (rank + 1) * row, rank, 2);
      DeviceMem send(in);
      kolo_handle a = 0, b = 0;
      ASSERT_EQ(kolo_allgather_async_cuda(name("gdev", step).c_str(), send.get(), 2,
                                          shape, d, 0, &a, &memory_),
                KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(kolo_allgather_async(name("ghost", step).c_str(), in.data(), 2, shape, d,
                                     0, &b),
                KOLO_OK);
      ASSERT_EQ(differs(output(a), output(b), d, "runtime allgather"), "");
    }
    // Alltoall: rank r sends q + 1 rows to rank q.
    {
      std::vector<int64_t> splits(size);
      int64_t rows = 0;
      for (int q = 0; q < size; ++q) rows += splits[q] = q + 1;
      const int64_t shape[] = {rows, row};
      const Bytes in = values(d, rows * row, rank, 3);
      DeviceMem send(in);
      kolo_handle a = 0, b = 0;
      ASSERT_EQ(kolo_alltoall_async_cuda(name("adev", step).c_str(), send.get(), 2, shape,
                                         splits.data(), size, d, 0, &a, &memory_),
                KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(kolo_alltoall_async(name("ahost", step).c_str(), in.data(), 2, shape,
                                    splits.data(), size, d, 0, &b),
                KOLO_OK);
      ASSERT_EQ(differs(output(a), output(b), d, "runtime alltoall"), "");
    }
    // Reducescatter, every op.
    for (kolo_op op : kOps) {
      const int64_t shape[] = {2 * size, row};
      const Bytes in = values(d, 2 * size * row, rank, 4 + op);
      DeviceMem send(in);
      kolo_handle a = 0, b = 0;
      ASSERT_EQ(
          kolo_reducescatter_async_cuda(name("rdev", step * 10 + op).c_str(), send.get(),
                                        2, shape, d, op, 0, &a, &memory_),
          KOLO_OK)
          << kolo_last_error();
      ASSERT_EQ(kolo_reducescatter_async(name("rhost", step * 10 + op).c_str(), in.data(),
                                         2, shape, d, op, 0, &b),
                KOLO_OK);
      ASSERT_EQ(differs(output(a), output(b), d,
                        std::string("runtime reducescatter ") + kOpNames[op]),
                "");
    }
  }
}

// The input is written on the caller's stream behind a host function that
// holds the stream for 300 ms, and submitted at once, without a
// synchronize: kolo must read it after that work (its ready event), never
// before (it would read the zeros written first).
TEST_F(CudaCollectives, InputsAreReadAfterTheCallersStream) {
  const size_t n = 1 << 20;
  DeviceMem buf(n * 4);
  ASSERT_EQ(cudaMemsetAsync(buf.get(), 0, n * 4, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(
      cudaLaunchHostFunc(
          stream_,
          [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
          nullptr),
      cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.get(), 1, n * 4, stream_), cudaSuccess);  // 0x01010101
  const int64_t shape[] = {static_cast<int64_t>(n)};
  kolo_handle h = 0;
  ASSERT_EQ(kolo_allreduce_async_cuda("ordered", buf.get(), buf.get(), 1, shape,
                                      KOLO_INT32, KOLO_SUM, 1.0, 1.0, 0, &h, &memory_),
            KOLO_OK)
      << kolo_last_error();
  ASSERT_EQ(kolo_wait_release(h), KOLO_OK) << kolo_last_error();
  const Bytes out = buf.download();
  std::vector<int32_t> values(n);
  std::memcpy(values.data(), out.data(), out.size());
  const int32_t expected = 0x01010101 * kolo_size();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(values[i], expected) << "element " << i << ": read before the caller's "
                                   << "stream wrote it";
  }
}

TEST_F(CudaCollectives, ADevicePointerGivenToAHostCallIsRefusedByName) {
  DeviceMem buf(64);
  ASSERT_EQ(kolo_allreduce(buf.get(), buf.get(), 16, KOLO_FLOAT32, KOLO_SUM),
            KOLO_ERR_INVALID_ARGUMENT);
  const std::string device = "(device " + std::to_string(memory_.device) + ")";
  EXPECT_NE(std::string(kolo_last_error())
                .find("kolo_allreduce: send is CUDA device memory " + device +
                      ": this call takes host memory; use kolo_allreduce_cuda"),
            std::string::npos)
      << kolo_last_error();
  const int64_t shape[] = {16};
  kolo_handle h = 0;
  ASSERT_EQ(kolo_allreduce_async("refused", buf.get(), buf.get(), 1, shape, KOLO_FLOAT32,
                                 KOLO_SUM, 1.0, 1.0, 0, &h),
            KOLO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kolo_last_error())
                .find("kolo_allreduce_async: the input is CUDA device memory " + device),
            std::string::npos)
      << kolo_last_error();
  // Pinned host memory is host memory: accepted.
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  std::memset(pinned, 0, 64);
  EXPECT_EQ(kolo_allreduce(pinned, pinned, 16, KOLO_FLOAT32, KOLO_SUM), KOLO_OK)
      << kolo_last_error();
  cudaFreeHost(pinned);
}

TEST_F(CudaCollectives, DeviceAndHostMemoryUnderOneNameIsAMismatch) {
  if (kolo_size() < 2) GTEST_SKIP() << "needs 2 ranks (kolorun -np 2)";
  float host[8] = {};
  DeviceMem dev(sizeof host);
  const int64_t shape[] = {8};
  kolo_handle h = 0;
  if (kolo_rank() == 0) {
    ASSERT_EQ(
        kolo_allreduce_async_cuda("mixed", dev.get(), dev.get(), 1, shape, KOLO_FLOAT32,
                                  KOLO_SUM, 1.0, 1.0, 0, &h, &memory_),
        KOLO_OK);
  } else {
    ASSERT_EQ(kolo_allreduce_async("mixed", host, host, 1, shape, KOLO_FLOAT32, KOLO_SUM,
                                   1.0, 1.0, 0, &h),
              KOLO_OK);
  }
  EXPECT_EQ(kolo_wait_release(h), KOLO_ERR_MISMATCH);
  EXPECT_NE(std::string(kolo_last_error()).find("memory"), std::string::npos)
      << kolo_last_error();
}

TEST_F(CudaCollectives, TheSynchronousCallsRunOnThePathAsked) {
  DeviceMem buf(values(KOLO_FLOAT32, 64, kolo_rank(), 0));
  ASSERT_EQ(
      kolo_allreduce_cuda(buf.get(), buf.get(), 64, KOLO_FLOAT32, KOLO_SUM, &memory_),
      KOLO_OK)
      << kolo_last_error();
  auto* world = dynamic_cast<kolo::api::CommunicatorImpl*>(kolo::capi::world().get());
  ASSERT_NE(world, nullptr);
  const std::string path = world->devicePathText();
  std::printf("device path of the synchronous calls: %s\n", path.c_str());
  const char* asked = std::getenv("KOLO_DEVICE_PATH");
  if (asked != nullptr && *asked != '\0' && std::string(asked) != "auto") {
    EXPECT_EQ(path.substr(0, std::strlen(asked)), asked)
        << "KOLO_DEVICE_PATH=" << asked << " but the synchronous calls ran on '" << path
        << "'";
  }
}

#else  // a build without CUDA

TEST(CudaCollectives, NeedABuildWithCuda) {
  GTEST_SKIP() << "this kolo build has no CUDA support (KOLO_WITH_CUDA=OFF or no nvcc)";
}

#endif

}  // namespace
