// The runtime's lifecycle: options, start (the background thread), the
// timeline and straggler report, shutdown. The runtime's other parts, each
// in a file of its own (docs/runtime.md, "Files"):
//   runtime_submit.cc   the callers' side: checks, names, enqueue, groups, join
//   runtime_loop.cc     the background loop: one cycle's steps, pacing, stop
//   runtime_buckets.cc  running a cycle's buckets of ready operations
// and the per-dtype math they use in collectives/elementwise.h.
#include "runtime/runtime.h"

#include <algorithm>
#include <limits>

#include "collectives/registry.h"
#include "common/check.h"
#include "common/logging.h"
#include "runtime/fusion_planner.h"

namespace kolo::runtime {

namespace {

bool hasAlgorithm(std::string_view name) {
  for (const auto& a : collectives::allreduceAlgorithms()) {
    if (a.name == name) return true;
  }
  return false;
}

}  // namespace

std::exception_ptr Runtime::errorPtr(ErrorCode code, const std::string& message,
                                     int peer) {
  return std::make_exception_ptr(Error(code, message, peer));
}

RuntimeOptions RuntimeOptions::fromSettings(const Settings& s) {
  RuntimeOptions o;
  o.fusionThresholdBytes = s.fusionThresholdBytes;
  o.cycleTimeMs = s.cycleTimeMs;
  o.cacheCapacity = static_cast<size_t>(std::max<int64_t>(1, s.cacheCapacity));
  o.stallWarningSeconds = s.stallWarningSeconds;
  o.stallShutdownSeconds = s.stallShutdownSeconds;
  o.stallCheck = s.stallCheckDisable == 0;
  o.timelinePath = s.timelinePath;
  o.timelineMarkCycles = s.timelineMarkCycles != 0;
  o.deterministic = s.deterministic != 0;
  o.autotune = s.autotune != 0;
  o.autotuneLogPath = s.autotuneLogPath;
  o.autotuneWarmupSamples =
      static_cast<int>(std::min<int64_t>(s.autotuneWarmupSamples, 1 << 20));
  o.autotuneStepsPerSample =
      static_cast<int>(std::min<int64_t>(s.autotuneStepsPerSample, 1 << 20));
  o.straggler.marginSeconds = s.stragglerMarginMs / 1000.0;
  o.straggler.fraction = s.stragglerFraction;
  o.straggler.windowSeconds = s.stragglerWindowSeconds;
  o.straggler.intervalSeconds = s.stragglerIntervalSeconds;
  o.spinMicros = s.runtimeSpinMicros;
  if (s.joinMode == "horovod") {
    o.joinMode = RuntimeOptions::JoinMode::kHorovod;
  } else if (s.joinMode == "absent") {
    o.joinMode = RuntimeOptions::JoinMode::kAbsent;
  } else {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_JOIN_MODE='" << s.joinMode << "' (expected horovod or absent)");
  }
  return o;
}

Runtime::Runtime(std::shared_ptr<Communicator> comm, RuntimeOptions options)
    : comm_(std::move(comm)),
      options_(std::move(options)),
      rank_(comm_->rank()),
      size_(comm_->size()),
      // One host: a large tensor runs alone, in place (copying it into a
      // bucket costs about what its allreduce does). Across hosts every
      // allreduce pays the network's latency, more than the copy: fuse all.
      fusionAloneBytes_(comm_->layout().crossSize > 1 ? std::numeric_limits<size_t>::max()
                                                      : kFusionAloneBytes),
      negotiator_(rank_, size_, std::max<size_t>(1, options_.cacheCapacity)),
      straggler_(size_, options_.straggler) {
  if (options_.deterministic) {
    if (hasAlgorithm("ordered")) {
      algorithm_ = "ordered";
    } else if (rank_ == 0) {
      KOLO_LOG(kWarning)
          << "KOLO_DETERMINISTIC=1: this build has no 'ordered' allreduce; "
             "using the selection table";
    }
  }
  if (rank_ == 0) {
    if (options_.stallCheck) {
      stall_ = std::make_unique<StallInspector>(options_.stallWarningSeconds,
                                                options_.stallShutdownSeconds);
    }
    if (options_.autotune) {
      autotuner_ = std::make_unique<Autotuner>(Autotuner::defaultGrid(),
                                               options_.autotuneWarmupSamples,
                                               options_.autotuneStepsPerSample);
      if (!options_.autotuneLogPath.empty()) {
        autotuneLog_ = AutotuneLog::open(options_.autotuneLogPath);
      }
    }
    if (!options_.timelinePath.empty()) {
      timeline_ = TimelineWriter::open(options_.timelinePath, rank_);
    }
  }
  lastSample_ = Clock::now();
  thread_ = std::thread([this] { loop(); });
}

Runtime::~Runtime() {
  shutdown();
}

void Runtime::startTimeline(const std::string& path) {
  auto writer = TimelineWriter::open(path, rank_);
  std::lock_guard<std::mutex> lock(timelineMu_);
  if (timeline_) timeline_->close();
  timeline_ = std::move(writer);
}

void Runtime::stopTimeline() {
  std::shared_ptr<TimelineWriter> old;
  {
    std::lock_guard<std::mutex> lock(timelineMu_);
    old.swap(timeline_);
  }
  if (old) old->close();
}

std::shared_ptr<TimelineWriter> Runtime::timeline() const {
  std::lock_guard<std::mutex> lock(timelineMu_);
  return timeline_;
}

StragglerReport Runtime::stragglerReport() const {
  std::lock_guard<std::mutex> lock(stragglerMu_);
  return straggler_.report();
}

void Runtime::shutdown() {
  std::call_once(shutdownOnce_, [this] {
    shutdownRequested_ = true;
    queue_->wake();
    if (thread_.joinable()) thread_.join();
    stopTimeline();
  });
}

}  // namespace kolo::runtime
