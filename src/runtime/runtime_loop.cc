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

#include <pthread.h>

#include <algorithm>

#include "common/backoff.h"
#include "common/check.h"
#include "common/logging.h"
#include "runtime/agreed_scope.h"
#include "runtime/fusion_planner.h"
#include "runtime/runtime.h"

namespace kolo::runtime {

namespace {

// The gathering window's quiet time: after an idle spell, the first
// submission's cycle waits until no submission arrived for this long (at
// most one cycle time).
constexpr std::chrono::microseconds kGatherQuiet{50};

// The pace of empty exchanges while nothing is pending anywhere.
constexpr std::chrono::milliseconds kIdlePace{20};

}  // namespace

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
      // This rank's device of a device tensor, carried to every rank.
      const auto& entry = item.handle->deviceEntry();
      item.request.spec.device = entry ? entry->device() : -1;
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
  Exchange exchange;
  exchange.fixed.resize(size_);
  exchange.variable.resize(size_);
  try {
    while (runCycle(exchange)) {
    }
  } catch (...) {
    // A transport failure, a lost peer, a timeout: every pending and later
    // operation fails with it, naming global ranks.
    const auto error = inGlobalRanks(std::current_exception(), options_.rankNames);
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

bool Runtime::runCycle(Exchange& exchange) {
  const auto cycleStart = Clock::now();
  markCycle(cycleStart);
  admit(admitted_, queue_->drainInto(admitted_));
  const Message message = negotiator_.prepare(cycleFlags());
  Outcome outcome;
  {
    // The communicator is this thread's for the cycle: a closing step
    // (another thread's finalize, the exit goodbye) lands between cycles,
    // where the peers meet it in the checked exchange of the fixed parts.
    AgreedScope scope(*comm_);
    exchangeMessages(message, exchange, scope);
    outcome = negotiator_.process(exchange.fixed, exchange.variable, cycleStart);
    settleNegotiation(outcome);
    // Run the ready operations, bucket by bucket, in the same order on
    // every rank.
    cycleBytes_ = 0;
    const auto buckets =
        planBuckets(outcome.ready, outcome.fusionThresholdBytes, fusionAloneBytes_);
    for (size_t b = 0; b < buckets.size(); ++b) {
      runBucket(buckets[b].members, outcome.ready, buckets[b].bytes, static_cast<int>(b));
    }
  }
  observe(outcome, cycleStart);
  if (static_cast<int>(outcome.joinedRanks.size()) == size_) {
    for (auto& h : joinHandles_) h->complete();
    joinHandles_.clear();
    joined_ = false;
  }
  if (stopIfAnnounced(outcome)) return false;
  pace(outcome, cycleStart);
  return true;
}

// This rank's flags for the cycle; the tuning values are the autotuner's
// current point when it runs (rank 0's win everywhere).
CycleFlags Runtime::cycleFlags() const {
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
  return flags;
}

// The exchange: fixed parts, then variable parts when announced. The fixed
// parts' allgather is checked by the communicator (descriptor_check.h):
// it is where ranks that are not in step meet (a rank that left, a
// different cache capacity). What follows is agreed: the variable parts'
// counts come from the fixed parts, the buckets from the negotiation, alike
// on every rank, so those collectives skip the descriptor exchange
// (runtime/agreed_scope.h; docs/collectives.md, "Agreement").
void Runtime::exchangeMessages(const Message& message, Exchange& ex, AgreedScope& scope) {
  const size_t fixedBytes = negotiator_.fixedBytes();
  ex.gathered.resize(fixedBytes * size_);
  AllgatherOptions ag;
  ag.send = message.fixed.data();
  ag.recv = ex.gathered.data();
  ag.count = fixedBytes;
  ag.dtype = DataType::kUInt8;
  comm_->allgather(ag);
  scope.agreedFromHere();
  std::vector<size_t> counts(size_);
  size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    ex.fixed[r].assign(ex.gathered.begin() + r * fixedBytes,
                       ex.gathered.begin() + (r + 1) * fixedBytes);
    counts[r] = Negotiator::variableBytes(ex.fixed[r]);
    total += counts[r];
  }
  if (total == 0) {
    for (auto& v : ex.variable) v.clear();
    return;
  }
  std::vector<uint8_t> all(total);
  AllgatherOptions agv;
  agv.send = message.variable.data();
  agv.recv = all.data();
  agv.counts = counts;
  agv.dtype = DataType::kUInt8;
  comm_->allgather(agv);
  size_t at = 0;
  for (int r = 0; r < size_; ++r) {
    ex.variable[r].assign(all.begin() + at, all.begin() + at + counts[r]);
    at += counts[r];
  }
}

// What the negotiation decided, before anything runs: mismatches fail
// their handles, the NEGOTIATE phases end, and the arrivals are recorded
// (before the handles complete, so a caller's stragglerReport() after
// wait() includes its operation).
void Runtime::settleNegotiation(const Outcome& outcome) {
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
  if (!outcome.ready.empty()) {
    std::lock_guard<std::mutex> lock(stragglerMu_);
    for (const auto& op : outcome.ready) straggler_.record(op.arrivals, op.spec->name);
  }
}

// A shutdown (any rank's) or rank 0's stall shutdown ends the loop on every
// rank in this cycle: true when it did.
bool Runtime::stopIfAnnounced(const Outcome& outcome) {
  if (!outcome.shutdownRanks.empty()) {
    const int who = outcome.shutdownRanks.front();
    const ErrorCode code =
        who == rank_ ? ErrorCode::kNotInitialized : ErrorCode::kPeerLost;
    const int peer = who == rank_ ? -1 : who;
    stop(errorPtr(code, "the runtime stopped: rank " + std::to_string(who) + " shut down",
                  peer),
         [&](const std::string& name) {
           return errorPtr(code,
                           "rank " + std::to_string(who) + " shut down while '" + name +
                               "' was pending",
                           peer);
         });
    return true;
  }
  if (!outcome.stallShutdown.empty()) {
    KOLO_LOG(kError) << outcome.stallShutdown;
    const auto e = errorPtr(ErrorCode::kTimeout, outcome.stallShutdown);
    stop(e, [&](const std::string&) { return e; });
    return true;
  }
  return false;
}

// Pacing. Idle (nothing pending on any rank once this cycle's ready
// operations ran): sleep until a submission arrives, or kIdlePace (at least
// one cycle time) from now for the next (empty) exchange; a submission opens
// the gathering window, which lasts while submissions keep arriving (until
// kGatherQuiet passes without one, at most one cycle time), so a burst lands
// in one cycle. Otherwise the next cycle starts one cycle time after this
// one started.
void Runtime::pace(const Outcome& outcome, Clock::time_point cycleStart) {
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

}  // namespace kolo::runtime
