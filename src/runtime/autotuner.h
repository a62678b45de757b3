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
// - record(bytes, seconds): one sample; returns true when the tuner moved
//   on to the next candidate or settled (the runtime logs logLine()):
//     "autotune: trying fusion threshold 4 MiB, cycle time 0.5 ms (candidate
//      2 of 20; fusion threshold 1 MiB, cycle time 0.5 ms gave 812.3 MB/s)"
//     "autotune: settled on fusion threshold 64 MiB, cycle time 1 ms
//      (2101.0 MB/s, best of 20 candidates)"
//   A candidate's score is the sum of its scored bytes over the sum of
//   their seconds; the earliest candidate wins a tie. After settling,
//   record() does nothing and returns false.
// - lastTrial(): after record() returned true, the candidate just scored
//   (its point and bytes per second); best(): after done(), the winner.
// - An empty grid is done at once with TuningPoint's defaults.
// - done(): the search is over.
// - Not thread-safe.
//
// AutotuneLog (KOLO_AUTOTUNE_LOG, Horovod's HOROVOD_AUTOTUNE_LOG): a CSV
// file, header "fusion_threshold_bytes,cycle_time_ms,bytes_per_second",
// one row per scored candidate, the chosen one repeated as the last row.
// open() creates/truncates it or throws Error(kInvalidArgument) naming the
// path; each row is flushed as it is written. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace kolo::runtime {

struct TuningPoint {
  int64_t fusionThresholdBytes = 64 << 20;
  double cycleTimeMs = 1.0;
};

struct Trial {
  TuningPoint point;
  double bytesPerSecond = 0;
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
  Trial lastTrial() const;
  Trial best() const;

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

class AutotuneLog {
 public:
  static std::unique_ptr<AutotuneLog> open(const std::string& path);
  ~AutotuneLog();
  AutotuneLog(const AutotuneLog&) = delete;
  AutotuneLog& operator=(const AutotuneLog&) = delete;

  void write(const Trial& trial);

 private:
  explicit AutotuneLog(std::FILE* file) : file_(file) {}
  std::FILE* file_;
};

}  // namespace kolo::runtime
