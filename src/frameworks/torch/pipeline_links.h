// The messages between neighbouring stages of a kolo::torch::pipeline::
// Pipeline, over the point-to-point messages of its communicator
// (Communicator::send/recv/isend/irecv), on a channel of the pipeline's
// own so that two pipelines on one communicator never see each other's
// messages.
//
// Tags (per neighbour, in order):
// - kActivation: a micro-batch's output, stage s -> s + 1, as raw bytes;
// - kGradient: the gradient of that output, stage s + 1 -> s;
// - kDescriptor: once, before the first activation, stage s -> s + 1: the
//   output's dtype and shape (so later micro-batches send tensors only), or
//   a failure notice in its place;
// - kFailure: a failure notice after a poison message.
//
// Failures: a stage that fails tells both neighbours (a neighbour that
// told it, only the other one) so that every stage throws rather than
// waits. A notice is a Descriptor whose status is not kOk, naming the stage
// that failed, followed by that stage's message text. On the activation and
// gradient tags it is announced by a poison message (one int64, where the
// receiver expects bytes): the receive fails with kMismatch, which
// recvTensor reports as "no tensor", and the receiver then reads the
// notice on kFailure.
#pragma once

#include <ATen/ATen.h>
#include <kolo/communicator.h>

#include <memory>
#include <string>
#include <vector>

namespace kolo::torch::pipeline {

enum Tag : int { kActivation = 1, kGradient = 2, kDescriptor = 3, kFailure = 4 };

struct Descriptor {
  enum Status : int64_t { kOk = 0, kFailed = 1 };
  int64_t status = kOk;
  int stage = 0;                      // the stage that failed (status kFailed)
  std::string text;                   // ... and its message
  at::ScalarType dtype = at::kFloat;  // status kOk: the output's dtype and shape
  std::vector<int64_t> shape;
};

// Thrown by a stage that learnt of another stage's failure.
class StageFailed : public Error {
 public:
  using Error::Error;
};

class Links {
 public:
  // The stage s is rank s of `comm`.
  Links(Communicator& comm, uint32_t channel) : comm_(comm), channel_(channel) {}

  void sendDescriptor(int stage, int tag, const Descriptor& d);
  Descriptor recvDescriptor(int stage, int tag);
  // Posts a send of `t` (made contiguous and kept alive until flush()).
  void isendTensor(int stage, int tag, const at::Tensor& t);
  // A tensor of `dtype` and `shape` from `stage`; undefined when a poison
  // message came in its place (then read the notice on kFailure).
  at::Tensor recvTensor(int stage, int tag, at::ScalarType dtype,
                        const std::vector<int64_t>& shape);
  void sendPoison(int stage, int tag);
  // Waits for every posted send; with `quiet`, errors are dropped.
  void flush(bool quiet = false);

 private:
  Communicator& comm_;
  uint32_t channel_;
  std::vector<std::pair<std::shared_ptr<Work>, at::Tensor>> pending_;
};

}  // namespace kolo::torch::pipeline
