// LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg, "Large
// Batch Training of Convolutional Networks", 2017) as a libtorch optimizer,
// for the large global batches of many ranks.
//
// For each parameter tensor w (a "layer") with gradient g, every step:
//
//   trust = eta * ||w|| / (||g|| + beta * ||w|| + eps)   (1 if ||w|| or ||g|| is 0)
//   v     = m * v + lr * trust * (g + beta * w)
//   w     = w - v
//
// with eta the trust coefficient, beta the weight decay, m the momentum and
// lr the global learning rate (scaled and warmed up as usual; the local
// rate lr * trust adapts each layer's step to its weight norm). v starts at
// zero. Parameters without a gradient are skipped.
//
// Contract: as any torch::optim::Optimizer (step() from one thread; the
// parameters must outlive it). save()/load() keep the momentum buffers, so
// broadcastOptimizerState works with it.
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

namespace kolo::torch {

struct LarsOptions : public ::torch::optim::OptimizerCloneableOptions<LarsOptions> {
  LarsOptions(double lr = 0.1) : lr_(lr) {}  // NOLINT: implicit like SGDOptions
  TORCH_ARG(double, lr);
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weightDecay) = 0;
  TORCH_ARG(double, trustCoefficient) = 0.001;
  TORCH_ARG(double, eps) = 1e-9;

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LarsParamState
    : public ::torch::optim::OptimizerCloneableParamState<LarsParamState> {
  TORCH_ARG(::torch::Tensor, momentumBuffer);

 public:
  void serialize(::torch::serialize::InputArchive& archive) override;
  void serialize(::torch::serialize::OutputArchive& archive) const override;
};

class Lars : public ::torch::optim::Optimizer {
 public:
  Lars(std::vector<::torch::optim::OptimizerParamGroup> groups, LarsOptions defaults);
  Lars(std::vector<::torch::Tensor> params, LarsOptions defaults)
      : Lars({::torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  ::torch::Tensor step(LossClosure closure = nullptr) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  // The trust ratio step() applies to a layer with these norms.
  static double trustRatio(double weightNorm, double gradNorm,
                           const LarsOptions& options);
};

}  // namespace kolo::torch
