// The pipelined ring that allreduceRing, reduceScatterRing, allgatherRing
// and the hierarchical allreduce are built from.
//
// A ring step moves one segment from each rank to the next one. Each
// segment is cut into chunks (RingPlan::chunkBytes) sent as separate
// messages with the step's tag, so the work on chunk k (a reduction, or
// nothing for a copy step) overlaps the arrival of chunk k+1: the receives
// of the next chunks are always posted before the current one is reduced
// (a window of kRingWindow receive slots; receives that land in place, the
// allgather's, are all posted up front). A chunk is forwarded to the next rank
// (as part of the next step) the moment it is produced, so successive steps
// overlap too and the ring runs as one continuous pipeline.
//
// Because every step forwards what the previous step produced, the segment
// sent in step s+1 is the one received in step s: the plan lists only what
// is received in each step, plus the very first segment sent.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/transport.h"

namespace kolo::collectives {

struct RingStep {
  size_t count = 0;                // elements received in this step (0: none)
  uint8_t* dst = nullptr;          // where the step's result lands
  const uint8_t* local = nullptr;  // reduce: dst = local (op) received;
                                   // null: received straight into dst
  transport::Tag tag = 0;
  // Step whose result (still being forwarded) lives where this step
  // writes: its forwarding sends are waited for before dst is written.
  int reuses = -1;
};

struct RingPlan {
  transport::Transport* transport = nullptr;
  int next = 0;                    // rank we send to
  int prev = 0;                    // rank we receive from
  const uint8_t* first = nullptr;  // segment sent in step 0
  size_t firstCount = 0;
  std::vector<RingStep> steps;  // the first sends with steps[0].tag
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t chunkBytes = 128 * 1024;
};

inline constexpr int kRingWindow = 8;

// Runs the plan; returns when every receive landed and every send is done.
void runRing(const RingPlan& plan);

}  // namespace kolo::collectives
