// The background runtime of one team: callers enqueue named operations from
// any thread and get handles; one background thread negotiates, fuses and
// runs them over the team's Communicator. See docs/runtime.md.
//
// Contract
// - enqueue()/enqueueGroup()/join() are thread-safe and never block on
//   other ranks. The caller's buffers must stay valid until the handle
//   completes.
// - Every rank runs the same operations in the same order, whatever order
//   they were submitted in; an operation runs when every live rank has
//   submitted it.
// - Errors: a bad argument (unknown dtype, null buffer, duplicate pending
//   name) fails the handle at once; a mismatch across ranks fails that
//   operation on every rank; a transport failure or a dead peer fails every
//   pending and later handle with the same error; shutdown() (any rank's)
//   fails what is still pending on every rank with "rank R shut down while
//   'name' was pending". No handle is left pending forever.
// - Results: allreduce, broadcast and reducescatter write the caller's
//   output buffer; allgather and alltoall fill the handle's output() and
//   outputShape() (reducescatter sets outputShape() too).
// - The Communicator is used only by the background thread while the
//   runtime lives.
#pragma once

#include <kolo/communicator.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collectives/cuda/device_collectives.h"
#include "collectives/cuda/device_staging.h"
#include "common/settings.h"
#include "runtime/agreed_scope.h"
#include "runtime/autotuner.h"
#include "runtime/handle.h"
#include "runtime/negotiator.h"
#include "runtime/op_spec.h"
#include "runtime/set_rank_names.h"
#include "runtime/stall_inspector.h"
#include "runtime/straggler_tracker.h"
#include "runtime/submission_queue.h"  // OpRequest
#include "runtime/timeline.h"

namespace kolo::runtime {

struct RuntimeOptions {
  int64_t fusionThresholdBytes = 64 << 20;  // KOLO_FUSION_THRESHOLD
  double cycleTimeMs = 1.0;                 // KOLO_CYCLE_TIME
  size_t cacheCapacity = 1024;              // KOLO_CACHE_CAPACITY
  double stallWarningSeconds = 60;          // KOLO_STALL_WARNING
  double stallShutdownSeconds = 0;          // KOLO_STALL_SHUTDOWN (0 = never)
  bool stallCheck = true;                   // !KOLO_STALL_CHECK_DISABLE
  std::string timelinePath;                 // KOLO_TIMELINE
  bool timelineMarkCycles = false;          // KOLO_TIMELINE_MARK_CYCLES
  bool deterministic = false;               // KOLO_DETERMINISTIC
  bool autotune = false;                    // KOLO_AUTOTUNE
  std::string autotuneLogPath;              // KOLO_AUTOTUNE_LOG
  int autotuneWarmupSamples = 2;            // KOLO_AUTOTUNE_WARMUP_SAMPLES
  int autotuneStepsPerSample = 5;           // KOLO_AUTOTUNE_STEPS_PER_SAMPLE
  StragglerTracker::Options straggler;      // KOLO_STRAGGLER_*
  int64_t spinMicros = 50;                  // KOLO_RUNTIME_SPIN_US
  // KOLO_JOIN_MODE: a joined rank contributes zeros (Horovod's join) or is
  // left out of the others' operations (docs/runtime.md, "Join").
  enum class JoinMode { kHorovod, kAbsent };
  JoinMode joinMode = JoinMode::kHorovod;
  // Makes the stager of device operations (null: CUDA's, host staging
  // through pinned memory); tests pass a host double.
  std::function<std::unique_ptr<collectives::cuda::DeviceStager>()> makeStager;
  // Makes the device path of this runtime's communicator for this rank's
  // `device`, collectively, at the first device operation every rank
  // submitted (null hook: the communicator's own choice,
  // CommunicatorImpl::deviceCollectives; a null result: host staging).
  // Tests pass a host double.
  std::function<std::shared_ptr<collectives::cuda::DeviceCollectives>(Communicator&,
                                                                      int device)>
      makeDevicePath;
  // The process set this runtime serves: errors of a lost or silent peer
  // name global ranks (set_rank_names.h). Default: set 0, every rank.
  SetRankNames rankNames;

  static RuntimeOptions fromSettings(const Settings& settings);
};

class Runtime {
 public:
  // Starts the background thread. `comm` is the team's communicator.
  Runtime(std::shared_ptr<Communicator> comm, RuntimeOptions options);
  ~Runtime();  // shutdown()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The request is copied (into storage reused across submissions).
  HandlePtr enqueue(const OpRequest& request);
  // Submitted together: they run in one bucket on every rank. A bad
  // argument in any member (or a repeated name) fails them all at once.
  std::vector<HandlePtr> enqueueGroup(std::vector<OpRequest> requests);
  // This rank is out of data: it contributes zeros (the reduction's
  // identity; no rows to allgather and alltoall) to the others' operations
  // until every rank has joined; the handle completes then and the rank is
  // live again.
  HandlePtr join();

  void startTimeline(const std::string& path);
  void stopTimeline();
  // The running timeline (null when none), for spans of a framework's own
  // phases (kolo_timeline_begin/end).
  std::shared_ptr<TimelineWriter> currentTimeline() const { return timeline(); }
  StragglerReport stragglerReport() const;

  // Announces shutdown to the other ranks, waits for the background thread,
  // fails what is pending. Idempotent. The other ranks' runtimes stop in the
  // same cycle. Blocks at most until that cycle's exchange (KOLO_TIMEOUT
  // when a peer does not answer).
  void shutdown();

  const Layout& layout() const { return comm_->layout(); }
  Communicator& communicator() { return *comm_; }

 private:
  using Clock = std::chrono::steady_clock;
  // One pending operation, in a reused slot of ops_. Its OpId is
  // (submission number << 32) | slot, so ids sort in submission order.
  struct Op {
    const void* input = nullptr;  // the request's (its spec is the negotiator's)
    void* output = nullptr;
    std::vector<int64_t> splits;
    HandlePtr handle;  // null: the slot is free
    uint32_t nameId = 0;
    OpId id = 0;
  };
  Op& opAt(OpId id) { return ops_[static_cast<uint32_t>(id)]; }

  // Caller side (runtime_submit.cc).
  // Fails `handle` at once and returns it.
  static HandlePtr failed(HandlePtr handle, const std::exception_ptr& error);
  void validate(const OpRequest& request) const;        // throws Error
  void validateRows(const OpRequest& request) const;    // first-dimension kinds
  void validateSplits(const OpRequest& request) const;  // alltoall
  // The interned id of `name` (guarded by mu_): a name keeps its id while
  // it is pending; names not pending are dropped now and then (sweep).
  uint32_t nameIdLocked(const std::string& name);
  static std::exception_ptr errorPtr(ErrorCode code, const std::string& message,
                                     int peer = -1);

  // Background thread: the loop (runtime_loop.cc).
  // The exchange's buffers, kept across cycles.
  struct Exchange {
    std::vector<uint8_t> gathered;
    std::vector<std::vector<uint8_t>> fixed, variable;  // by rank
  };
  void loop();
  // One cycle: false when the loop ends (a shutdown or stall shutdown).
  bool runCycle(Exchange& exchange);
  CycleFlags cycleFlags() const;
  // Marks `scope` agreed once the fixed parts are in (runtime_loop.cc).
  void exchangeMessages(const Message& message, Exchange& exchange, AgreedScope& scope);
  void settleNegotiation(const Outcome& outcome);
  bool stopIfAnnounced(const Outcome& outcome);
  void pace(const Outcome& outcome, Clock::time_point cycleStart);
  // The first `count` of `items` (a drained queue): their handles are
  // moved out, their requests left for the queue to reuse.
  void admit(std::vector<Submission>& items, size_t count);
  void observe(const Outcome& outcome, Clock::time_point now);
  void inspectStalls(const Outcome& outcome);
  void sampleAutotuner(const Outcome& outcome);
  void markCycle(Clock::time_point cycleStart);
  void finish(OpId id, std::exception_ptr error = nullptr);
  void finishAll(const std::vector<OpId>& ids);  // success, one lock
  // Takes operation `id`'s handle out (null when it was completed before),
  // clears its name's pending flag and frees its slot; mu_ held.
  HandlePtr releaseLocked(OpId id);
  // Ends the loop: marks the runtime broken with `error` (later enqueues
  // fail with it) and fails everything pending or queued with
  // errorFor(name).
  void stop(const std::exception_ptr& error,
            const std::function<std::exception_ptr(const std::string&)>& errorFor);

  // Background thread: buckets (runtime_buckets.cc).
  struct AllreduceBucket;
  void runBucket(const std::vector<size_t>& members, std::vector<ReadyOp>& ready,
                 size_t bytes, int bucketIndex);
  void runAllreduce(const std::vector<ReadyOp*>& members, size_t bytes, int bucketIndex);
  // The bucket's members as routed (device memory: `path`, null: staged).
  void runAllreduceOn(const std::vector<ReadyOp*>& members, size_t bytes, int bucketIndex,
                      collectives::cuda::DeviceCollectives* path);
  void allreduceInPlace(const AllreduceBucket& bucket);
  void allreduceSegmented(const AllreduceBucket& bucket);
  void allreduceFused(const AllreduceBucket& bucket);
  // CUDA device memory (runtime_staging.cc).
  void allreduceStaged(const AllreduceBucket& bucket);
  // An operation's device pointers while its host copies stand in for them.
  struct StagedIo {
    const void* input = nullptr;
    void* output = nullptr;
  };
  size_t localInputBytes(const ReadyOp& r) const;
  void stageIn(const ReadyOp& r, Op& o, StagedIo& io);
  void stageOut(const ReadyOp& r, Op& o, const StagedIo& io);
  collectives::cuda::DeviceStager& stager();
  // The device path (runtime_device.cc). Where a device operation runs,
  // decided alike on every rank from the agreed ReadyOp: on the path, by
  // host staging (path null), or nowhere (error: a tensor off its rank's
  // path device).
  struct DeviceRoute {
    collectives::cuda::DeviceCollectives* path = nullptr;
    std::exception_ptr error;
  };
  DeviceRoute deviceRoute(const ReadyOp& r);
  // A fused bucket's members: those that cannot run fail, the others go
  // on in `onward`; returns the path, or null when they run staged.
  collectives::cuda::DeviceCollectives* routeDeviceBucket(
      const std::vector<ReadyOp*>& members, std::vector<ReadyOp*>& onward);
  // Copies the path's result (`bytes` at device `src`) into host `dst`,
  // records pieces_[0]'s done event after it and waits for it.
  void finishToHost(const collectives::cuda::StagingRun& run, void* dst, const void* src,
                    size_t bytes);
  // The name of the path a device operation ran on, for the timeline and
  // the log: the path's, or "staged".
  static std::string_view pathName(const collectives::cuda::DeviceCollectives* path);
  void allreduceOnPath(const AllreduceBucket& bucket,
                       collectives::cuda::DeviceCollectives& path);
  void runOnPath(const ReadyOp& r, Op& o, collectives::cuda::DeviceCollectives& path);
  void broadcastOnPath(const ReadyOp& r, Op& o,
                       collectives::cuda::DeviceCollectives& path);
  void allgatherOnPath(const ReadyOp& r, Op& o,
                       collectives::cuda::DeviceCollectives& path);
  void reduceScatterOnPath(const ReadyOp& r, Op& o,
                           collectives::cuda::DeviceCollectives& path);
  void alltoallOnPath(const ReadyOp& r, Op& o,
                      collectives::cuda::DeviceCollectives& path);
  // Every rank's rows to every rank (matrix[src * size + dst]) of an
  // alltoall, exchanged over the communicator; `mine` is this rank's.
  std::vector<int64_t> alltoallMatrix(const ReadyOp& r, const Op* o,
                                      std::vector<int64_t>& mine);
  void runOne(ReadyOp& op, int bucketIndex);
  std::exception_ptr joinedRankError(const ReadyOp& op) const;
  // One operation of each kind; `o` null: this rank joined (no data).
  std::exception_ptr runBroadcast(const ReadyOp& r, Op* o);
  void runReduceScatter(const ReadyOp& r, Op* o);
  void runAllgather(const ReadyOp& r, Op* o);
  void runAlltoall(const ReadyOp& r, Op* o);
  void alltoallPadded(AlltoallOptions& a, const Op* o, const std::vector<int64_t>& mine,
                      const std::vector<int64_t>& matrix, size_t rowBytes,
                      std::vector<uint8_t>& out);
  void* scratch(size_t bytes);

  std::shared_ptr<TimelineWriter> timeline() const;

  std::shared_ptr<Communicator> comm_;
  RuntimeOptions options_;
  const int rank_;
  const int size_;
  // Allreduces above this run alone (fusion_planner.h): kFusionAloneBytes
  // on one host, no limit when the team spans hosts (docs/runtime.md).
  const size_t fusionAloneBytes_;
  std::string algorithm_;  // AllreduceOptions::algorithm ("ordered" when
                           // deterministic and built in)
  // Shared with the handles, which ring it from wait() (and may outlive
  // the runtime).
  const std::shared_ptr<SubmissionQueue> queue_ = std::make_shared<SubmissionQueue>();

  // Lock order: mu_, then the queue's lock (handles hold no lock; a
  // handle's wait() takes only the queue's, to ring it).
  mutable std::mutex mu_;
  // Names pending on this rank (guarded by mu_): interned once, then a flag
  // per id, so a steady-state enqueue allocates nothing for its name.
  std::unordered_map<std::string, uint32_t> nameIds_;
  std::vector<uint8_t> namePending_;  // by name id
  // By name id: the name, shared with the handles (one allocation per
  // interned name, not per operation).
  std::vector<std::shared_ptr<const std::string>> names_;
  std::vector<uint32_t> freeNameIds_;
  size_t nameSweepAt_ = 4096;
  std::exception_ptr broken_;  // guarded by mu_: the loop ended
  std::once_flag shutdownOnce_;
  std::atomic<bool> shutdownRequested_{false};

  // Owned by the background thread.
  Negotiator negotiator_;
  // By name id: the cache slot where the negotiator last found the name
  // (Negotiator::submit's hint; a stale one only costs a lookup).
  std::vector<size_t> slotHints_;
  std::vector<Op> ops_;            // by slot (OpId's low 32 bits)
  std::vector<uint32_t> freeOps_;  // free slots of ops_
  uint64_t nextSeq_ = 1;           // OpId's high 32 bits
  std::vector<HandlePtr> joinHandles_;
  std::vector<Submission> admitted_;  // the drained queue, kept for its capacity
  std::vector<HandlePtr> finishing_;  // finishAll's scratch, kept for its capacity
  bool joined_ = false;
  std::vector<uint8_t> fusion_;             // the fusion buffer, kept across cycles
  std::vector<AllreduceSegment> segments_;  // a fused bucket's, kept across cycles
  std::vector<uint8_t> scratch_;            // a joined rank's inputs and outputs
  // Host staging of device memory: made at the first device operation.
  std::unique_ptr<collectives::cuda::DeviceStager> stager_;
  std::vector<collectives::cuda::StagedPiece> pieces_;  // kept across cycles
  // The device path: asked for once (pathAsked_), at the first device
  // operation every rank submitted; null: host staging. pathDevices_: each
  // rank's device it is bound to (that operation's devices).
  bool pathAsked_ = false;
  std::shared_ptr<collectives::cuda::DeviceCollectives> path_;
  std::exception_ptr pathError_;  // making the path failed: every device operation fails
  std::vector<int32_t> pathDevices_;
  std::unique_ptr<StallInspector> stall_;     // rank 0 only
  std::string stallReason_;                   // rank 0: announced next cycle
  std::unique_ptr<Autotuner> autotuner_;      // rank 0 with KOLO_AUTOTUNE
  std::unique_ptr<AutotuneLog> autotuneLog_;  // rank 0 with KOLO_AUTOTUNE_LOG
  uint64_t cycleBytes_ = 0;                   // reduced in this cycle (autotuner)
  Clock::time_point lastSample_;

  mutable std::mutex stragglerMu_;  // guards straggler_ (report() from any thread)
  StragglerTracker straggler_;
  mutable std::mutex timelineMu_;  // guards timeline_ (start/stop from any thread)
  std::shared_ptr<TimelineWriter> timeline_;

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kolo::runtime
