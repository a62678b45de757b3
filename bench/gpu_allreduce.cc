// kolo-gpu-allreduce: a float32 sum allreduce of --bytes (256 MiB) on CUDA
// device memory through kolo_allreduce_cuda (kolo/cuda.h), through a fast
// device path (--fast, KOLO_DEVICE_PATH=ipc by default) and through host
// staging (KOLO_DEVICE_PATH=staged) in alternating rounds of one job, and
// the device's own device-to-device copy of the same bytes in each round.
// docs/gpu.md, "The GPU check" (check ipc_allreduce) has the figures.
//
//   kolorun -np 2 kolo-gpu-allreduce [--bytes 268435456] [--fast ipc]
//       [--rounds 3] [--reps 20] [--staged-reps 3] [--min-ratio 0.4]
//       [--min-speedup 5] [--json FILE]
//
// Each round, for each path: KOLO_DEVICE_PATH is set and kolo_init()
// starts the job afresh (the path is chosen there), 2 untimed allreduces
// (the first maps the peers' buffers), then timed ones, each between a
// kolo_barrier and the return of kolo_allreduce_cuda followed by a
// cudaStreamSynchronize of the caller's stream (host clock); a rep's time
// is the slowest rank's; then every element of the result is checked
// against the sum of the ranks' inputs, and kolo_finalize(). Before the
// paths, rank 0 alone times a cudaMemcpyAsync of the same bytes (device to
// device, CUDA events) while the other ranks wait.
//
// Figures: medians over every timed rep of every round. Bandwidths are
// bytes of the buffer per second, S / t (nccl-tests' "algbw"), for the
// allreduce and the copy alike, so ratio = copy time / allreduce time;
// speedup = staged time / fast time.
//
// Last line (rank 0): "PASS|FAIL|SKIP <figures>": PASS when every result
// on every rank is right, every round ran on the path it asked for (the
// communicator's devicePathText()), ratio >= --min-ratio and speedup >=
// --min-speedup; SKIP without a CUDA device (exit status 0).
#include <cuda_runtime_api.h>
#include <kolo/cuda.h>
#include <kolo/kolo.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "api/communicator_impl.h"
#include "capi/capi_internal.h"
#include "gpu_timing.h"

namespace {

using kolo::bench::median;

float pattern(size_t i, int rank) {
  return static_cast<float>((i + 3 * rank) % 9);
}

void die(const char* what) {
  std::printf("FAIL rank %d: %s: %s\n", kolo_rank(), what, kolo_last_error());
  std::fflush(stdout);
  std::exit(1);
}

struct Run {  // one path's timed reps, wrong elements and the paths that ran
  std::vector<double> ms;
  long long wrong = 0;
  std::string ran;  // devicePathText() of kolo_init's communicator, each round
};

struct Options {
  size_t bytes;
  std::string fast;
  int rounds, reps, stagedReps;
  double minRatio, minSpeedup;
  std::string json;
};

// This rank's device, stream and buffers (send holds the rank's pattern).
struct Buffers {
  kolo_cuda_memory memory = {0, nullptr};
  cudaStream_t stream = nullptr;
  void *send = nullptr, *recv = nullptr, *copy = nullptr;
  std::string device;

  Buffers(size_t bytes, int devices) {
    memory.device = kolo_local_rank() % devices;
    KOLO_GPU_CHECK(cudaSetDevice(memory.device));
    KOLO_GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    memory.stream = stream;
    for (void** b : {&send, &recv, &copy}) KOLO_GPU_CHECK(cudaMalloc(b, bytes));
    std::vector<float> h(bytes / 4);
    for (size_t i = 0; i < h.size(); ++i) h[i] = pattern(i, kolo_rank());
    KOLO_GPU_CHECK(cudaMemcpy(send, h.data(), bytes, cudaMemcpyHostToDevice));
    cudaDeviceProp prop{};
    KOLO_GPU_CHECK(cudaGetDeviceProperties(&prop, memory.device));
    device = prop.name;
  }
};

// `timed` allreduces (after 2 untimed) on the path kolo_init chose: each
// rep's time is the slowest rank's; then the elements of the last result
// that are wrong on any rank.
void timePath(const Options& o, Buffers& b, const std::string& path, int timed,
              Run& run) {
  const size_t n = o.bytes / 4;
  std::vector<double> ms(timed);
  for (int r = -2; r < timed; ++r) {
    KOLO_GPU_CHECK(cudaMemsetAsync(b.recv, 0xff, o.bytes, b.stream));  // NaNs
    KOLO_GPU_CHECK(cudaStreamSynchronize(b.stream));
    if (kolo_barrier() != KOLO_OK) die("kolo_barrier");
    const auto t0 = std::chrono::steady_clock::now();
    if (kolo_allreduce_cuda(b.send, b.recv, n, KOLO_FLOAT32, KOLO_SUM, &b.memory) !=
        KOLO_OK)
      die(("kolo_allreduce_cuda through " + path).c_str());
    KOLO_GPU_CHECK(cudaStreamSynchronize(b.stream));
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= 0) ms[r] = std::chrono::duration<double, std::milli>(t1 - t0).count();
  }
  if (kolo_allreduce(ms.data(), ms.data(), ms.size(), KOLO_FLOAT64, KOLO_MAX) != KOLO_OK)
    die("kolo_allreduce of the times");
  std::vector<float> h(n);
  KOLO_GPU_CHECK(cudaMemcpy(h.data(), b.recv, o.bytes, cudaMemcpyDeviceToHost));
  long long wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < kolo_size(); ++q) want += pattern(i, q);
    if (h[i] != want) ++wrong;
  }
  if (kolo_allreduce(&wrong, &wrong, 1, KOLO_INT64, KOLO_SUM) != KOLO_OK)
    die("kolo_allreduce of the checks");
  run.ms.insert(run.ms.end(), ms.begin(), ms.end());
  run.wrong += wrong;
  auto* world = dynamic_cast<kolo::api::CommunicatorImpl*>(kolo::capi::world().get());
  const std::string ran = world ? world->devicePathText() : "?";
  if (run.ran.find(ran) == std::string::npos)
    run.ran += (run.ran.empty() ? "" : ",") + ran;
}

// Rank 0's figures and verdict; the exit status.
int report(const Options& o, const std::string& device, int size,
           const std::vector<std::string>& paths, const std::vector<Run>& runs,
           const std::vector<double>& copyMs) {
  const double tFast = median(runs[0].ms), tStaged = median(runs[1].ms);
  const double tCopy = median(copyMs);
  const auto gbs = [&o](double ms) { return o.bytes / 1e6 / ms; };
  const double ratio = tCopy / tFast, speedup = tStaged / tFast;
  const bool right = runs[0].wrong == 0 && runs[1].wrong == 0;
  bool asked = true;  // every round ran on the path it asked for
  for (size_t p = 0; p < paths.size(); ++p)
    asked = asked && runs[p].ran.rfind(paths[p], 0) == 0 &&
            runs[p].ran.find(',') == std::string::npos;
  const bool pass = right && asked && ratio >= o.minRatio && speedup >= o.minSpeedup;
  std::printf("kolo-gpu-allreduce: %s, %d ranks, %zu B float32 sum, %d rounds\n",
              device.c_str(), size, o.bytes, o.rounds);
  for (size_t p = 0; p < paths.size(); ++p)
    std::printf(
        "%-8s %9.3f ms %8.1f GB/s  (median of %zu reps; %lld wrong elements; "
        "ran on: %s)\n",
        paths[p].c_str(), median(runs[p].ms), gbs(median(runs[p].ms)), runs[p].ms.size(),
        runs[p].wrong, runs[p].ran.c_str());
  std::printf("%-8s %9.3f ms %8.1f GB/s  (cudaMemcpy device to device, rank 0 alone)\n",
              "D2D copy", tCopy, gbs(tCopy));
  if (FILE* f = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w")) {
    std::fprintf(f,
                 "{\"device\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"fast\":\"%s\","
                 "\"fast_ms\":%.6f,\"staged_ms\":%.6f,\"copy_ms\":%.6f,\"ratio\":%.4f,"
                 "\"speedup\":%.3f,\"right\":%s}\n",
                 device.c_str(), size, o.bytes, o.fast.c_str(), tFast, tStaged, tCopy,
                 ratio, speedup, right ? "true" : "false");
    std::fclose(f);
  }
  std::printf(
      "%s %d ranks, %zu MiB float32: %s %.3f ms (%.0f GB/s), staged %.1f ms, "
      "D2D copy %.3f ms (%.0f GB/s); %s/D2D %.2f (>= %.2f wanted), %s/staged "
      "%.1fx (>= %.0fx wanted); %s; ran on %s / %s\n",
      pass ? "PASS" : "FAIL", size, o.bytes >> 20, o.fast.c_str(), tFast, gbs(tFast),
      tStaged, tCopy, gbs(tCopy), o.fast.c_str(), ratio, o.minRatio, o.fast.c_str(),
      speedup, o.minSpeedup,
      right ? "every element right on every rank" : "WRONG RESULTS", runs[0].ran.c_str(),
      runs[1].ran.c_str());
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const kolo::bench::Flags flags(
      argc, argv,
      {"--bytes", "--fast", "--rounds", "--reps", "--staged-reps", "--min-ratio",
       "--min-speedup", "--json"},
      "kolorun -np 2 kolo-gpu-allreduce [--bytes B] [--fast ipc] [--rounds N] [--reps N] "
      "[--staged-reps N] [--min-ratio R] [--min-speedup X] [--json FILE]");
  const Options o = {static_cast<size_t>(flags.number("--bytes", 256.0 * 1024 * 1024)),
                     flags.get("--fast", "ipc"),
                     static_cast<int>(flags.number("--rounds", 3)),
                     static_cast<int>(flags.number("--reps", 20)),
                     static_cast<int>(flags.number("--staged-reps", 3)),
                     flags.number("--min-ratio", 0.4),
                     flags.number("--min-speedup", 5),
                     flags.get("--json", "")};
  if (o.bytes == 0 || o.bytes % 4 != 0 || o.rounds < 1 || o.reps < 1 ||
      o.stagedReps < 1) {
    std::fprintf(stderr,
                 "kolo-gpu-allreduce: --bytes must be a positive multiple of 4, "
                 "--rounds, --reps and --staged-reps at least 1\n");
    return 2;
  }
  const int devices = kolo::bench::devicesOrSkip();
  if (devices == 0) return 0;
  const std::vector<std::string> paths = {o.fast, "staged"};
  std::vector<Run> runs(paths.size());
  std::vector<double> copyMs;
  std::unique_ptr<Buffers> b;
  int rank = 0, size = 0;
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t p = 0; p < paths.size(); ++p) {
      setenv("KOLO_DEVICE_PATH", paths[p].c_str(), 1);
      if (kolo_init() != KOLO_OK) die("kolo_init");
      rank = kolo_rank(), size = kolo_size();
      if (!b) b = std::make_unique<Buffers>(o.bytes, devices);
      if (p == 0) {  // the copy, rank 0 alone
        if (rank == 0)
          copyMs.push_back(kolo::bench::copyMs(b->copy, b->send, o.bytes, b->stream, 10));
        if (kolo_barrier() != KOLO_OK) die("kolo_barrier");
      }
      timePath(o, *b, paths[p], paths[p] == "staged" ? o.stagedReps : o.reps, runs[p]);
      if (kolo_finalize() != KOLO_OK) die("kolo_finalize");
    }
  }
  return rank == 0 ? report(o, b->device, size, paths, runs, copyMs) : 0;
}
