// kolo's allreduce selection: the scale model's cheapest algorithm
// (predict/allreduce_model.h) for the job's shape and constants, decided
// once per size class and cached.
//
// Contract: every rank of a communicator must choose the same algorithm
// for the same call, or the job deadlocks. So the choice depends only on
// what every rank holds identically: the size class of the call's bytes
// (the descriptor check catches ranks whose sizes differ; candidates are
// such that all of them run that check first, see selectionCandidates),
// the job's layout (size, hosts, the host of each rank), the transports
// (KOLO_TRANSPORT, the same on every rank) and the constants, which rank 0
// reads (KOLO_PREDICT_CONSTANTS or built in) and hands to every rank at
// set-up. Never the local rank's own host, cores or timing.
//
// Thread-safety: choose() may be called from any thread; the cache is a
// table of atomics filled on first use (two threads computing the same
// class store the same value).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "predict/allreduce_model.h"
#include "predict/constants.h"

namespace kolo::collectives {

struct Context;

class AllreduceSelector {
 public:
  AllreduceSelector(predict::Constants constants, predict::JobShape shape);

  // The name of the algorithm for an allreduce of `bytes`: one of
  // predict::selectionCandidates(shape()).
  std::string_view choose(size_t bytes) const;

  // The selector of hier's cross-host step: one rank per host, the same
  // constants and link. Null when the shape has one host.
  const AllreduceSelector* crossHosts() const { return cross_.get(); }

  const predict::Constants& constants() const { return constants_; }
  const predict::JobShape& shape() const { return shape_; }

 private:
  predict::Constants constants_;
  predict::JobShape shape_;
  // Algorithm index + 1 per size class; 0: not decided yet.
  mutable std::array<std::atomic<uint8_t>, predict::kSizeClasses> cache_{};
  std::unique_ptr<AllreduceSelector> cross_;
};

// The shape of a context as the model sees it: the transports given
// (intra: between ranks of a host; inter: between hosts), the job's hosts
// from the layout and `hostOf` (the host of every rank; empty: blocks). A
// context whose transport is a sub-group (hier's cross-host group) is one
// rank per host.
predict::JobShape shapeOfContext(const Context& ctx, predict::Path intra,
                                 predict::Path inter, std::vector<int> hostOf = {});

}  // namespace kolo::collectives
