// kolo::torch::zero::Stage3Reducer: the ordered reduce-scatter of each
// unit's gradient; see zero_stage3.h.
#include "frameworks/torch/zero_stage3.h"

#include <vector>

#include "collectives/reduce.h"
#include "common/check.h"
#include "frameworks/torch/distributed_optimizer.h"

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

// The alltoall of the unit's flat gradient: block j to rank j.
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
  runtime::OpRequest r;
  r.spec.name = "zero" + std::to_string(id_) + "/grad/" + std::to_string(u);
  r.spec.kind = runtime::OpKind::kAlltoall;
  r.spec.dtype = toKoloType(unit.dtype(), r.spec.name);
  r.spec.shape = {unit.padded()};
  r.input = s.acc.data_ptr();
  s.handle = model_->context()->runtime().enqueue(std::move(r));
  s.launched = true;
  inFlight_.push_back(u);
}

// Rank q's block of our share arrived as the q-th block of the output:
// summed in rank order, divided by N.
void Stage3Reducer::complete(size_t u) {
  Unit& unit = model_->unit(u);
  State& s = states_[u];
  runtime::HandlePtr h = std::move(s.handle);
  s.handle = nullptr;
  h->wait();
  const int n = model_->context()->size();
  const size_t count = static_cast<size_t>(unit.shardSize());
  const DataType dtype = toKoloType(unit.dtype(), unit.module());
  const size_t es = elementSize(dtype);
  const auto& out = h->output();
  KOLO_CHECK_EQ(out.size(), count * es * static_cast<size_t>(n));
  s.block =
      ::torch::empty({unit.shardSize()}, ::torch::TensorOptions().dtype(unit.dtype()));
  if (count > 0) {
    std::vector<const void*> srcs;
    for (int q = 0; q < n; ++q)
      srcs.push_back(out.data() + static_cast<size_t>(q) * count * es);
    collectives::reduceMany(s.block.data_ptr(), srcs.data(), n, count, dtype,
                            ReduceOp::kSum);
    collectives::divideInPlace(s.block.data_ptr(), count, dtype, n);
  }
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
