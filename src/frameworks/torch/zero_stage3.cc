// kolo::torch::zero::Stage3Reducer: the ordered reduce-scatter of each
// unit's gradient; see zero_stage3.h.
#include "frameworks/torch/zero_stage3.h"

#include <vector>

#include "common/check.h"
#include "frameworks/torch/zero_ordered_reduce.h"

namespace kolo::torch::zero {

namespace {
constexpr size_t kMaxInFlight = 2;
}  // namespace

Stage3Reducer::Stage3Reducer(std::shared_ptr<ShardedModel> model, int id,
                             int passesPerStep)
    : model_(std::move(model)), id_(id), passesPerStep_(passesPerStep) {
  states_.resize(model_->unitCount());
  model_->attach(this);
}

Stage3Reducer::~Stage3Reducer() {
  model_->detach(this);
  std::lock_guard<std::mutex> lock(mu_);
  for (State& s : states_) {
    try {
      if (s.handle) s.handle->wait();
    } catch (...) {  // the buffers stay valid until here; errors were the caller's
    }
  }
}

void Stage3Reducer::unitGradient(size_t u, ::torch::Tensor flat) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = states_[u];
  if (s.launched || s.passes >= passesPerStep_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "kolo::torch::zero::DistributedOptimizer: module '"
                   << model_->unit(u).module()
                   << "' got more than backwardPassesPerStep = " << passesPerStep_
                   << " backward passes before step()");
  }
  if (s.acc.defined()) {
    ::torch::NoGradGuard noGrad;
    s.acc.add_(flat);
  } else {
    s.acc = std::move(flat);
  }
  if (++s.passes == passesPerStep_) launch(u);
}

// The unit's ordered reduce-scatter starts (zero_ordered_reduce.h).
void Stage3Reducer::launch(size_t u) {
  Unit& unit = model_->unit(u);
  State& s = states_[u];
  if (!s.acc.defined()) {
    s.acc = ::torch::zeros({unit.padded()}, ::torch::TensorOptions().dtype(unit.dtype()));
  }
  while (inFlight_.size() >= kMaxInFlight) {
    const size_t oldest = inFlight_.front();
    inFlight_.pop_front();
    complete(oldest);
  }
  s.handle = startOrderedReduceScatter(
      model_->context()->runtime(),
      "zero" + std::to_string(id_) + "/grad/" + std::to_string(u), s.acc,
      model_->context()->size());
  s.launched = true;
  inFlight_.push_back(u);
}

// Waits for the unit's alltoall: the N blocks summed in rank order,
// divided by N (zero_ordered_reduce.h).
void Stage3Reducer::complete(size_t u) {
  Unit& unit = model_->unit(u);
  State& s = states_[u];
  runtime::HandlePtr h = std::move(s.handle);
  s.handle = nullptr;
  s.block = finishOrderedReduceScatter(h, unit.dtype(), unit.shardSize(),
                                       model_->context()->size());
  s.acc = ::torch::Tensor();
}

std::vector<::torch::Tensor> Stage3Reducer::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  std::exception_ptr error;
  try {
    for (size_t u = 0; u < states_.size(); ++u) {
      if (!states_[u].launched && model_->unit(u).trainable()) launch(u);
    }
  } catch (...) {
    error = std::current_exception();
  }
  while (!inFlight_.empty()) {
    const size_t u = inFlight_.front();
    inFlight_.pop_front();
    try {
      complete(u);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  std::vector<::torch::Tensor> blocks;
  for (State& s : states_) {
    blocks.push_back(std::move(s.block));
    s = State();
  }
  if (error) std::rethrow_exception(error);
  return blocks;
}

void Stage3Reducer::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  std::exception_ptr error;
  for (size_t u : inFlight_) {
    try {
      if (states_[u].handle) states_[u].handle->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  inFlight_.clear();
  for (State& s : states_) s = State();
  if (error) std::rethrow_exception(error);
}

}  // namespace kolo::torch::zero
