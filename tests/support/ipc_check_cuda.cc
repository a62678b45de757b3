// cudaCheckMemory, the kernel check and the benchmark of ipc_check_memory.h:
// CUDA device memory allocated with the test's own CUDA runtime (as a
// framework would). Compiled with KOLO_TEST_EXPECT_CUDA (the build's
// KOLO_HAVE_CUDA); without it, no device.
#include <kolo/communicator.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "collectives/cuda/device_reduce.h"
#include "collectives/cuda/device_runtime.h"
#include "collectives/half_bits.h"
#include "collectives/reduce.h"
#include "support/ipc_check_memory.h"
#include "support/special_values.h"

#if KOLO_TEST_EXPECT_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kolo::test {

#if KOLO_TEST_EXPECT_CUDA
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
  }
}

class CudaCheckMemory final : public CheckMemory {
 public:
  explicit CudaCheckMemory(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  // Frees everything: after the peers closed their mappings (the program
  // destroys its collectives and passes a barrier first).
  ~CudaCheckMemory() override {
    freeAll();
    for (auto& [p, bytes] : pool_) cudaFree(p);
    for (void* p : async_) cudaFreeAsync(p, stream_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  int device() const override { return device_; }
  // Exportable memory comes from a pool that is never freed while the
  // program runs: peers keep it mapped, and CUDA leaves a cudaFree of
  // memory another process maps undefined.
  void* alloc(size_t bytes, bool exportable) override {
    void* p = nullptr;
    if (exportable) {
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (pool_[*it] >= bytes) {
          p = *it;
          free_.erase(it);
          break;
        }
      }
      if (p == nullptr) {
        check(cudaMalloc(&p, bytes), "cudaMalloc");
        pool_[p] = bytes;
      }
    } else {
      check(cudaMallocAsync(&p, bytes, stream_), "cudaMallocAsync");
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
    live_.push_back({p, !exportable});
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check(cudaStreamSynchronize(stream_), "upload sync");
  }
  // A host function sleeping on the stream, then the copy from pinned
  // memory (a pageable source would make cudaMemcpyAsync wait here).
  int uploadLate(void* dst, const void* src, size_t bytes) override {
    static constexpr int kDelayMs = 200;
    check(cudaMemsetAsync(dst, 0x7f, bytes, stream_), "late upload memset");
    check(cudaStreamSynchronize(stream_), "late upload memset sync");
    void* pinned = nullptr;
    check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
    pinned_.push_back(pinned);
    std::memcpy(pinned, src, bytes);
    check(cudaLaunchHostFunc(
              stream_,
              [](void*) {
                std::this_thread::sleep_for(std::chrono::milliseconds(kDelayMs));
              },
              nullptr),
          "cudaLaunchHostFunc");
    check(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, stream_),
          "late upload");
    return kDelayMs;
  }
  std::vector<uint8_t> download(const void* src, size_t bytes) override {
    std::vector<uint8_t> out(bytes);
    check(cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyDeviceToHost, stream_),
          "download");
    check(cudaStreamSynchronize(stream_), "download sync");
    return out;
  }
  void* stream() override { return stream_; }
  void freeAll() override {
    cudaStreamSynchronize(stream_);
    for (auto& [p, asyncPool] : live_) {
      if (asyncPool) {
        async_.push_back(p);  // freed last too, in case the driver exported it
      } else {
        free_.push_back(p);
      }
    }
    cudaStreamSynchronize(stream_);
    live_.clear();
    for (void* p : pinned_) cudaFreeHost(p);
    pinned_.clear();
  }
  std::unique_ptr<collectives::cuda::DeviceCollectives> makeCollectives(
      const collectives::cuda::IpcOptions& options, rendezvous::Store& store) override {
    return collectives::cuda::makeIpcCollectives(options, store);
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  std::vector<std::pair<void*, bool>> live_;  // (pointer, from cudaMallocAsync)
  std::map<void*, size_t> pool_;              // every cudaMalloc, by size
  std::vector<void*> free_;                   // pool blocks not in use
  std::vector<void*> async_;                  // cudaMallocAsync blocks, freed last
  std::vector<void*> pinned_;                 // uploadLate's sources
};

}  // namespace

std::unique_ptr<CheckMemory> cudaCheckMemory(int rank, std::string* why) {
  const auto& probe = collectives::cuda::probeDevices();
  if (probe.count == 0) {
    *why = "no CUDA device: " + probe.reason;
    return nullptr;
  }
  return std::make_unique<CudaCheckMemory>(rank % probe.count);
}

// n sources, m destinations, at an offset of one element (the kernel's
// unaligned / tail path) and at none (its vector path).
int checkKernelOnDevice(CheckMemory& memory, int rank, int* checks) {
  if (rank != 0) return 0;
  const DataType dtypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                             DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                             DataType::kUInt8};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                          ReduceOp::kMax, ReduceOp::kProduct};
  int failures = 0;
  unsigned seed = 7;
  for (DataType d : dtypes) {
    const size_t es = elementSize(d);
    for (ReduceOp op : ops) {
      for (int n : {2, 3}) {
        for (size_t shift : {size_t{0}, size_t{1}}) {
          const size_t count = 70001;
          std::vector<std::vector<uint8_t>> inputs;
          std::vector<const void*> hostSrcs, devSrcs;
          for (int k = 0; k < n; ++k) {
            inputs.push_back(kolo::test::randomSpecialValues(d, count + shift, seed++));
            hostSrcs.push_back(inputs.back().data() + shift * es);
            void* p = memory.alloc((count + shift) * es, true);
            memory.upload(p, inputs.back().data(), (count + shift) * es);
            devSrcs.push_back(static_cast<uint8_t*>(p) + shift * es);
          }
          std::vector<uint8_t> want(count * es);
          collectives::reduceMany(want.data(), hostSrcs.data(), n, count, d, op);
          if (op == ReduceOp::kAverage)
            collectives::divideInPlace(want.data(), count, d, n);
          void* dsts[2];
          for (auto& dst : dsts)
            dst = static_cast<uint8_t*>(memory.alloc((count + shift) * es, true)) +
                  shift * es;
          collectives::cuda::reduceToMany(dsts, 2, devSrcs.data(), n, count, d, op,
                                          memory.stream());
          for (void* dst : dsts) {
            ++*checks;
            const std::vector<uint8_t> got = memory.download(dst, count * es);
            for (size_t i = 0; i < count * es; i += es) {
              if (std::memcmp(&want[i], &got[i], es) == 0 ||
                  (kolo::test::isNanElement(d, &want[i]) &&
                   kolo::test::isNanElement(d, &got[i])))
                continue;
              std::printf("rank 0 FAIL reduceToMany %s %s n=%d shift=%zu: element %zu\n",
                          std::string(toString(d)).c_str(),
                          std::string(toString(op)).c_str(), n, shift, i / es);
              ++failures;
              break;
            }
          }
          memory.freeAll();
        }
      }
    }
  }
  return failures;
}

void benchAllreduce(collectives::cuda::DeviceCollectives& ipc, CheckMemory& memory,
                    int rank, const char* label) {
  using Clock = std::chrono::steady_clock;
  const size_t bytes = size_t{256} << 20;
  const size_t count = bytes / 4;
  void* send = memory.alloc(bytes, true);
  void* recv = memory.alloc(bytes, true);
  auto stream = static_cast<cudaStream_t>(memory.stream());
  check(cudaMemsetAsync(send, 0, bytes, stream), "memset");
  check(cudaStreamSynchronize(stream), "sync");
  const int iterations = 10;
  for (int i = 0; i < 3; ++i)
    ipc.allreduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, stream);
  auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i)
    ipc.allreduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum, stream);
  const double ipcSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The device's own copy of the same buffer, this rank alone after the
  // others finished (the allreduce above returned on every rank).
  double copySeconds = 0;
  if (rank == 0) {
    for (int i = 0; i < 3; ++i)
      check(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    check(cudaStreamSynchronize(stream), "sync");
    t0 = Clock::now();
    for (int i = 0; i < iterations; ++i)
      check(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    check(cudaStreamSynchronize(stream), "sync");
    copySeconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const double ipcGBps = bytes * iterations / ipcSeconds / 1e9;
    const double copyGBps = bytes * iterations / copySeconds / 1e9;
    std::printf(
        "bench %s ranks=%d ipc_allreduce_GBps=%.1f d2d_copy_GBps=%.1f ratio=%.3f "
        "(256 MiB float32, %d iterations, bandwidth = buffer bytes / time)\n",
        label, ipc.size(), ipcGBps, copyGBps, ipcGBps / copyGBps, iterations);
  }
  memory.freeAll();
}

#else  // no CUDA in this build

std::unique_ptr<CheckMemory> cudaCheckMemory(int, std::string* why) {
  *why = "this kolo build has no CUDA support";
  return nullptr;
}
int checkKernelOnDevice(CheckMemory&, int, int*) {
  return 0;
}
void benchAllreduce(collectives::cuda::DeviceCollectives&, CheckMemory&, int,
                    const char*) {}

#endif

}  // namespace kolo::test
