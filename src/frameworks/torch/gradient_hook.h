// A callback run each time backward has accumulated a parameter's gradient.
//
// GradientHook installs a post-hook on the parameter's gradient accumulator
// (the AccumulateGrad node of a leaf tensor): it runs after that node has
// added this backward pass's gradient into p.grad(), on the thread running
// backward. The hook is removed when the GradientHook is destroyed; the
// accumulator is kept alive meanwhile (torch holds it only weakly). Used by
// kolo::torch::DistributedOptimizer and kolo::torch::zero::DistributedOptimizer
// to start a reduction as soon as a gradient is ready.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "frameworks/torch/torch_versions.h"

namespace kolo::torch {

class GradientHook {
 public:
  // `parameter` must be a leaf tensor that requires grad.
  GradientHook(const ::torch::Tensor& parameter, std::function<void()> onGradient);
  ~GradientHook();
  GradientHook(const GradientHook&) = delete;
  GradientHook& operator=(const GradientHook&) = delete;

 private:
  GradAccumulatorPtr accumulator_;
  uintptr_t key_ = 0;
};

}  // namespace kolo::torch
