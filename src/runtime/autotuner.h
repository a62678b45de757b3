// KOLO_AUTOTUNE=1: tries fusion thresholds and cycle times during the first
// steps and keeps the fastest.
//
// The runtime reports, after every negotiation cycle that ran work, the
// bytes it reduced and the wall time since the previous report. The tuner
// walks a fixed grid of (threshold, cycle time) candidates: for each it
// skips `warmupSamples` samples, then scores `samplesPerCandidate` samples
// by bytes per second; after the grid it settles on the best and stays
// there. Only rank 0's tuner matters: its current values travel in the
// negotiation header and every rank uses them (so buckets match).
//
// Contract
// - current(): the values to use now.
// - record(bytes, seconds): one sample; returns true when the values
//   changed (the runtime logs logLine()).
// - done(): the search is over.
// - Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::runtime {

struct TuningPoint {
  int64_t fusionThresholdBytes = 64 << 20;
  double cycleTimeMs = 1.0;
};

class Autotuner {
 public:
  Autotuner(std::vector<TuningPoint> grid, int warmupSamples, int samplesPerCandidate);
  // The default grid: thresholds {1, 4, 16, 64, 128} MiB x cycle times
  // {0.5, 1, 2.5, 5} ms.
  static std::vector<TuningPoint> defaultGrid();

  TuningPoint current() const;
  bool record(uint64_t bytes, double seconds);
  bool done() const { return done_; }
  std::string logLine() const;

 private:
  std::vector<TuningPoint> grid_;
  int warmup_;
  int samplesPer_;
  size_t index_ = 0;
  int seen_ = 0;
  uint64_t bytes_ = 0;
  double seconds_ = 0;
  std::vector<double> scores_;
  size_t best_ = 0;
  bool done_ = false;
};

}  // namespace kolo::runtime
