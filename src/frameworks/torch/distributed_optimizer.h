// Data-parallel training for libtorch programs, with Horovod's semantics
// (docs/training.md):
//
//   auto ctx = kolo::torch::Context::fromEnvironment();
//   torch::optim::SGD sgd(model->parameters(), lr);
//   kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters(), ctx);
//   kolo::torch::broadcastParameters(*ctx, model->named_parameters(), 0);
//   for (...) { opt.zeroGrad(); loss(model(x), y).backward(); opt.step(); }
//
// How it works: a post-hook on each parameter's gradient accumulator (the
// autograd node that adds a backward pass's gradient into p.grad()) counts
// the backward passes that reached the parameter; on the
// backwardPassesPerStep-th it submits p.grad() to the runtime as an
// allreduce named "grad/<parameter name>" (average by default) at once,
// while backward goes on computing the gradients of earlier layers. The
// runtime's negotiation matches the names across ranks whatever order the
// hooks fired in, fuses small gradients and runs the reductions on its
// background thread. step() waits for every gradient, then steps the
// wrapped optimizer, which sees the averaged gradients.
//
// Contract
// - Every rank constructs its DistributedOptimizer with the same parameter
//   names, shapes and dtypes; the constructor is collective and checks that
//   (Error(kMismatch) naming the first parameter that differs, its value
//   on rank 0 and on the rank that disagrees, thrown on every rank).
// - Gradients accumulate locally over backwardPassesPerStep backward
//   passes (summed, as libtorch accumulates) and are reduced once; the
//   wrapped optimizer sees the reduction over ranks of each rank's sum.
// - Unused parameters do not hang: at synchronize(), a parameter whose
//   gradient was not submitted by its hook (no backward reached it on this
//   rank this step) is submitted then, with a zero gradient when it has
//   none, so every rank submits every name every step.
// - step()/synchronize()/zeroGrad() are called from the training thread;
//   hooks may run on autograd's threads (guarded by a mutex). The
//   optimizer, the parameters and the Context must outlive this object;
//   the destructor removes the hooks and waits for what is still pending
//   (errors ignored).
// - Failures (a mismatch found by the runtime, a lost peer, a timeout)
//   are thrown by synchronize()/step() as kolo::Error, naming the
//   parameter.
// - CUDA parameters (docs/gpu.md, "libtorch"): their gradients go to the
//   runtime as device memory on the stream current when the hook runs
//   (device_memory.h), staged through pinned host memory; after
//   synchronize() they hold the result. broadcastParameters takes CUDA
//   tensors the same way; every rank must hold a given parameter on the
//   same kind of device (host or CUDA), else the runtime's MismatchError.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "frameworks/torch/context.h"
#include "frameworks/torch/gradient_hook.h"
#include "frameworks/torch/torch_versions.h"

namespace kolo::torch {

using NamedTensors = std::vector<std::pair<std::string, ::torch::Tensor>>;

// module->named_parameters() (or named_buffers()) as a NamedTensors list.
NamedTensors namedTensors(const ::torch::OrderedDict<std::string, ::torch::Tensor>& dict);

// Allgathers `bytes` (any length per rank) as operations named `name`/...;
// returns each rank's bytes in rank order. Collective; blocks.
std::vector<std::string> allgatherStrings(runtime::Runtime& rt, const std::string& name,
                                          const std::string& bytes, int size);

// The kolo dtype of a tensor's scalar type; Error(kInvalidArgument)
// naming `what` for types kolo does not reduce (bool, complex, ...).
DataType toKoloType(::torch::ScalarType type, const std::string& what);

struct DistributedOptimizerOptions {
  // Backward passes whose gradients accumulate locally before one
  // reduction (gradient accumulation for large effective batches).
  int backwardPassesPerStep = 1;
  // kAverage (default) or kSum across ranks.
  ReduceOp op = ReduceOp::kAverage;
  // Average only: gradients are divided by this factor before the sum and
  // multiplied by it after the division by the world size (Horovod's
  // gradient_predivide_factor, against overflow in low precision).
  double gradientPredivideFactor = 1.0;
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, NamedTensors namedParameters,
                       std::shared_ptr<Context> context,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(
      ::torch::optim::Optimizer& optimizer,
      const ::torch::OrderedDict<std::string, ::torch::Tensor>& namedParameters,
      std::shared_ptr<Context> context, DistributedOptimizerOptions options = {})
      : DistributedOptimizer(optimizer, namedTensors(namedParameters), std::move(context),
                             options) {}
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every gradient's reduction (submitting the ones no hook
  // submitted); p.grad() then holds the reduced gradient. Idempotent until
  // the next backward pass. Call it before gradient clipping, then step().
  void synchronize();
  // synchronize() (unless already done this step), then the wrapped
  // optimizer's step().
  void step();
  // The wrapped optimizer's zero_grad().
  void zeroGrad();

  ::torch::optim::Optimizer& optimizer() { return optimizer_; }
  const DistributedOptimizerOptions& options() const { return options_; }

 private:
  struct Param {
    std::string name;
    ::torch::Tensor tensor;
    std::unique_ptr<GradientHook> hook;  // calls onGradient
    int passes = 0;                      // backward passes since the last reduction
    runtime::HandlePtr handle;           // pending reduction
    ::torch::Tensor buffer;              // the reduced gradient's storage (contiguous)
  };

  void checkModelsAgree();
  void onGradient(size_t index);         // from the hook, under mu_
  void submit(Param& p);                 // under mu_
  runtime::OpRequest request(Param& p);  // under mu_

  ::torch::optim::Optimizer& optimizer_;
  std::shared_ptr<Context> context_;
  DistributedOptimizerOptions options_;
  std::mutex mu_;  // guards params_' per-step fields and synchronized_
  std::vector<Param> params_;
  bool synchronized_ = false;
};

// Copies root's values of `tensors` into every rank's (in place; names
// must match across ranks). Collective; blocks until done.
void broadcastParameters(Context& context, const NamedTensors& tensors, int root);
void broadcastParameters(
    Context& context, const ::torch::OrderedDict<std::string, ::torch::Tensor>& tensors,
    int root);

// Makes every rank's optimizer state (per-parameter buffers such as
// momentum, Adam's moments and step counts, and the param groups'
// options such as the learning rate) equal to root's: root serializes its
// optimizer (Optimizer::save), the bytes are broadcast, the others clear
// their state and load them. Works for every optimizer that implements
// save/load (SGD, Adam, AdamW, Adagrad, RMSprop, LBFGS, Lars). The
// optimizers must have the same parameter groups in the same order.
void broadcastOptimizerState(Context& context, ::torch::optim::Optimizer& optimizer,
                             int root);

// The value reduced across ranks (average by default), e.g. a loss or an
// accuracy for printing. `name` must be the same on every rank for the
// same call. Collective; blocks.
double allreduceMetric(Context& context, double value, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage);

}  // namespace kolo::torch
