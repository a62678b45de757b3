// The reduce-scatter (average) in rank order that kolo::torch::zero uses
// where it must equal the ordered allreduce of KOLO_DETERMINISTIC=1 bit for
// bit (docs/zero.md): stage 3 always, stages 1 and 2 when the runtime is
// deterministic.
//
// Algorithm: an alltoall sends block j of the flat vector (N equal blocks)
// to rank j, the bytes a ring reduce-scatter sends; each rank then adds the
// N blocks it received in rank order 0..N-1 and divides by N with kolo's
// own kernels (collectives::reduceMany, divideInPlace). That is what the
// ordered allreduce computes for every element, so the averaged block
// equals the matching slice of kolo::torch::DistributedOptimizer's
// averaged gradient bit for bit on any number of ranks. (The runtime's own
// reduce-scatter adds in an order that depends on the rank: on 3 or more
// ranks its last bit may differ.)
//
// Contract
// - startOrderedReduceScatter(): `flat` is contiguous, of a kolo dtype,
//   with a multiple of `size` elements; it must stay alive and unchanged
//   until the handle has completed. The operation is named `name` (the
//   same on every rank). Collective: every rank submits it.
// - finishOrderedReduceScatter(): waits for the handle (rethrowing its
//   error) and returns this rank's averaged block (`shard` elements,
//   `dtype`), a new tensor.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "frameworks/torch/context.h"

namespace kolo::torch::zero {

runtime::HandlePtr startOrderedReduceScatter(runtime::Runtime& runtime,
                                             const std::string& name,
                                             const ::torch::Tensor& flat, int size);

::torch::Tensor finishOrderedReduceScatter(const runtime::HandlePtr& handle,
                                           ::torch::ScalarType dtype, int64_t shard,
                                           int size);

}  // namespace kolo::torch::zero
