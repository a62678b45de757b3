// GradientHook: a FunctionPostHook on the parameter's AccumulateGrad node.
#include "frameworks/torch/gradient_hook.h"

#include <memory>
#include <utility>

#include "common/check.h"

namespace kolo::torch {
namespace {

class CallbackHook : public ::torch::autograd::FunctionPostHook {
 public:
  explicit CallbackHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  ::torch::autograd::variable_list operator()(
      const ::torch::autograd::variable_list& outputs,
      const ::torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

GradientHook::GradientHook(const ::torch::Tensor& parameter,
                           std::function<void()> onGradient)
    : accumulator_(::torch::autograd::impl::grad_accumulator(parameter)) {
  KOLO_CHECK(accumulator_ != nullptr);
  key_ =
      accumulator_->add_post_hook(std::make_unique<CallbackHook>(std::move(onGradient)));
}

GradientHook::~GradientHook() {
  accumulator_->del_post_hook(key_);
}

}  // namespace kolo::torch
