// ZeRO stage 3 for libtorch (docs/zero.md): the parameters of a model are
// sharded across the ranks, and a module's full parameters exist only
// while its forward or its backward runs.
//
//   auto sharded = kolo::torch::zero::wrap(model, ctx);  // model: nn::Sequential
//   torch::optim::Adam adam(model->parameters(), lr);
//   kolo::torch::zero::Options o;  o.stage = 3;  o.sharded = sharded;
//   kolo::torch::zero::DistributedOptimizer opt(adam, model->named_parameters(), ctx, o);
//   for (...) { opt.zeroGrad(); loss(model->forward(x), y).backward(); opt.step(); }
//
// libtorch modules have no forward hooks, so wrap() rebuilds the
// Sequential: every child that owns parameters becomes a ShardedModule
// around it (one Unit, zero_unit.h); the names of the parameters do not
// change. A ShardedModule's forward:
//   1. gathers its unit (allgather of the shards; waiting for the prefetch
//      when one is in flight) and starts the allgather of the next unit in
//      the Sequential's order (prefetch, overlapped with this compute);
//   2. runs the wrapped module inside a custom autograd Function
//      (UnitFunction): its forward runs the module with autograd enabled on
//      a detached input, so the module's own graph hangs off the Function's
//      context instead of the model's graph;
//   3. releases the unit (its parameters hold 0 bytes; the graph's saved
//      views of them stay valid, see zero_unit.h).
// UnitFunction's backward gathers the unit again (prefetching the previous
// one), runs the module's graph backward (torch::autograd::grad) for the
// input and the parameters, flattens the parameters' gradient into the
// unit's layout, hands it to the GradientSink (the stage-3 optimizer,
// which reduce-scatters it into the shard's gradient) and releases the
// unit. A zero-element tensor that requires a gradient is a second input
// of the Function, so a module whose input needs no gradient (the first
// layer) still gets its backward. At most two units are gathered at once
// (the current and the prefetched one) outside FullParameters.
//
// Contract
// - wrap() is collective: every rank calls it with the same model (same
//   names, shapes and dtypes; Error(kMismatch) naming the first difference)
//   and the same values (broadcast them first). Children without
//   parameters are kept as they are; a child with parameters must take
//   and return one tensor; the same module twice, shared parameters and
//   mixed dtypes in one child are Error(kInvalidArgument). Convert the
//   model (to(), dtypes) before wrapping it: afterwards the parameters'
//   data must stay the units' views.
// - Backward through a ShardedModule needs a stage-3 DistributedOptimizer
//   on the model's parameters (the sink); without one, backward throws.
// - Forward and backward of one model run on one thread at a time (the
//   training thread; CPU autograd runs there). The Context must outlive
//   the model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frameworks/torch/context.h"
#include "frameworks/torch/zero_unit.h"

namespace kolo::torch::zero {

// Receives each unit's full (local, not yet reduced) gradient, flattened
// in the unit's layout (padded() elements), once per backward pass.
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  virtual void unitGradient(size_t unit, ::torch::Tensor flat) = 0;
};

class ShardedModel {
 public:
  explicit ShardedModel(std::shared_ptr<Context> context);
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  std::shared_ptr<Context> context() const { return context_; }
  int id() const { return id_; }
  size_t unitCount() const { return units_.size(); }
  Unit& unit(size_t i) { return *units_[i]; }
  // The unit holding `param` (by identity) and its index, or null.
  Unit* unitOf(const ::torch::Tensor& param, size_t* index = nullptr);

  // The stage-3 optimizer attaches itself (one at a time) and detaches.
  void attach(GradientSink* sink);
  void detach(GradientSink* sink);

  // The hooks, called by ShardedModule and its autograd Function.
  void beforeForward(size_t u);                            // gather u, prefetch u + 1
  void afterForward(size_t u);                             // release u
  void beforeBackward(size_t u);                           // gather u, prefetch u - 1
  void afterBackward(size_t u, ::torch::Tensor flatGrad);  // to the sink, release u
  // Releases every unit (waiting for prefetches nobody used).
  void releaseAll();

  // Observation (tests, docs): units gathered now, the most ever gathered
  // at once, allgathers started ahead of their unit's turn.
  int gatheredNow() const;
  int gatheredPeak() const { return peak_; }
  int64_t prefetches() const { return prefetches_; }
  // Parameter bytes this rank holds now: every shard plus gathered units.
  int64_t heldBytes() const;

  // wrap()'s internals.
  size_t addUnit(std::unique_ptr<Unit> unit);
  void setId(int id) { id_ = id; }  // agreed by the ranks

 private:
  void notePeak();

  std::shared_ptr<Context> context_;
  int id_ = 0;
  std::vector<std::unique_ptr<Unit>> units_;
  mutable std::mutex mu_;  // guards sink_
  GradientSink* sink_ = nullptr;
  int peak_ = 0;
  int64_t prefetches_ = 0;
};

// A child of a wrapped Sequential: forwards to the wrapped module between
// a gather and a release of its unit. Its parameters, buffers and
// submodules are the wrapped module's, under the same names.
class ShardedModuleImpl : public ::torch::nn::Module {
 public:
  ShardedModuleImpl(::torch::nn::AnyModule inner, std::shared_ptr<ShardedModel> model,
                    size_t unit);
  ::torch::Tensor forward(const ::torch::Tensor& input);

  size_t unitIndex() const { return unit_; }

 private:
  ::torch::nn::AnyModule inner_;
  std::shared_ptr<ShardedModel> model_;
  size_t unit_;
  ::torch::Tensor anchor_;  // zero elements, requires a gradient
};
// TORCH_MODULE(ShardedModule), spelled out: the macro names torch::nn,
// which inside kolo::torch is this namespace.
class ShardedModule : public ::torch::nn::ModuleHolder<ShardedModuleImpl> {
 public:
  using ::torch::nn::ModuleHolder<ShardedModuleImpl>::ModuleHolder;
  using Impl = ShardedModuleImpl;
};

// Shards `model`'s parameters across the Context's ranks: `model` is
// replaced by a Sequential of the same children, those that own
// parameters wrapped in ShardedModules. Pass the result as
// Options::sharded to the stage-3 DistributedOptimizer. Collective.
std::shared_ptr<ShardedModel> wrap(::torch::nn::Sequential& model,
                                   std::shared_ptr<Context> context);

// While it lives, every unit is gathered and stays so (evaluation,
// export, comparisons). With writeBack, changes to the parameters made
// inside are kept (each rank keeps its own elements). Collective.
class FullParameters {
 public:
  explicit FullParameters(ShardedModel& model, bool writeBack = false);
  ~FullParameters();
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  ShardedModel& model_;
  bool writeBack_;
};

}  // namespace kolo::torch::zero
