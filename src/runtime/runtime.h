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
//   pending and later handle with the same error; shutdown() fails what is
//   still pending. No handle is left pending forever.
// - The Communicator is used only by the background thread while the
//   runtime lives.
#pragma once

#include <kolo/communicator.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/settings.h"
#include "runtime/handle.h"
#include "runtime/op_spec.h"
#include "runtime/straggler_tracker.h"

namespace kolo::runtime {

// One operation as a caller submits it.
struct OpRequest {
  OpSpec spec;
  const void* input = nullptr;  // spec.bytes() bytes (barrier: none)
  void* output = nullptr;       // allreduce/broadcast/reducescatter: caller's
                                // buffer (may equal input); allgather and
                                // alltoall: null, the handle holds the result
  // alltoall: elements of the first dimension sent to each rank (empty:
  // equal split); the handle's outputShape gives what arrived.
  std::vector<int64_t> splits;
};

struct RuntimeOptions {
  int64_t fusionThresholdBytes = 64 << 20;  // KOLO_FUSION_THRESHOLD
  double cycleTimeMs = 1.0;                 // KOLO_CYCLE_TIME
  size_t cacheCapacity = 1024;              // KOLO_CACHE_CAPACITY
  double stallWarningSeconds = 60;          // KOLO_STALL_WARNING
  double stallShutdownSeconds = 0;          // KOLO_STALL_SHUTDOWN (0 = never)
  std::string timelinePath;                 // KOLO_TIMELINE
  bool deterministic = false;               // KOLO_DETERMINISTIC
  bool autotune = false;                    // KOLO_AUTOTUNE
  double stragglerMarginSeconds = 0.005;    // KOLO_STRAGGLER_MARGIN_MS / 1000

  static RuntimeOptions fromSettings(const Settings& settings);
};

class Runtime {
 public:
  // Starts the background thread. `comm` is the team's communicator.
  Runtime(std::shared_ptr<Communicator> comm, RuntimeOptions options);
  ~Runtime();  // shutdown()
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  HandlePtr enqueue(OpRequest request);
  // Submitted together: they run in one bucket on every rank.
  std::vector<HandlePtr> enqueueGroup(std::vector<OpRequest> requests);
  // This rank is out of data: it contributes zeros to the others'
  // allreduces until every rank has joined; the handle completes then.
  HandlePtr join();

  void startTimeline(const std::string& path);
  void stopTimeline();
  StragglerReport stragglerReport() const;

  // Announces shutdown to the other ranks, waits for the background thread,
  // fails what is pending. Idempotent.
  void shutdown();

  const Layout& layout() const { return comm_->layout(); }
  Communicator& communicator() { return *comm_; }

 private:
  std::shared_ptr<Communicator> comm_;
  RuntimeOptions options_;
  // (the background loop's state: submission queue, negotiator, planner,
  // fusion buffer, stall inspector, straggler tracker, timeline, autotuner)
  std::thread thread_;
};

}  // namespace kolo::runtime
