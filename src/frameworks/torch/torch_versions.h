// What differs between libtorch 1.x and 2.x that kolo's libtorch integration
// touches, with the types read from torch itself, so that one source builds
// against both:
// - GradAccumulatorPtr: what grad_accumulator() returns, a std::shared_ptr
//   in torch 1.x and a c10::intrusive_ptr in torch 2.x;
// - optimizerStateKey(): the key under which torch::optim::Optimizer::state()
//   keeps a parameter's state, the address of its TensorImpl, written as text
//   in torch 1.x (c10::guts::to_string) and kept as a void* in torch 2.x.
#pragma once

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace kolo::torch {

using GradAccumulatorPtr =
    decltype(::torch::autograd::impl::grad_accumulator(std::declval<at::Tensor>()));

template <typename Optimizer>
auto optimizerStateKey(const Optimizer& optimizer, const at::Tensor& parameter) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string writes
    text << parameter.unsafeGetTensorImpl();
    return Key(text.str());
  } else {
    return Key(parameter.unsafeGetTensorImpl());
  }
}

}  // namespace kolo::torch
