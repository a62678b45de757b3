// What the GPU benchmarks (bench/gpu_bandwidth.cc, bench/gpu_allreduce.cc)
// share: CUDA error checks that exit naming the call, flag parsing, and
// timing of stream work with CUDA events.
//
// Timing: timeOnStream enqueues `reps` launches back to back on one stream
// with an event between each two, after `warmup` untimed launches, so the
// host's enqueue cost (argument checks) runs while the previous launch
// still occupies the device; each rep's time is the device time between
// its two events. The benchmarks report medians.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace kolo::bench {

#define KOLO_GPU_CHECK(call)                                                 \
  do {                                                                       \
    const cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "FAIL %s: %s: %s\n", #call, cudaGetErrorName(e_), \
                   cudaGetErrorString(e_));                                  \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// "--name value" flags: the value of `name`, or `fallback`; a flag not in
// `known` exits 2 naming it.
class Flags {
 public:
  Flags(int argc, char** argv, std::vector<std::string> known, const char* usage) {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (std::find(known.begin(), known.end(), flag) == known.end() || i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s: unknown flag or missing value\nusage: %s\n",
                     argv[0], flag.c_str(), usage);
        std::exit(2);
      }
      values_.push_back({flag, argv[++i]});
    }
  }
  std::string get(const std::string& name, const std::string& fallback) const {
    for (const auto& [k, v] : values_)
      if (k == name) return v;
    return fallback;
  }
  double number(const std::string& name, double fallback) const {
    const std::string v = get(name, "");
    return v.empty() ? fallback : std::atof(v.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
};

// The number of CUDA devices; without one, prints "SKIP no CUDA device:
// <why>" (the GPU check's skip line) and answers 0.
inline int devicesOrSkip() {
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe == cudaSuccess && devices > 0) return devices;
  std::printf("SKIP no CUDA device: %s\n",
              probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
  return 0;
}

// Device milliseconds of each of `reps` launches (see the header).
inline std::vector<double> timeOnStream(const std::function<void()>& launch,
                                        cudaStream_t stream, int reps, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<cudaEvent_t> events(reps + 1);
  for (auto& e : events) KOLO_GPU_CHECK(cudaEventCreate(&e));
  KOLO_GPU_CHECK(cudaEventRecord(events[0], stream));
  for (int i = 0; i < reps; ++i) {
    launch();
    KOLO_GPU_CHECK(cudaEventRecord(events[i + 1], stream));
  }
  KOLO_GPU_CHECK(cudaEventSynchronize(events[reps]));
  KOLO_GPU_CHECK(cudaGetLastError());
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    KOLO_GPU_CHECK(cudaEventElapsedTime(&t, events[i], events[i + 1]));
    ms[i] = t;
  }
  for (auto& e : events) cudaEventDestroy(e);
  return ms;
}

// The median device time (ms) of a cudaMemcpyAsync of `bytes` from src to
// dst, both device memory: the device's own copy bandwidth.
inline double copyMs(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                     int reps) {
  return median(timeOnStream(
      [&] {
        KOLO_GPU_CHECK(
            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
      },
      stream, reps));
}

}  // namespace kolo::bench
