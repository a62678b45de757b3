// The runtime's background loop (docs/runtime.md, "One cycle").
//
// Each cycle, on every rank in lockstep:
//   drain the submission queue -> Negotiator::prepare -> allgather of the
//   fixed parts -> allgatherv of the variable parts when a fixed part
//   announces one -> Negotiator::process -> mismatch errors to their
//   handles -> planBuckets -> run each bucket -> stall inspector, straggler
//   tracker, autotuner -> wait for the next cycle.
// Waiting: the next cycle starts `cycle time` (rank 0's) after this one
// started; when nothing is pending anywhere after a cycle, the loop sleeps
// until the first submission (or kIdlePace, at least one cycle time, for an
// empty exchange: a rank with nothing pending is needed by the others only
// to learn of shutdowns, joins and stalls, since nothing can be ready
// without it), and that submission opens a gathering window of at most one cycle time
// that closes once the queue stopped growing for kGatherQuiet (so a burst lands in one
// cycle, and a lone operation waits only that quiet time). join() and shutdown() wake the
// loop.
//
// Running a bucket of allreduces: when this rank submitted every member and
// none has a prescale, one segmented allreduce (AllreduceOptions::segments)
// reads the members' inputs and writes their outputs directly (the shm
// algorithm copies them straight into and out of its staging memory; the
// others pack them inside the communicator), and each output is then
// multiplied by postscale in place. Otherwise each member's input is copied
// into the fusion buffer (times prescale; a rank that did not submit the
// operation writes the reduction's identity: zeros for sum and average),
// one allreduce runs in place, and each slice is scaled on its way to the
// member's output (one pass). An average of every rank is the
// Communicator's average (the shm algorithm divides each slice as it
// reduces it); with a joined rank it runs as a sum and is divided by the
// contributors together with the postscale. A bucket of one
// allreduce runs in place in the caller's output buffer; the fusion planner
// gives every allreduce above kFusionAloneBytes (256 KiB) such a bucket.
// Other kinds run one collective per operation.
#include "runtime/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "common/backoff.h"
#include "common/check.h"
#include "common/logging.h"
#include "runtime/fusion_planner.h"

namespace kolo::runtime {

namespace {

// buf[i] *= factor, in the element type (float16 / bfloat16 through float,
// integers truncated toward zero).
void scaleInPlace(void* buf, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  auto loop = [&](auto* p, auto convertIn, auto convertOut) {
    for (size_t i = 0; i < count; ++i) p[i] = convertOut(convertIn(p[i]) * factor);
  };
  switch (dtype) {
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(buf);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) p[i] *= f;
      return;
    }
    case DataType::kFloat64: {
      auto* p = static_cast<double*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] *= factor;
      return;
    }
    case DataType::kFloat16:
      loop(
          static_cast<uint16_t*>(buf),
          [](uint16_t v) { return collectives::halfToFloat(v); },
          [](double v) { return collectives::floatToHalf(static_cast<float>(v)); });
      return;
    case DataType::kBFloat16:
      loop(
          static_cast<uint16_t*>(buf),
          [](uint16_t v) { return collectives::bfloat16ToFloat(v); },
          [](double v) { return collectives::floatToBfloat16(static_cast<float>(v)); });
      return;
    case DataType::kInt32:
      loop(
          static_cast<int32_t*>(buf), [](int32_t v) { return double(v); },
          [](double v) { return static_cast<int32_t>(v); });
      return;
    case DataType::kInt64:
      loop(
          static_cast<int64_t*>(buf), [](int64_t v) { return double(v); },
          [](double v) { return static_cast<int64_t>(v); });
      return;
    case DataType::kUInt8:
      loop(
          static_cast<uint8_t*>(buf), [](uint8_t v) { return double(v); },
          [](double v) { return static_cast<uint8_t>(v); });
      return;
  }
}

// Copies with a per-element operation go through L1-sized chunks: the chunk
// is copied, then the vectorized kernels (divideInPlace; scaleInPlace)
// rework it while it is in cache, so the pair costs about one pass over
// memory. The kernels' per-element results are those of the whole-buffer
// calls, so a result does not depend on the path (deterministic sums).
constexpr size_t kChunkBytes = size_t{16} << 10;

// An allreduce's result from its sum: dst = src / divisor (1: none) *
// postscale; dst may equal src.
void finishInto(void* dst, const void* src, size_t count, DataType dtype, int divisor,
                double postscale) {
  if (count == 0) return;
  auto rework = [&](void* p, size_t m) {
    if (divisor != 1) collectives::divideInPlace(p, m, dtype, divisor);
    scaleInPlace(p, m, dtype, postscale);
  };
  if (dst == src || (divisor == 1 && postscale == 1.0)) {
    if (dst != src) std::memcpy(dst, src, count * elementSize(dtype));
    rework(dst, count);
    return;
  }
  const size_t esize = elementSize(dtype);
  const size_t chunk = std::max<size_t>(1, kChunkBytes / esize);
  for (size_t at = 0; at < count; at += chunk) {
    const size_t m = std::min(chunk, count - at);
    void* d = static_cast<uint8_t*>(dst) + at * esize;
    std::memcpy(d, static_cast<const uint8_t*>(src) + at * esize, m * esize);
    rework(d, m);
  }
}

// dst = src * factor (an input times prescale); dst may equal src.
void copyScaled(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  finishInto(dst, src, count, dtype, 1, factor);
}

template <typename T>
void fillWith(void* buf, size_t count, T v) {
  std::fill_n(static_cast<T*>(buf), count, v);
}

// The identity of `op` (what a rank without data contributes): 0 for sum
// and average, 1 for product, the largest value for min, the smallest for
// max.
void fillIdentity(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    std::memset(buf, 0, count * elementSize(dtype));
    return;
  }
  const int which = op == ReduceOp::kProduct ? 0 : op == ReduceOp::kMin ? 1 : 2;
  auto pick = [&](auto one, auto high, auto low) {
    return which == 0 ? one : which == 1 ? high : low;
  };
  switch (dtype) {
    case DataType::kFloat32:
      return fillWith<float>(buf, count,
                             pick(1.0f, std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()));
    case DataType::kFloat64:
      return fillWith<double>(buf, count,
                              pick(1.0, std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity()));
    case DataType::kFloat16:
      return fillWith<uint16_t>(
          buf, count, pick(uint16_t{0x3C00}, uint16_t{0x7C00}, uint16_t{0xFC00}));
    case DataType::kBFloat16:
      return fillWith<uint16_t>(
          buf, count, pick(uint16_t{0x3F80}, uint16_t{0x7F80}, uint16_t{0xFF80}));
    case DataType::kInt32:
      return fillWith<int32_t>(buf, count,
                               pick(int32_t{1}, std::numeric_limits<int32_t>::max(),
                                    std::numeric_limits<int32_t>::min()));
    case DataType::kInt64:
      return fillWith<int64_t>(buf, count,
                               pick(int64_t{1}, std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()));
    case DataType::kUInt8:
      return fillWith<uint8_t>(buf, count, pick(uint8_t{1}, uint8_t{255}, uint8_t{0}));
  }
}

// The gathering window's quiet time: after an idle spell, the first
// submission's cycle waits until no submission arrived for this long (at
// most one cycle time).
constexpr std::chrono::microseconds kGatherQuiet{50};

// The pace of empty exchanges while nothing is pending anywhere.
constexpr std::chrono::milliseconds kIdlePace{20};

std::exception_ptr errorPtr(ErrorCode code, const std::string& message, int peer = -1) {
  return std::make_exception_ptr(Error(code, message, peer));
}

bool hasAlgorithm(std::string_view name) {
  for (const auto& a : collectives::allreduceAlgorithms()) {
    if (a.name == name) return true;
  }
  return false;
}

int64_t rowElements(const OpSpec& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.shape.size(); ++i) n *= s.shape[i];
  return n;
}

}  // namespace

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

// ---- callers' side ------------------------------------------------------------

HandlePtr Runtime::failed(HandlePtr handle, const std::exception_ptr& error) {
  handle->fail(error);
  return handle;
}

void Runtime::validate(const OpRequest& r) const {
  const OpSpec& s = r.spec;
  // Built only for an error message.
  auto what = [&s] { return std::string(toString(s.kind)) + " '" + s.name + "'"; };
  if (s.name.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument, toString(s.kind) << ": empty operation name");
  }
  if (s.kind == OpKind::kJoin ||
      static_cast<int>(s.kind) > static_cast<int>(OpKind::kJoin)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": invalid kind "
                                                   << static_cast<int>(s.kind)
                                                   << " (use join())");
  }
  if (s.kind == OpKind::kBarrier) return;
  if (!isValid(s.dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": unknown dtype value " << static_cast<int>(s.dtype));
  }
  const bool reduces = s.kind == OpKind::kAllreduce || s.kind == OpKind::kReduceScatter;
  if (reduces && !isValid(s.op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": unknown reduction value " << static_cast<int>(s.op));
  }
  for (int64_t d : s.shape) {
    if (d < 0) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what() << ": negative dimension in shape " << shapeString(s.shape));
    }
  }
  if (reduces && (!std::isfinite(s.prescale) || !std::isfinite(s.postscale))) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": scale factors must be finite (prescale " << s.prescale
                      << ", postscale " << s.postscale << ")");
  }
  const size_t bytes = s.bytes();
  if (bytes > 0 && r.input == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": null input buffer for " << bytes << " bytes");
  }
  const bool callerOutput = s.kind == OpKind::kAllreduce ||
                            s.kind == OpKind::kBroadcast ||
                            s.kind == OpKind::kReduceScatter;
  if (callerOutput && bytes > 0 && r.output == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": null output buffer for " << bytes << " bytes");
  }
  if (s.kind == OpKind::kBroadcast && (s.root < 0 || s.root >= size_)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what() << ": root " << s.root << " outside 0.." << size_ - 1);
  }
  if (s.kind == OpKind::kReduceScatter || s.kind == OpKind::kAllgather ||
      s.kind == OpKind::kAlltoall) {
    if (s.shape.empty()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what() << ": needs at least one dimension (shape [])");
    }
  }
  if (s.kind == OpKind::kReduceScatter && s.shape[0] % size_ != 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": first dimension " << s.shape[0]
                                                   << " does not divide by the " << size_
                                                   << " ranks");
  }
  if (s.kind == OpKind::kAlltoall) {
    if (r.splits.empty()) {
      if (s.shape[0] % size_ != 0) {
        KOLO_THROW(ErrorCode::kInvalidArgument, what()
                                                    << ": first dimension " << s.shape[0]
                                                    << " does not divide by the " << size_
                                                    << " ranks (give splits)");
      }
    } else {
      if (static_cast<int>(r.splits.size()) != size_) {
        KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": " << r.splits.size()
                                                       << " splits for " << size_
                                                       << " ranks");
      }
      int64_t sum = 0;
      for (int64_t v : r.splits) {
        if (v < 0)
          KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": negative split " << v);
        sum += v;
      }
      if (sum != s.shape[0]) {
        KOLO_THROW(ErrorCode::kInvalidArgument, what() << ": splits sum to " << sum
                                                       << ", first dimension is "
                                                       << s.shape[0]);
      }
    }
  }
}

HandlePtr Runtime::enqueue(const OpRequest& request) {
  try {
    validate(request);
  } catch (...) {
    return failed(std::make_shared<Handle>(request.spec.name, queue_),
                  std::current_exception());
  }
  if (request.spec.group != 0 || request.spec.groupSize != 0) {
    // Group ids belong to enqueueGroup: a lone operation has none.
    OpRequest lone = request;
    lone.spec.group = 0;
    lone.spec.groupSize = 0;
    return enqueue(lone);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_)
    return failed(std::make_shared<Handle>(request.spec.name, queue_), broken_);
  const uint32_t nameId = nameIdLocked(request.spec.name);
  auto handle = std::make_shared<Handle>(names_[nameId], queue_);
  if (namePending_[nameId]) {
    return failed(handle, errorPtr(ErrorCode::kInvalidArgument,
                                   std::string(toString(request.spec.kind)) + " '" +
                                       request.spec.name + "' on rank " +
                                       std::to_string(rank_) + ": name already pending"));
  }
  if (!queue_->push(request, handle, nameId)) {
    return failed(handle,
                  errorPtr(ErrorCode::kNotInitialized, "the runtime has stopped"));
  }
  namePending_[nameId] = 1;
  return handle;
}

uint32_t Runtime::nameIdLocked(const std::string& name) {
  if (auto it = nameIds_.find(name); it != nameIds_.end()) return it->second;
  if (nameIds_.size() >= nameSweepAt_) {
    // Names used once (e.g. with a step number in them) would pile up:
    // drop those not pending, then allow twice what is left before the next
    // sweep (amortized constant time per new name).
    for (auto it = nameIds_.begin(); it != nameIds_.end();) {
      if (namePending_[it->second]) {
        ++it;
      } else {
        freeNameIds_.push_back(it->second);
        names_[it->second].reset();
        it = nameIds_.erase(it);
      }
    }
    nameSweepAt_ = std::max<size_t>(4096, 2 * nameIds_.size());
  }
  uint32_t id;
  if (!freeNameIds_.empty()) {
    id = freeNameIds_.back();
    freeNameIds_.pop_back();
  } else {
    id = static_cast<uint32_t>(namePending_.size());
    namePending_.push_back(0);
    names_.emplace_back();
  }
  nameIds_.emplace(name, id);
  // On cache lines of its own: every handle of this name updates its
  // reference count on the caller's thread, so nothing the background
  // thread writes may share that line.
  struct alignas(64) Interned {
    explicit Interned(const std::string& n) : text(n) {}
    std::string text;
  };
  auto interned = std::make_shared<const Interned>(name);
  names_[id] = std::shared_ptr<const std::string>(interned, &interned->text);
  return id;
}

std::vector<HandlePtr> Runtime::enqueueGroup(std::vector<OpRequest> requests) {
  std::vector<HandlePtr> handles;
  std::vector<std::string> names;
  for (const auto& r : requests) {
    handles.push_back(std::make_shared<Handle>(r.spec.name, queue_));
    names.push_back(r.spec.name);
  }
  auto failAll = [&](const std::exception_ptr& e) {
    for (auto& h : handles) h->fail(e);
    return handles;
  };
  if (requests.empty()) return handles;
  try {
    // A group occupies one cache slot per member until it runs: more members
    // than slots would evict each other for ever.
    if (requests.size() > options_.cacheCapacity) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "group of " << requests.size() << " operations (first '"
                             << requests.front().spec.name << "') exceeds "
                             << "KOLO_CACHE_CAPACITY=" << options_.cacheCapacity
                             << "; split the group or raise the capacity");
    }
    std::unordered_set<std::string> unique;
    for (const auto& r : requests) {
      validate(r);
      if (!unique.insert(r.spec.name).second) {
        KOLO_THROW(ErrorCode::kInvalidArgument,
                   "group: the name '" << r.spec.name << "' appears twice");
      }
    }
  } catch (...) {
    return failAll(std::current_exception());
  }
  const uint64_t group = groupId(names);
  std::vector<Submission> items;
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].spec.group = group;
    requests[i].spec.groupSize = static_cast<uint32_t>(requests.size());
    items.push_back(Submission{std::move(requests[i]), handles[i], false});
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return failAll(broken_);
  for (size_t i = 0; i < names.size(); ++i) {
    items[i].nameId = nameIdLocked(names[i]);
    if (namePending_[items[i].nameId]) {
      return failAll(errorPtr(ErrorCode::kInvalidArgument,
                              "group member '" + names[i] + "' on rank " +
                                  std::to_string(rank_) + ": name already pending"));
    }
  }
  std::vector<uint32_t> ids;
  for (const auto& item : items) ids.push_back(item.nameId);
  if (!queue_->pushAll(std::move(items))) {
    return failAll(errorPtr(ErrorCode::kNotInitialized, "the runtime has stopped"));
  }
  for (uint32_t id : ids) namePending_[id] = 1;
  return handles;
}

HandlePtr Runtime::join() {
  auto handle = std::make_shared<Handle>("join");
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return failed(handle, broken_);
  Submission s;
  s.handle = handle;
  s.join = true;
  if (!queue_->push(std::move(s))) {
    return failed(handle,
                  errorPtr(ErrorCode::kNotInitialized, "the runtime has stopped"));
  }
  queue_->wake();
  return handle;
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

// ---- background thread --------------------------------------------------------

void Runtime::admit(std::vector<Submission>& items, size_t count) {
  auto tl = timeline();
  for (size_t i = 0; i < count; ++i) {
    Submission& item = items[i];
    if (item.join) {
      joined_ = true;
      joinHandles_.push_back(std::move(item.handle));
      continue;
    }
    uint32_t slot;
    if (!freeOps_.empty()) {
      slot = freeOps_.back();
      freeOps_.pop_back();
    } else {
      slot = static_cast<uint32_t>(ops_.size());
      ops_.emplace_back();
    }
    const OpId id = (nextSeq_++ << 32) | slot;
    if (tl) tl->begin(item.request.spec.name, phase::kNegotiate);
    try {
      // Copied into the negotiator's storage: the submission keeps its
      // strings' memory for the queue's next pushes.
      if (item.nameId >= slotHints_.size()) {
        slotHints_.resize(item.nameId + 1, Negotiator::kNoSlot);
      }
      negotiator_.submit(id, item.request.spec, &slotHints_[item.nameId]);
    } catch (...) {
      if (tl) tl->end(item.handle->name());
      freeOps_.push_back(slot);
      {
        std::lock_guard<std::mutex> lock(mu_);
        namePending_[item.nameId] = 0;
      }
      item.handle->fail(std::current_exception());
      item.handle.reset();
      continue;
    }
    Op& o = ops_[slot];
    o.input = item.request.input;
    o.output = item.request.output;
    o.splits.swap(item.request.splits);
    o.handle = std::move(item.handle);
    o.nameId = item.nameId;
    o.id = id;
  }
}

// A bucket's handles: one lock for the pending names, then the completions.
// Each reference is dropped right after its completion: a caller woken by
// an early handle of the bucket drops its own references to the next ones
// as it submits its next step, and the thread that drops the last one
// frees the handle; dropped here only after the whole bucket, most handles
// of a large bucket were freed by this thread, into its own allocator
// cache, from memory the caller had allocated.
void Runtime::finishAll(const std::vector<OpId>& ids) {
  std::vector<HandlePtr>& handles = finishing_;
  handles.clear();
  handles.reserve(ids.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (OpId id : ids) {
      if (HandlePtr h = releaseLocked(id)) handles.push_back(std::move(h));
    }
  }
  for (auto& h : handles) {
    h->complete();
    h.reset();
  }
}

void Runtime::finish(OpId id, std::exception_ptr error) {
  HandlePtr handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handle = releaseLocked(id);
  }
  if (!handle) return;
  if (error) {
    handle->fail(error);
  } else {
    handle->complete();
  }
}

HandlePtr Runtime::releaseLocked(OpId id) {
  Op& o = opAt(id);
  if (!o.handle) return nullptr;
  namePending_[o.nameId] = 0;
  o.splits.clear();
  freeOps_.push_back(static_cast<uint32_t>(id));
  return std::move(o.handle);
}

void Runtime::stop(
    const std::exception_ptr& error,
    const std::function<std::exception_ptr(const std::string&)>& errorFor) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) broken_ = error;
    queue_->close();
  }
  admit(admitted_, queue_->drainInto(admitted_));
  // Everything still held: pending in the negotiator, or ready in a cycle
  // that a failure cut short. In submission order.
  std::vector<OpId> ids;
  for (const Op& o : ops_) {
    if (o.handle) ids.push_back(o.id);
  }
  std::sort(ids.begin(), ids.end());
  for (OpId id : ids) finish(id, errorFor(opAt(id).handle->name()));
  for (auto& h : joinHandles_) h->fail(errorFor("join"));
  joinHandles_.clear();
}

void Runtime::loop() {
  // The waits for other ranks spin at most options_.spinMicros, then sleep
  // (futex or poll, woken by the peer): this thread shares the rank's cores
  // with the training thread, and a negotiation cycle may wait up to a cycle
  // time for a peer's thread to start its own.
  const Backoff::WaitCap waitCap(
      std::chrono::microseconds(std::max<int64_t>(0, options_.spinMicros)),
      std::chrono::microseconds(0));
  pthread_setname_np(pthread_self(), "kolo-runtime");  // as top -H shows it
  const size_t fixedBytes = negotiator_.fixedBytes();
  std::vector<uint8_t> gathered;
  std::vector<std::vector<uint8_t>> fixed(size_), variable(size_);
  try {
    while (true) {
      const auto cycleStart = Clock::now();
      markCycle(cycleStart);
      admit(admitted_, queue_->drainInto(admitted_));

      CycleFlags flags;
      flags.shutdown = shutdownRequested_.load();
      flags.joined = joined_;
      flags.stallShutdown = stallReason_;
      flags.fusionThresholdBytes = options_.fusionThresholdBytes;
      flags.cycleTimeMs = options_.cycleTimeMs;
      if (autotuner_) {
        const TuningPoint p = autotuner_->current();
        flags.fusionThresholdBytes = p.fusionThresholdBytes;
        flags.cycleTimeMs = p.cycleTimeMs;
      }
      Message message = negotiator_.prepare(flags);

      // The exchange: fixed parts, then variable parts when announced.
      gathered.resize(fixedBytes * size_);
      AllgatherOptions ag;
      ag.send = message.fixed.data();
      ag.recv = gathered.data();
      ag.count = fixedBytes;
      ag.dtype = DataType::kUInt8;
      comm_->allgather(ag);
      std::vector<size_t> counts(size_);
      size_t total = 0;
      for (int r = 0; r < size_; ++r) {
        fixed[r].assign(gathered.begin() + r * fixedBytes,
                        gathered.begin() + (r + 1) * fixedBytes);
        counts[r] = Negotiator::variableBytes(fixed[r]);
        total += counts[r];
      }
      if (total > 0) {
        std::vector<uint8_t> all(total);
        AllgatherOptions agv;
        agv.send = message.variable.data();
        agv.recv = all.data();
        agv.counts = counts;
        agv.dtype = DataType::kUInt8;
        comm_->allgather(agv);
        size_t at = 0;
        for (int r = 0; r < size_; ++r) {
          variable[r].assign(all.begin() + at, all.begin() + at + counts[r]);
          at += counts[r];
        }
      } else {
        for (auto& v : variable) v.clear();
      }

      Outcome outcome = negotiator_.process(fixed, variable, cycleStart);
      auto tl = timeline();
      for (const auto& e : outcome.errors) {
        if (tl) tl->end(e.name);
        finish(e.localId, errorPtr(ErrorCode::kMismatch, e.message));
      }
      if (tl) {
        for (const auto& op : outcome.ready) {
          if (op.localId) tl->end(op.spec->name);
        }
      }

      // Arrivals are recorded before the handles complete, so a caller's
      // stragglerReport() after wait() includes its operation.
      if (!outcome.ready.empty()) {
        std::lock_guard<std::mutex> lock(stragglerMu_);
        for (const auto& op : outcome.ready)
          straggler_.record(op.arrivals, op.spec->name);
      }

      // Run the ready operations, bucket by bucket, in the same order on
      // every rank.
      cycleBytes_ = 0;
      const auto buckets =
          planBuckets(outcome.ready, outcome.fusionThresholdBytes, fusionAloneBytes_);
      for (size_t b = 0; b < buckets.size(); ++b) {
        runBucket(buckets[b].members, outcome.ready, buckets[b].bytes,
                  static_cast<int>(b));
      }
      observe(outcome, cycleStart);

      if (static_cast<int>(outcome.joinedRanks.size()) == size_) {
        for (auto& h : joinHandles_) h->complete();
        joinHandles_.clear();
        joined_ = false;
      }
      if (!outcome.shutdownRanks.empty()) {
        const int who = outcome.shutdownRanks.front();
        const ErrorCode code =
            who == rank_ ? ErrorCode::kNotInitialized : ErrorCode::kPeerLost;
        const int peer = who == rank_ ? -1 : who;
        stop(errorPtr(code,
                      "the runtime stopped: rank " + std::to_string(who) + " shut down",
                      peer),
             [&](const std::string& name) {
               return errorPtr(code,
                               "rank " + std::to_string(who) + " shut down while '" +
                                   name + "' was pending",
                               peer);
             });
        return;
      }
      if (!outcome.stallShutdown.empty()) {
        KOLO_LOG(kError) << outcome.stallShutdown;
        const auto e = errorPtr(ErrorCode::kTimeout, outcome.stallShutdown);
        stop(e, [&](const std::string&) { return e; });
        return;
      }

      // Pacing. Idle (nothing pending on any rank once this cycle's ready
      // operations ran): sleep until a submission arrives, or kIdlePace (at
      // least one cycle time) from now for the next (empty) exchange; a
      // submission opens the
      // gathering window, which lasts while submissions keep arriving (until
      // kGatherQuiet passes without one, at most one cycle time), so a burst
      // lands in one cycle. Otherwise the next cycle starts one cycle time
      // after this one started.
      const bool idle =
          outcome.waiting.empty() && negotiator_.pendingCount() == 0 && !joined_;
      const auto pace = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(std::max(0.0, outcome.cycleTimeMs)));
      if (idle) {
        const auto idlePace = std::max<Clock::duration>(pace, kIdlePace);
        if (queue_->waitUntil(Clock::now() + idlePace, true) &&
            pace > Clock::duration::zero()) {
          const auto quiet = std::min<Clock::duration>(kGatherQuiet, pace);
          queue_->waitQuiet(quiet, Clock::now() + pace);
        }
      } else {
        queue_->waitUntil(cycleStart + pace, false);
      }
    }
  } catch (...) {
    // A transport failure, a lost peer, a timeout: every pending and later
    // operation fails with it.
    const auto error = std::current_exception();
    std::string text = "?";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      text = e.what();
    } catch (...) {
    }
    KOLO_LOG(kError) << "runtime stopped: " << text;
    stop(error, [&](const std::string&) { return error; });
  }
}

void Runtime::observe(const Outcome& outcome, Clock::time_point cycleStart) {
  if (!outcome.ready.empty()) {
    std::lock_guard<std::mutex> lock(stragglerMu_);
    if (rank_ == 0) {
      const std::string line = straggler_.namedStraggler(cycleStart);
      if (!line.empty()) {
        KOLO_LOG(kWarning) << line;
      }
    }
  }
  if (stall_) inspectStalls(outcome);
  sampleAutotuner(outcome);
  (void)cycleStart;
}

void Runtime::inspectStalls(const Outcome& outcome) {
  const auto now = Clock::now();
  std::vector<PendingName> pending;
  pending.reserve(outcome.waiting.size());
  for (const auto& w : outcome.waiting) {
    pending.push_back({w.name, toString(w.kind), w.submitted});
  }
  stall_->observe(now, pending);
  const std::string warning = stall_->warning(now);
  if (!warning.empty()) {
    KOLO_LOG(kWarning) << warning;
    if (auto tl = timeline()) tl->instant("stall", "STALL_WARNING");
  }
  if (stallReason_.empty()) stallReason_ = stall_->shutdownReason(now);
}

void Runtime::sampleAutotuner(const Outcome& outcome) {
  if (autotuner_ && cycleBytes_ > 0) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - lastSample_).count();
    lastSample_ = now;
    if (!autotuner_->record(cycleBytes_, seconds)) return;
    KOLO_LOG(kInfo) << autotuner_->logLine();
    if (autotuneLog_) {
      autotuneLog_->write(autotuner_->lastTrial());
      if (autotuner_->done()) autotuneLog_->write(autotuner_->best());
    }
  } else if (cycleBytes_ == 0 && outcome.ready.empty() && outcome.waiting.empty()) {
    lastSample_ = Clock::now();  // idle time is not the tuning's fault
  }
}

void Runtime::markCycle(Clock::time_point cycleStart) {
  if (!options_.timelineMarkCycles) return;
  if (auto tl = timeline()) tl->instant("cycles", "CYCLE_START", cycleStart);
}

void Runtime::runBucket(const std::vector<size_t>& members, std::vector<ReadyOp>& ready,
                        size_t bytes, int bucketIndex) {
  bool fused = true;
  for (size_t m : members) fused = fused && ready[m].spec->kind == OpKind::kAllreduce;
  if (fused) {
    std::vector<ReadyOp*> ops;
    for (size_t m : members) ops.push_back(&ready[m]);
    return runAllreduce(ops, bytes, bucketIndex);
  }
  for (size_t m : members) runOne(ready[m], bucketIndex);
}

void Runtime::runAllreduce(const std::vector<ReadyOp*>& members, size_t bytes,
                           int bucketIndex) {
  // A group may mix keys: then each member runs alone.
  for (const ReadyOp* m : members) {
    const OpSpec& a = *members.front()->spec;
    const OpSpec& b = *m->spec;
    if (a.dtype != b.dtype || a.op != b.op || a.prescale != b.prescale ||
        a.postscale != b.postscale) {
      for (ReadyOp* x : members) runAllreduce({x}, x->spec->bytes(), bucketIndex);
      return;
    }
  }
  const OpSpec& first = *members.front()->spec;
  const DataType dtype = first.dtype;
  const ReduceOp op = first.op;
  // An average over the team's size is the Communicator's own average
  // (divided inside the shm algorithm while in cache): always so when every
  // rank contributed, and in Horovod's join mode, where a joined rank's
  // zeros count. Left-out joined ranks: the sum is divided by the
  // contributors afterwards.
  const bool everyRank =
      options_.joinMode == RuntimeOptions::JoinMode::kHorovod ||
      std::all_of(members.begin(), members.end(),
                  [&](const ReadyOp* m) { return m->contributors() == size_; });
  const bool averaged = op == ReduceOp::kAverage && everyRank;
  const ReduceOp commOp = op == ReduceOp::kAverage && !averaged ? ReduceOp::kSum : op;
  const size_t esize = elementSize(dtype);
  auto tl = timeline();
  std::string args;
  if (tl) {
    args =
        timelineArgs({{"algorithm", algorithm_.empty() ? comm_->allreduceAlgorithm(bytes)
                                                       : algorithm_},
                      {"bytes", std::to_string(bytes)},
                      {"bucket", std::to_string(bucketIndex)},
                      {"tensors", std::to_string(members.size())}});
  }
  // After the collective: the average's division when the collective did
  // not do it, and postscale, from `src` into `dst` in one pass.
  auto finishValues = [&](const ReadyOp& r, void* dst, const void* src) {
    const size_t n = static_cast<size_t>(r.spec->elements());
    const int divisor =
        op == ReduceOp::kAverage && !averaged ? std::max(1, r.contributors()) : 1;
    finishInto(dst, src, n, dtype, divisor, r.spec->postscale);
  };
  cycleBytes_ += bytes;

  // One operation of this rank's: in place in the caller's output buffer.
  if (members.size() == 1 && members[0]->localId) {
    ReadyOp& r = *members[0];
    Op& o = opAt(*r.localId);
    const size_t n = static_cast<size_t>(r.spec->elements());
    copyScaled(o.output, o.input, n, dtype, r.spec->prescale);
    if (tl) tl->begin(r.spec->name, phase::kCollective, args);
    AllreduceOptions ar;
    ar.send = ar.recv = o.output;
    ar.count = n;
    ar.dtype = dtype;
    ar.op = commOp;
    ar.algorithm = algorithm_;
    comm_->allreduce(ar);
    if (tl) tl->end(r.spec->name);
    finishValues(r, o.output, o.output);
    finish(*r.localId);
    return;
  }

  // Several of this rank's, no prescale: one segmented allreduce straight
  // from the inputs into the outputs (the shm algorithm copies nothing
  // else; the others pack them inside the communicator), then each output
  // finished in place.
  const bool allLocal = std::all_of(members.begin(), members.end(), [](const ReadyOp* m) {
    return m->localId.has_value();
  });
  if (allLocal && first.prescale == 1.0) {
    segments_.clear();
    for (const ReadyOp* m : members) {
      const Op& o = opAt(*m->localId);
      segments_.push_back({o.input, o.output, static_cast<size_t>(m->spec->elements())});
      if (tl) tl->begin(m->spec->name, phase::kCollective, args);
    }
    AllreduceOptions ar;
    ar.count = bytes / esize;
    ar.dtype = dtype;
    ar.op = commOp;
    ar.algorithm = algorithm_;
    ar.segments = segments_.data();
    ar.segmentCount = segments_.size();
    comm_->allreduce(ar);
    // Nothing left to do to the outputs when the collective averaged (or
    // the reduction is not an average) and there is no postscale (the
    // members share one: same key).
    const bool rework = (op == ReduceOp::kAverage && !averaged) || first.postscale != 1.0;
    std::vector<OpId> done;
    done.reserve(members.size());
    for (const ReadyOp* m : members) {
      const ReadyOp& r = *m;
      if (tl) tl->end(r.spec->name);
      if (rework) {
        void* out = opAt(*r.localId).output;
        finishValues(r, out, out);
      }
      done.push_back(*r.localId);
    }
    return finishAll(done);
  }

  // A joined rank's share (the reduction's identity) or a prescale: through
  // the fusion buffer.
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  size_t at = 0;
  for (const ReadyOp* m : members) {
    const ReadyOp& r = *m;
    const size_t n = static_cast<size_t>(r.spec->elements());
    uint8_t* p = fusion_.data() + at;
    if (tl && r.localId) tl->begin(r.spec->name, phase::kMemcpyIn);
    if (r.localId) {
      const Op& o = opAt(*r.localId);
      copyScaled(p, o.input, n, dtype, r.spec->prescale);
    } else {
      fillIdentity(p, n, dtype, commOp);
    }
    if (tl && r.localId) tl->end(r.spec->name);
    at += n * esize;
  }
  if (tl) {
    for (const ReadyOp* m : members) {
      if (m->localId) tl->begin(m->spec->name, phase::kCollective, args);
    }
  }
  AllreduceOptions ar;
  ar.send = ar.recv = fusion_.data();
  ar.count = bytes / esize;
  ar.dtype = dtype;
  ar.op = commOp;
  ar.algorithm = algorithm_;
  comm_->allreduce(ar);
  at = 0;
  std::vector<OpId> done;
  done.reserve(members.size());
  for (const ReadyOp* m : members) {
    const ReadyOp& r = *m;
    const size_t n = static_cast<size_t>(r.spec->elements());
    uint8_t* p = fusion_.data() + at;
    at += n * esize;
    if (!r.localId) continue;
    if (tl) {
      tl->end(r.spec->name);
      tl->begin(r.spec->name, phase::kMemcpyOut);
    }
    const Op& o = opAt(*r.localId);
    finishValues(r, o.output, p);
    if (tl) tl->end(r.spec->name);
    done.push_back(*r.localId);
  }
  finishAll(done);
}

// In Horovod's join mode, an operation other than an allreduce or barrier
// that a joined rank would take part in fails on every rank that submitted
// it, naming the first joined rank. Decided alike on every rank (the
// submissions are agreed), so no collective runs anywhere.
std::exception_ptr Runtime::joinedRankError(const ReadyOp& r) const {
  const OpSpec& s = *r.spec;
  if (options_.joinMode != RuntimeOptions::JoinMode::kHorovod ||
      s.kind == OpKind::kBarrier || r.contributors() == size_) {
    return nullptr;
  }
  const int joined =
      static_cast<int>(std::find(r.submitted.begin(), r.submitted.end(), uint8_t{0}) -
                       r.submitted.begin());
  return errorPtr(ErrorCode::kInvalidArgument,
                  std::string(toString(s.kind)) + " '" + s.name + "': rank " +
                      std::to_string(joined) +
                      " has joined (join()); with KOLO_JOIN_MODE=horovod only "
                      "allreduce and barrier go on with joined ranks");
}

// Every kind but a fused allreduce: one collective for one operation. A
// rank that did not submit it (joined) takes part with nothing to give:
// zero rows for allgather and alltoall, the identity for reducescatter,
// its output discarded (KOLO_JOIN_MODE=absent; in Horovod's mode these
// kinds fail instead: joinedRankError).
void Runtime::runOne(ReadyOp& r, int bucketIndex) {
  const OpSpec& s = *r.spec;
  if (s.kind == OpKind::kAllreduce) {
    return runAllreduce({&r}, s.bytes(), bucketIndex);
  }
  Op* o = r.localId ? &opAt(*r.localId) : nullptr;
  const size_t esize = s.kind == OpKind::kBarrier ? 1 : elementSize(s.dtype);
  const size_t n = static_cast<size_t>(s.kind == OpKind::kBarrier ? 0 : s.elements());
  auto tl = timeline();
  if (tl && o) {
    tl->begin(s.name, phase::kCollective,
              timelineArgs({{"bytes", std::to_string(s.bytes())},
                            {"bucket", std::to_string(bucketIndex)}}));
  }
  auto scratch = [&](size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  };
  std::exception_ptr opError = joinedRankError(r);
  switch (opError ? OpKind::kJoin : s.kind) {  // kJoin: run nothing
    case OpKind::kBarrier: comm_->barrier(); break;
    case OpKind::kBroadcast: {
      if (!r.submitted[s.root]) {
        // Decided alike on every rank: no collective runs.
        opError = errorPtr(ErrorCode::kInvalidArgument,
                           "broadcast '" + s.name + "': root rank " +
                               std::to_string(s.root) + " has joined and has no data");
        break;
      }
      void* buf = o ? o->output : scratch(n * esize);
      if (o && s.root == rank_ && n > 0 && o->input != o->output) {
        std::memcpy(o->output, o->input, n * esize);
      }
      BroadcastOptions b;
      b.buffer = buf;
      b.count = n;
      b.dtype = s.dtype;
      b.root = s.root;
      comm_->broadcast(b);
      break;
    }
    case OpKind::kReduceScatter: {
      const size_t recvCount = n / size_;
      const ReduceOp commOp = s.op == ReduceOp::kAverage ? ReduceOp::kSum : s.op;
      const void* send;
      if (o && s.prescale == 1.0) {
        send = o->input;
      } else {
        if (fusion_.size() < n * esize) fusion_.resize(n * esize);
        if (o) {
          std::memcpy(fusion_.data(), o->input, n * esize);
          scaleInPlace(fusion_.data(), n, s.dtype, s.prescale);
        } else {
          fillIdentity(fusion_.data(), n, s.dtype, commOp);
        }
        send = fusion_.data();
      }
      void* recv = o ? o->output : scratch(recvCount * esize);
      ReduceScatterOptions rs;
      rs.send = send;
      rs.recv = recv;
      rs.recvCount = recvCount;
      rs.dtype = s.dtype;
      rs.op = commOp;
      comm_->reduceScatter(rs);
      if (o) {
        if (s.op == ReduceOp::kAverage && recvCount > 0) {
          collectives::divideInPlace(recv, recvCount, s.dtype,
                                     std::max(1, r.contributors()));
        }
        scaleInPlace(recv, recvCount, s.dtype, s.postscale);
        auto shape = s.shape;
        shape[0] /= size_;
        o->handle->setOutputShape(std::move(shape));
      }
      cycleBytes_ += s.bytes();
      break;
    }
    case OpKind::kAllgather: {
      const size_t row = static_cast<size_t>(rowElements(s));
      std::vector<size_t> counts(size_);
      size_t total = 0;
      int64_t rows = 0;
      for (int q = 0; q < size_; ++q) {
        counts[q] = static_cast<size_t>(r.firstDims[q]) * row;
        total += counts[q];
        rows += r.firstDims[q];
      }
      AllgatherOptions ag;
      ag.counts = counts;
      ag.dtype = s.dtype;
      if (o) {
        auto& out = o->handle->mutableOutput();
        out.resize(total * esize);
        ag.send = o->input != nullptr ? o->input : out.data();
        ag.recv = out.data();
        auto shape = s.shape;
        shape[0] = rows;
        o->handle->setOutputShape(std::move(shape));
      } else {
        ag.recv = scratch(total * esize);
        ag.send = ag.recv;
      }
      comm_->allgather(ag);
      break;
    }
    case OpKind::kAlltoall: {
      // Exchange the splits (rows to each rank) first: matrix[src][dst].
      const size_t row = static_cast<size_t>(rowElements(s));
      std::vector<int64_t> mine(size_, 0);
      if (o) {
        if (o->splits.empty()) {
          std::fill(mine.begin(), mine.end(), s.shape[0] / size_);
        } else {
          mine = o->splits;
        }
      }
      std::vector<int64_t> matrix(size_ * size_);
      AllgatherOptions ag;
      ag.send = mine.data();
      ag.recv = matrix.data();
      ag.count = size_;
      ag.dtype = DataType::kInt64;
      comm_->allgather(ag);
      int64_t most = 0;
      bool uniform = true;
      for (int64_t v : matrix) {
        most = std::max(most, v);
        uniform = uniform && v == matrix[0];
      }
      int64_t rowsIn = 0;
      for (int q = 0; q < size_; ++q) rowsIn += matrix[q * size_ + rank_];
      std::vector<uint8_t> discard;
      std::vector<uint8_t>& out = o ? o->handle->mutableOutput() : discard;
      out.resize(static_cast<size_t>(rowsIn) * row * esize);
      const size_t block = static_cast<size_t>(most) * row;  // elements per rank
      AlltoallOptions a;
      a.countPerRank = block;
      a.dtype = s.dtype;
      if (uniform && o) {
        a.send = o->input;
        a.recv = out.data();
        comm_->alltoall(a);
      } else {
        // Padded blocks of the largest split, compacted afterwards.
        const size_t blockBytes = block * esize;
        if (fusion_.size() < 2 * size_ * blockBytes)
          fusion_.resize(2 * size_ * blockBytes);
        uint8_t* send = fusion_.data();
        uint8_t* recv = fusion_.data() + size_ * blockBytes;
        size_t from = 0;
        for (int q = 0; q < size_; ++q) {
          const size_t b = static_cast<size_t>(mine[q]) * row * esize;
          if (b > 0) {
            std::memcpy(send + q * blockBytes,
                        static_cast<const uint8_t*>(o->input) + from, b);
          }
          from += b;
        }
        a.send = send;
        a.recv = recv;
        comm_->alltoall(a);
        size_t to = 0;
        for (int q = 0; q < size_; ++q) {
          const size_t b = static_cast<size_t>(matrix[q * size_ + rank_]) * row * esize;
          if (b > 0) std::memcpy(out.data() + to, recv + q * blockBytes, b);
          to += b;
        }
      }
      if (o) {
        auto shape = s.shape;
        shape[0] = rowsIn;
        o->handle->setOutputShape(std::move(shape));
      }
      break;
    }
    case OpKind::kAllreduce:
    case OpKind::kJoin: break;
  }
  if (tl && o) tl->end(s.name);
  if (o) finish(*r.localId, opError);
}

}  // namespace kolo::runtime
