// A fused allreduce's shared facts, for the runtime's bucket code
// (runtime_buckets.cc on the host and by host staging, runtime_device.cc on
// a device path). Internal to the runtime.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "collectives/elementwise.h"
#include "runtime/runtime.h"

namespace kolo::runtime {

// What every path of a fused allreduce shares.
struct Runtime::AllreduceBucket {
  const std::vector<ReadyOp*>& members;
  size_t bytes;
  DataType dtype;
  ReduceOp op;
  ReduceOp commOp;  // what the Communicator runs
  bool averaged;    // the Communicator divides (its own average)
  std::shared_ptr<TimelineWriter> tl;
  std::string args;  // the COLLECTIVE phase's (only with a timeline)

  AllreduceOptions options() const {
    AllreduceOptions ar;
    ar.count = bytes / elementSize(dtype);
    ar.dtype = dtype;
    ar.op = commOp;
    return ar;
  }
  // After the collective: the average's division when the collective did
  // not do it, and postscale, from `src` into `dst` in one pass.
  void finishValues(const ReadyOp& r, void* dst, const void* src) const {
    const size_t n = static_cast<size_t>(r.spec->elements());
    const int divisor =
        op == ReduceOp::kAverage && !averaged ? std::max(1, r.contributors()) : 1;
    collectives::finishInto(dst, src, n, dtype, divisor, r.spec->postscale);
  }
};

}  // namespace kolo::runtime
