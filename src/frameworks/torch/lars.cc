#include "frameworks/torch/lars.h"

#include "frameworks/torch/torch_versions.h"

#include <torch/optim/serialize.h>

namespace kolo::torch {

// Written out rather than with libtorch's _TORCH_OPTIM_* macros, whose
// unqualified `torch::` would name this namespace (kolo::torch).
namespace {

void readDouble(::torch::serialize::InputArchive& archive, const char* key,
                double* value) {
  c10::IValue v;
  if (archive.try_read(key, v)) *value = v.toDouble();
}

}  // namespace

void LarsOptions::serialize(::torch::serialize::InputArchive& archive) {
  readDouble(archive, "lr", &lr_);
  readDouble(archive, "momentum", &momentum_);
  readDouble(archive, "weightDecay", &weightDecay_);
  readDouble(archive, "trustCoefficient", &trustCoefficient_);
  readDouble(archive, "eps", &eps_);
}

void LarsOptions::serialize(::torch::serialize::OutputArchive& archive) const {
  archive.write("lr", c10::IValue(lr()));
  archive.write("momentum", c10::IValue(momentum()));
  archive.write("weightDecay", c10::IValue(weightDecay()));
  archive.write("trustCoefficient", c10::IValue(trustCoefficient()));
  archive.write("eps", c10::IValue(eps()));
}

void LarsParamState::serialize(::torch::serialize::InputArchive& archive) {
  c10::IValue v;
  if (archive.try_read("momentumBuffer", v)) momentumBuffer(v.toTensor());
}

void LarsParamState::serialize(::torch::serialize::OutputArchive& archive) const {
  if (momentumBuffer().defined())
    archive.write("momentumBuffer", c10::IValue(momentumBuffer()));
}

Lars::Lars(std::vector<::torch::optim::OptimizerParamGroup> groups, LarsOptions defaults)
    : Optimizer(std::move(groups), std::make_unique<LarsOptions>(defaults)) {
  TORCH_CHECK(defaults.lr() >= 0, "Lars: invalid learning rate ", defaults.lr());
  TORCH_CHECK(defaults.momentum() >= 0, "Lars: invalid momentum ", defaults.momentum());
  TORCH_CHECK(defaults.weightDecay() >= 0, "Lars: invalid weight decay ",
              defaults.weightDecay());
  TORCH_CHECK(defaults.trustCoefficient() > 0, "Lars: invalid trust coefficient ",
              defaults.trustCoefficient());
}

double Lars::trustRatio(double weightNorm, double gradNorm, const LarsOptions& o) {
  if (weightNorm <= 0 || gradNorm <= 0) return 1.0;
  return o.trustCoefficient() * weightNorm /
         (gradNorm + o.weightDecay() * weightNorm + o.eps());
}

// One update per parameter tensor, as written in lars.h.
::torch::Tensor Lars::step(LossClosure closure) {
  ::torch::NoGradGuard noGrad;
  ::torch::Tensor loss;
  if (closure) {
    ::torch::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const LarsOptions&>(group.options());
    for (auto& w : group.params()) {
      if (!w.grad().defined()) continue;
      const ::torch::Tensor g = w.grad();
      const double weightNorm = w.norm().item<double>();
      const double gradNorm = g.norm().item<double>();
      const double localLr = o.lr() * trustRatio(weightNorm, gradNorm, o);
      ::torch::Tensor update = g.add(w, o.weightDecay()).mul_(localLr);
      auto key = optimizerStateKey(*this, w);
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto s = std::make_unique<LarsParamState>();
        s->momentumBuffer(update.clone());
        it = state_.emplace(key, std::move(s)).first;
      } else {
        auto& s = static_cast<LarsParamState&>(*it->second);
        s.momentumBuffer().mul_(o.momentum()).add_(update);
      }
      w.sub_(static_cast<LarsParamState&>(*it->second).momentumBuffer());
    }
  }
  return loss;
}

void Lars::save(::torch::serialize::OutputArchive& archive) const {
  ::torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

void Lars::load(::torch::serialize::InputArchive& archive) {
  ::torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

}  // namespace kolo::torch
