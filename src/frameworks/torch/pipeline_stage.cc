// Pipeline: one micro-batch's forward and backward on this stage, the
// activation checkpointing, and the failure protocol (pipeline_links.h).
//
// Forward of micro-batch m: the input is the batch's m-th chunk (first
// stage) or the predecessor's activation (a leaf that requires grad when
// floating point); the stage's layers run with autograd on, or, when m is
// checkpointed, off (the CPU generator's state kept); the output goes to
// the successor as a detached tensor. Backward of m: a checkpointed m runs
// its forward again with autograd on from the kept input and generator
// state; the last stage backpropagates lossFn(output, target) / chunks,
// the others the gradient the successor sent for their output; every stage
// but the first sends its input's gradient back (zeros when none reached
// it, so the predecessor always gets one). The recomputation draws the
// same numbers, and autograd runs the same kernels in the same order as
// an unpipelined loop over the micro-batches, so the gradients are equal
// bit for bit.
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "common/check.h"
#include "frameworks/torch/pipeline.h"

namespace kolo::torch::pipeline {

namespace {

at::Tensor generatorState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setGeneratorState(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

std::string describe(at::ScalarType dtype, at::IntArrayRef shape) {
  std::ostringstream os;
  os << c10::toString(dtype) << " " << shape;
  return os.str();
}

}  // namespace

bool Pipeline::checkpointed(int64_t m) const {
  return options_.checkpoint == "always" ||
         (options_.checkpoint == "except_last" && m < options_.chunks - 1);
}

at::Tensor Pipeline::receiveInput(bool grad) {
  if (!inputKnown_) {
    Descriptor d = links_->recvDescriptor(stage_ - 1, kDescriptor);
    if (d.status != Descriptor::kOk) failFrom(d, stage_ - 1);
    inDtype_ = d.dtype;
    inShape_ = d.shape;
    inputKnown_ = true;
  }
  at::Tensor x = links_->recvTensor(stage_ - 1, kActivation, inDtype_, inShape_);
  if (!x.defined()) failFrom(links_->recvDescriptor(stage_ - 1, kFailure), stage_ - 1);
  if (grad && x.is_floating_point()) x.requires_grad_(true);
  return x;
}

at::Tensor Pipeline::stageForward(const at::Tensor& x) {
  return module_->forward(x);
}

void Pipeline::forwardOne(Step& step, int64_t m) {
  at::Tensor x = isFirst() ? step.inputs[m] : receiveInput(step.grad);
  Held held;
  held.recompute = step.grad && checkpointed(m);
  at::Tensor y;
  {
    ::torch::AutoGradMode mode(step.grad && !held.recompute);
    if (held.recompute) held.generatorState = generatorState();
    y = stageForward(x);
  }
  if (!isLast()) sendOutput(y, m);
  if (!step.grad) {
    if (isLast()) step.outputs.push_back(y);
    return;
  }
  held.input = x;
  if (!held.recompute) held.output = y;
  step.held[m] = std::move(held);
  peakHeld_ = std::max<int64_t>(peakHeld_, static_cast<int64_t>(step.held.size()));
}

void Pipeline::sendOutput(const at::Tensor& y, int64_t m) {
  if (!descriptorSent_) {
    Descriptor d;
    d.dtype = y.scalar_type();
    d.shape = y.sizes().vec();
    links_->sendDescriptor(stage_ + 1, kDescriptor, d);
    descriptorSent_ = true;
    outDtype_ = d.dtype;
    outShape_ = d.shape;
  } else if (y.scalar_type() != outDtype_ || y.sizes().vec() != outShape_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "pipeline stage "
                   << stage_ << " (rank " << stage_ << "): micro-batch " << m
                   << "'s output is " << describe(y.scalar_type(), y.sizes())
                   << ", but the stage's first output was "
                   << describe(outDtype_, outShape_)
                   << " (a stage's output keeps its first dtype and shape)");
  }
  links_->isendTensor(stage_ + 1, kActivation, y.detach());
}

at::Tensor Pipeline::recomputed(Held& held) {
  at::Tensor now = generatorState();
  setGeneratorState(held.generatorState);
  at::Tensor y;
  {
    ::torch::AutoGradMode on(true);
    y = stageForward(held.input);
  }
  setGeneratorState(now);
  return y;
}

void Pipeline::backwardOne(Step& step, int64_t m) {
  Held held = std::move(step.held.at(m));
  step.held.erase(m);
  at::Tensor y = held.recompute ? recomputed(held) : held.output;
  if (isLast()) {
    at::Tensor loss = (*step.lossFn)(y, step.targets[m]) / options_.chunks;
    step.losses.push_back(loss.detach());
    loss.backward();
  } else {
    at::Tensor g = links_->recvTensor(stage_ + 1, kGradient, outDtype_, outShape_);
    if (!g.defined()) failFrom(links_->recvDescriptor(stage_ + 1, kFailure), stage_ + 1);
    if (y.requires_grad()) ::torch::autograd::backward({y}, {g});
  }
  if (!isFirst()) {
    at::Tensor gx = held.input.grad();
    links_->isendTensor(stage_ - 1, kGradient,
                        gx.defined() ? gx : at::zeros_like(held.input));
  }
}

// A failure here: both neighbours learn of it (best effort: a broken link
// cannot be told), then the caller rethrows the error.
void Pipeline::tellNeighbours(const std::string& message) {
  failed_ = message;
  Descriptor notice;
  notice.status = Descriptor::kFailed;
  notice.stage = stage_;
  notice.text = message;
  try {
    if (!isLast()) notify(stage_ + 1, kActivation, notice);
    if (!isFirst()) notify(stage_ - 1, kGradient, notice);
  } catch (...) {
  }
  links_->flush(true);
}

// Another stage's failure, told by `fromStage`: the neighbour on the other
// side learns of it, and this stage throws it.
void Pipeline::failFrom(const Descriptor& notice, int fromStage) {
  std::ostringstream what;
  what << "pipeline stage " << notice.stage << " (rank " << notice.stage
       << ") failed: " << notice.text;
  failed_ = what.str();
  try {
    if (fromStage < stage_ && !isLast()) notify(stage_ + 1, kActivation, notice);
    if (fromStage > stage_ && !isFirst()) notify(stage_ - 1, kGradient, notice);
  } catch (...) {
  }
  links_->flush(true);
  throw StageFailed(ErrorCode::kInvalidArgument, failed_);
}

// Before the first activation the notice replaces the descriptor; after
// it, a poison message on the data tag announces it.
void Pipeline::notify(int stage, int dataTag, const Descriptor& notice) {
  if (dataTag == kActivation && !descriptorSent_) {
    links_->sendDescriptor(stage, kDescriptor, notice);
    descriptorSent_ = true;
    return;
  }
  links_->sendPoison(stage, dataTag);
  links_->sendDescriptor(stage, kFailure, notice);
}

}  // namespace kolo::torch::pipeline
