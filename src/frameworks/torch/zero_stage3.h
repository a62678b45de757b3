// The stage-3 optimizer's gradient path (kolo::torch::zero, docs/zero.md):
// each unit's gradient, as UnitFunction's backward hands it over (the
// unit's flat layout, zero_unit.h), is accumulated over
// backwardPassesPerStep passes and then reduce-scattered so that each rank
// keeps only the averaged gradient of its own block.
//
// The reduce-scatter is *ordered* (zero_ordered_reduce.h: an alltoall,
// then each rank adds the N blocks in rank order and divides by N, what
// the ordered allreduce of KOLO_DETERMINISTIC=1 computes for every
// element). So the averaged gradient, and after the step the parameters
// and the optimizer state, equal kolo::torch::DistributedOptimizer's bit
// for bit under KOLO_DETERMINISTIC=1 on any number of ranks.
//
// At most two reductions are in flight: a third waits for the oldest
// (back-pressure, so the flat copies do not pile up when backward outruns
// the network).
//
// Contract
// - unitGradient() runs on autograd's thread, finish()/reset() on the
//   training thread; a mutex serializes them. The ShardedModel must
//   outlive this object; the destructor detaches it and waits for what is
//   in flight (errors ignored).
// - A unit that gets more than backwardPassesPerStep gradients before
//   finish() is Error(kInvalidArgument) (thrown from backward).
#pragma once

#include <torch/torch.h>

#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "frameworks/torch/zero_sharded_model.h"

namespace kolo::torch::zero {

class Stage3Reducer : public GradientSink {
 public:
  Stage3Reducer(std::shared_ptr<ShardedModel> model, int id, int passesPerStep);
  ~Stage3Reducer() override;
  Stage3Reducer(const Stage3Reducer&) = delete;
  Stage3Reducer& operator=(const Stage3Reducer&) = delete;

  void unitGradient(size_t unit, ::torch::Tensor flat) override;
  // Reduces what is still missing (zeros for a trainable unit whose
  // gradient never came, so every rank submits the same operations),
  // waits for everything and returns each unit's averaged block
  // (shardSize() elements; undefined for units without trainable
  // parameters). Collective.
  std::vector<::torch::Tensor> finish();
  // Drops the accumulated gradients (zeroGrad). Waits for what is in flight.
  void reset();

 private:
  struct State {
    ::torch::Tensor acc;        // this step's local sum, until reduced
    int passes = 0;             // gradients received this step
    runtime::HandlePtr handle;  // the alltoall in flight
    ::torch::Tensor block;      // the averaged block, once reduced
    bool launched = false;
  };
  void launch(size_t u);    // under mu_
  void complete(size_t u);  // under mu_: wait, sum in rank order, divide

  std::shared_ptr<ShardedModel> model_;
  int id_;
  int passesPerStep_;
  std::mutex mu_;  // guards states_ and inFlight_
  std::vector<State> states_;
  std::deque<size_t> inFlight_;
};

}  // namespace kolo::torch::zero
