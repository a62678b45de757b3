// The autotuner's walk over its grid: warm-up samples are dropped after
// each change (the first cycles after a change still carry the previous
// values' buckets), the rest are summed into one score per candidate
// (total bytes / total seconds, so long cycles weigh more than short ones),
// and after the last candidate the best score wins (the earliest on a tie).
#include "runtime/autotuner.h"

#include <cerrno>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "common/check.h"

namespace kolo::runtime {
namespace {

std::string bytesText(int64_t bytes) {
  std::ostringstream os;
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) {
    os << bytes / (1 << 20) << " MiB";
  } else if (bytes >= 1024 && bytes % 1024 == 0) {
    os << bytes / 1024 << " KiB";
  } else {
    os << bytes << " B";
  }
  return os.str();
}

std::string pointText(const TuningPoint& p) {
  std::ostringstream os;
  os << "fusion threshold " << bytesText(p.fusionThresholdBytes) << ", cycle time "
     << p.cycleTimeMs << " ms";
  return os.str();
}

std::string rateText(double bytesPerSecond) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << bytesPerSecond / 1e6 << " MB/s";
  return os.str();
}

}  // namespace

Autotuner::Autotuner(std::vector<TuningPoint> grid, int warmupSamples,
                     int samplesPerCandidate)
    : grid_(std::move(grid)),
      warmup_(warmupSamples < 0 ? 0 : warmupSamples),
      samplesPer_(samplesPerCandidate < 1 ? 1 : samplesPerCandidate) {
  done_ = grid_.empty();
}

std::vector<TuningPoint> Autotuner::defaultGrid() {
  std::vector<TuningPoint> grid;
  for (int64_t mib : {1, 4, 16, 64, 128}) {
    for (double ms : {0.5, 1.0, 2.5, 5.0}) grid.push_back({mib << 20, ms});
  }
  return grid;
}

TuningPoint Autotuner::current() const {
  if (grid_.empty()) return TuningPoint{};
  return done_ ? grid_[best_] : grid_[index_];
}

bool Autotuner::record(uint64_t bytes, double seconds) {
  if (done_) return false;
  if (seen_ < warmup_) {
    ++seen_;
    return false;
  }
  ++seen_;
  bytes_ += bytes;
  if (seconds > 0) seconds_ += seconds;
  if (seen_ < warmup_ + samplesPer_) return false;

  scores_.push_back(seconds_ > 0 ? static_cast<double>(bytes_) / seconds_ : 0.0);
  seen_ = 0;
  bytes_ = 0;
  seconds_ = 0;
  ++index_;
  if (index_ == grid_.size()) {
    done_ = true;
    best_ = 0;
    for (size_t i = 1; i < scores_.size(); ++i) {
      if (scores_[i] > scores_[best_]) best_ = i;
    }
  }
  return true;  // a new candidate, or settled: either is logged
}

std::string Autotuner::logLine() const {
  std::ostringstream os;
  if (grid_.empty()) return "autotune: no candidates, keeping " + pointText(current());
  if (done_) {
    os << "autotune: settled on " << pointText(current()) << " ("
       << rateText(scores_[best_]) << ", best of " << grid_.size() << " candidates)";
    return os.str();
  }
  os << "autotune: trying " << pointText(current()) << " (candidate " << index_ + 1
     << " of " << grid_.size();
  if (!scores_.empty()) {
    os << "; " << pointText(grid_[index_ - 1]) << " gave " << rateText(scores_.back());
  }
  os << ")";
  return os.str();
}

Trial Autotuner::lastTrial() const {
  if (scores_.empty()) return {current(), 0.0};
  return {grid_[scores_.size() - 1], scores_.back()};
}

Trial Autotuner::best() const {
  if (scores_.empty()) return {current(), 0.0};
  return {grid_[best_], scores_[best_]};
}

std::unique_ptr<AutotuneLog> AutotuneLog::open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "cannot open the autotune log '"
                   << path << "' (KOLO_AUTOTUNE_LOG): " << std::strerror(errno));
  }
  std::fputs("fusion_threshold_bytes,cycle_time_ms,bytes_per_second\n", file);
  std::fflush(file);
  return std::unique_ptr<AutotuneLog>(new AutotuneLog(file));
}

AutotuneLog::~AutotuneLog() {
  std::fclose(file_);
}

void AutotuneLog::write(const Trial& trial) {
  std::fprintf(file_, "%lld,%g,%.1f\n",
               static_cast<long long>(trial.point.fusionThresholdBytes),
               trial.point.cycleTimeMs, trial.bytesPerSecond);
  std::fflush(file_);
}

}  // namespace kolo::runtime
