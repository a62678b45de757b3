// Packs the cycle's ready operations into buckets that each run as one
// collective.
//
// Rules, applied in the ready order (which is the same on every rank):
// - allreduce operations with the same dtype, reduction, scale factors and
//   memory (host, or CUDA device: OpSpec::onDevice) are packed together while the
//   bucket's bytes stay within the threshold; an operation larger than the threshold, or
//   larger than `aloneBytes` (kFusionAloneBytes, 256 KiB, by default; the runtime passes
//   no limit when its team spans hosts), gets a bucket of its own: the runtime runs it in
//   place in the caller's buffer, since copying a large tensor into and out of the fusion
//   buffer costs about as much as its allreduce and fusing it saves nothing
//   (docs/performance-history.md, "The runtime: fusion");
// - a group's members always share one bucket, whatever its size (the group
//   is placed whole, opening a new bucket if it does not fit);
// - every other kind (allgather, broadcast, alltoall, reducescatter,
//   barrier) runs as a bucket of one;
// - buckets keep the ready order of their first member.
// Pure function of its input; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/negotiator.h"

namespace kolo::runtime {

// Allreduces above this many bytes are never packed (outside groups).
constexpr size_t kFusionAloneBytes = size_t{256} << 10;

struct Bucket {
  std::vector<size_t> members;  // indices into the ready list, in order
  size_t bytes = 0;
};

std::vector<Bucket> planBuckets(const std::vector<ReadyOp>& ready, int64_t thresholdBytes,
                                size_t aloneBytes = kFusionAloneBytes);

}  // namespace kolo::runtime
