// The key under which torch::optim::Optimizer::state() keeps a parameter's
// state: the address of the parameter's TensorImpl, written as text in
// torch 1.x (c10::guts::to_string) and kept as a void* in torch 2.x. One
// source builds against both: the key type is read from the map itself.
#pragma once

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace kolo::torch {

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
