// kolo-gpu-bandwidth: the device's own device-to-device copy bandwidth
// against kolo's device kernels (collectives/cuda/device_reduce.h) in the
// same run, on buffers of --bytes (256 MiB) each. docs/gpu.md, "The GPU
// check" (check gpu_bandwidth) has the figures.
//
//   kolo-gpu-bandwidth [--bytes 268435456] [--reps 20] [--min-fraction 0.5]
//                      [--json FILE]
//
// Bandwidth is bytes moved per second (GB/s = 1e9 B/s), where bytes moved
// is every byte the operation reads plus every byte it writes in device
// memory, each once: a copy of S bytes moves 2S; reduce2 on operands of S
// bytes reads 2S and writes S (3S); reduceMany of k sources (k+1)S;
// reduceToMany (the IPC collectives' kernel) of n sources to m
// destinations (n+m)S; divideInPlace 2S; compressToHalf of S bytes of float32 reads S and
// writes S/2 (1.5S), decompressFromHalf the same. For a streaming kernel that is its
// memory traffic, so "fraction" (kernel GB/s / copy GB/s) is the share of the device's
// copy bandwidth it reaches. Each figure is the median of
// --reps launches timed with CUDA events (bench/gpu_timing.h); every
// kernel's output is then checked element by element, so a kernel that
// did not run cannot pass.
//
// Last line: "PASS|FAIL|SKIP <figures>": PASS when every kernel reaches
// --min-fraction of the copy's bandwidth and every result is right; SKIP
// without a CUDA device (exit status 0), FAIL otherwise (exit status 1).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/cuda/device_reduce.h"
#include "collectives/half_bits.h"
#include "gpu_timing.h"

namespace {

namespace kc = kolo::collectives::cuda;
using kolo::DataType;
using kolo::ReduceOp;
using kolo::bench::Flags;
using kolo::collectives::bfloat16BitsToFloat;
using kolo::collectives::floatToBfloat16Bits;
using kolo::collectives::floatToHalfBits;
using kolo::collectives::halfBitsToFloat;

// Source k's element i: small whole values, so every sum is exact.
float pattern(size_t i, int k) {
  return static_cast<float>((i + k) % 9);
}

struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t b) : bytes(b) { KOLO_GPU_CHECK(cudaMalloc(&p, b)); }
  ~Buffer() { cudaFree(p); }
  template <class T>
  void fill(const std::function<T(size_t)>& f) {
    std::vector<T> h(bytes / sizeof(T));
    for (size_t i = 0; i < h.size(); ++i) h[i] = f(i);
    KOLO_GPU_CHECK(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  // The index of the first element that differs from `want`, or -1.
  template <class T>
  long long firstWrong(size_t count, const std::function<T(size_t)>& want) const {
    std::vector<T> h(count);
    KOLO_GPU_CHECK(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i)
      if (h[i] != want(i)) return static_cast<long long>(i);
    return -1;
  }
};

struct Case {
  std::string name;
  double movedPerByte;                // bytes moved per byte of --bytes
  std::function<void()> launch;       // one launch on the stream
  std::function<long long()> verify;  // first wrong element or -1
};

// Every buffer of the run, S bytes each (half: S / 2), filled with the
// sources' patterns.
struct Workspace {
  static constexpr int kSources = 8;
  std::vector<std::unique_ptr<Buffer>> f32, h16, b16;  // sources
  Buffer dst, half, work, dst2, dst3;
  const void* srcs[kSources];
  void* dsts[3];

  explicit Workspace(size_t S) : dst(S), half(S / 2), work(S), dst2(S), dst3(S) {
    for (int k = 0; k < kSources; ++k) {
      f32.push_back(std::make_unique<Buffer>(S));
      f32[k]->fill<float>([k](size_t i) { return pattern(i, k); });
      srcs[k] = f32[k]->p;
    }
    for (int k = 0; k < 2; ++k) {
      h16.push_back(std::make_unique<Buffer>(S));
      h16[k]->fill<uint16_t>([k](size_t i) { return floatToHalfBits(pattern(i, k)); });
      b16.push_back(std::make_unique<Buffer>(S));
      b16[k]->fill<uint16_t>(
          [k](size_t i) { return floatToBfloat16Bits(pattern(i, k)); });
    }
    work.fill<float>([](size_t i) { return pattern(i, 0); });
    dsts[0] = dst.p, dsts[1] = dst2.p, dsts[2] = dst3.p;
  }
};

// What the sum of sources 0..k-1 gives at element i.
std::function<float(size_t)> sumOf(int k) {
  return [k](size_t i) {
    float v = 0;
    for (int j = 0; j < k; ++j) v += pattern(i, j);
    return v;
  };
}

// The same for sources 0 and 1 in a 16-bit float (toBits / fromBits).
template <class To, class From>
std::function<uint16_t(size_t)> halfSum(To toBits, From fromBits) {
  return [=](size_t i) -> uint16_t {
    return toBits(fromBits(toBits(pattern(i, 0))) + fromBits(toBits(pattern(i, 1))));
  };
}

// The kernels measured, on w's buffers; `launches` of divideInPlace halve
// w.work each.
std::vector<Case> makeCases(Workspace& w, size_t S, int launches, cudaStream_t s) {
  const size_t n32 = S / 4, n16 = S / 2;
  const float divided = std::ldexp(1.0f, -launches);  // exact: a power of two
  // Every launch and check refers to w (which outlives the cases) and
  // copies the rest.
  return {
      {"reduce2 float32 sum", 3,
       [=, &w] {
         kc::reduce2(w.dst.p, w.srcs[0], w.srcs[1], n32, DataType::kFloat32,
                     ReduceOp::kSum, s);
       },
       [=, &w] { return w.dst.firstWrong<float>(n32, sumOf(2)); }},
      {"reduce2 float16 sum", 3,
       [=, &w] {
         kc::reduce2(w.dst.p, w.h16[0]->p, w.h16[1]->p, n16, DataType::kFloat16,
                     ReduceOp::kSum, s);
       },
       [=, &w] {
         return w.dst.firstWrong<uint16_t>(n16,
                                           halfSum(floatToHalfBits, halfBitsToFloat));
       }},
      {"reduce2 bfloat16 sum", 3,
       [=, &w] {
         kc::reduce2(w.dst.p, w.b16[0]->p, w.b16[1]->p, n16, DataType::kBFloat16,
                     ReduceOp::kSum, s);
       },
       [=, &w] {
         return w.dst.firstWrong<uint16_t>(
             n16, halfSum(floatToBfloat16Bits, bfloat16BitsToFloat));
       }},
      {"reduceMany 3 float32 sum", 4,
       [=, &w] {
         kc::reduceMany(w.dst.p, w.srcs, 3, n32, DataType::kFloat32, ReduceOp::kSum, s);
       },
       [=, &w] { return w.dst.firstWrong<float>(n32, sumOf(3)); }},
      {"reduceMany 8 float32 sum", 9,
       [=, &w] {
         kc::reduceMany(w.dst.p, w.srcs, 8, n32, DataType::kFloat32, ReduceOp::kSum, s);
       },
       [=, &w] { return w.dst.firstWrong<float>(n32, sumOf(8)); }},
      // The IPC collectives' fan-in / fan-out: n sources to m destinations.
      {"reduceToMany 2->2 float32 sum", 4,
       [=, &w] {
         kc::reduceToMany(w.dsts, 2, w.srcs, 2, n32, DataType::kFloat32, ReduceOp::kSum,
                          s);
       },
       [=, &w] {
         const long long a = w.dst.firstWrong<float>(n32, sumOf(2));
         return a >= 0 ? a : w.dst2.firstWrong<float>(n32, sumOf(2));
       }},
      {"reduceToMany 3->3 float32 sum", 6,
       [=, &w] {
         kc::reduceToMany(w.dsts, 3, w.srcs, 3, n32, DataType::kFloat32, ReduceOp::kSum,
                          s);
       },
       [=, &w] {
         const long long a = w.dst.firstWrong<float>(n32, sumOf(3));
         return a >= 0 ? a : w.dst3.firstWrong<float>(n32, sumOf(3));
       }},
      {"divideInPlace float32", 2,
       [=, &w] { kc::divideInPlace(w.work.p, n32, DataType::kFloat32, 2.0, s); },
       [=, &w] {
         return w.work.firstWrong<float>(
             n32, [=](size_t i) { return pattern(i, 0) * divided; });
       }},
      {"compressToHalf", 1.5,
       [=, &w] {
         kc::compressToHalf(static_cast<uint16_t*>(w.half.p),
                            static_cast<const float*>(w.srcs[2]), n32, s);
       },
       [=, &w] {
         return w.half.firstWrong<uint16_t>(
             n32, [](size_t i) { return floatToHalfBits(pattern(i, 2)); });
       }},
      {"decompressFromHalf", 1.5,
       [=, &w] {
         kc::decompressFromHalf(static_cast<float*>(w.dst.p),
                                static_cast<const uint16_t*>(w.half.p), n32, s);
       },
       [=, &w] {
         return w.dst.firstWrong<float>(n32, [](size_t i) { return pattern(i, 2); });
       }},
  };
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"--bytes", "--reps", "--min-fraction", "--json"},
                    "kolo-gpu-bandwidth [--bytes B] [--reps N] [--min-fraction F] "
                    "[--json FILE]");
  const size_t S = static_cast<size_t>(flags.number("--bytes", 256.0 * 1024 * 1024));
  const int reps = static_cast<int>(flags.number("--reps", 20));
  const double minFraction = flags.number("--min-fraction", 0.5);
  constexpr int kWarmup = 2;
  if (S % 64 != 0 || S == 0 || reps < 1 || reps > 100) {
    std::fprintf(stderr,
                 "kolo-gpu-bandwidth: --bytes must be a positive multiple of 64 "
                 "and --reps in [1, 100]\n");
    return 2;
  }
  if (!kolo::bench::devicesOrSkip()) return 0;
  cudaDeviceProp prop{};
  KOLO_GPU_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s = nullptr;
  KOLO_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  Workspace w(S);
  const std::vector<Case> cases = makeCases(w, S, kWarmup + reps, s);

  const double copy = kolo::bench::copyMs(w.dst.p, w.srcs[0], S, s, reps);
  const double copyGBs = 2.0 * S / 1e6 / copy;
  std::printf("kolo-gpu-bandwidth: %s, buffers of %zu B, median of %d reps\n", prop.name,
              S, reps);
  std::printf("%-26s %9.3f ms %9.1f GB/s  fraction 1.000  (moves 2 B per B)\n",
              "cudaMemcpy D2D", copy, copyGBs);
  bool ok = true;
  double worst = 1e9;
  std::string worstName, figures,
      json = "{\"device\":\"" + std::string(prop.name) +
             "\",\"bytes\":" + std::to_string(S) +
             ",\"copy_gb_s\":" + std::to_string(copyGBs);
  for (const Case& c : cases) {
    const double ms =
        kolo::bench::median(kolo::bench::timeOnStream(c.launch, s, reps, kWarmup));
    const double gbs = c.movedPerByte * S / 1e6 / ms, fraction = gbs / copyGBs;
    const long long wrong = c.verify();
    std::printf(
        "%-26s %9.3f ms %9.1f GB/s  fraction %.3f  (moves %.1f B per B)%s\n",
        c.name.c_str(), ms, gbs, fraction, c.movedPerByte,
        wrong >= 0 ? ("  WRONG at element " + std::to_string(wrong)).c_str() : "");
    if (wrong >= 0) ok = false;
    if (fraction < worst) worst = fraction, worstName = c.name;
    char part[96];
    std::snprintf(part, sizeof part, "%s%s %.2f", figures.empty() ? "" : ", ",
                  c.name.c_str(), fraction);
    figures += part;
    json += ",\"" + c.name + "\":{\"ms\":" + std::to_string(ms) +
            ",\"gb_s\":" + std::to_string(gbs) +
            ",\"fraction\":" + std::to_string(fraction) +
            ",\"right\":" + (wrong < 0 ? "true" : "false") + "}";
  }
  const std::string json_path = flags.get("--json", "");
  if (!json_path.empty()) {
    if (FILE* f = std::fopen(json_path.c_str(), "w")) {
      std::fprintf(f, "%s}\n", json.c_str());
      std::fclose(f);
    }
  }
  const bool pass = ok && worst >= minFraction;
  std::printf(
      "%s D2D copy %.0f GB/s (2 B moved per B); kernels' fraction of it (>= %.2f "
      "wanted): %s; lowest %s %.2f%s\n",
      pass ? "PASS" : "FAIL", copyGBs, minFraction, figures.c_str(), worstName.c_str(),
      worst, ok ? "" : "; WRONG RESULTS");
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a kernel's argument or launch error
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
}
