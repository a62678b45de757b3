// Sharded data parallelism for libtorch programs (ZeRO stages 1 and 2;
// docs/zero.md), used like kolo::torch::DistributedOptimizer:
//
//   torch::optim::Adam adam(model->parameters(), lr);
//   kolo::torch::zero::DistributedOptimizer opt(adam, model->named_parameters(),
//                                               ctx, {.stage = 2});
//   for (...) { opt.zeroGrad(); loss(model(x), y).backward(); opt.step(); }
//
// How it works: the trainable parameters are grouped into buckets (one
// dtype, up to bucketMb megabytes, filled from the last parameter
// backwards); a bucket's flat vector (its parameters concatenated, padded
// to a multiple of N) is split into N equal blocks and rank r owns block r.
// The wrapped optimizer's param groups are replaced by *pieces*: 1-d views
// of the parameters' storage covering the owned elements, so its state
// (momentum, Adam's moments) exists for 1/N of the elements only, and an
// elementwise optimizer computes on them exactly what it computes on whole
// parameters.
// - Stage 1: backward fills p.grad() as usual; synchronize() reduce-
//   scatters each bucket's flat gradient (average) and writes the owned
//   block into the owned slice of p.grad().
// - Stage 2: a post-hook on each gradient accumulator counts the bucket's
//   parameters; when backward has produced the last of them (after
//   backwardPassesPerStep passes), the bucket is flattened, the
//   parameters' grads are released and its reduce-scatter starts while
//   backward goes on; each rank keeps only its block.
// - step(): synchronize(), the wrapped optimizer's step on the pieces,
//   then each bucket's updated block is allgathered into every rank's
//   parameters. Bytes per step: one reduce-scatter and one allgather, one
//   allreduce's worth.
// Parameters whose gradient never came reduce zeros, so every rank submits
// the same operations.
//
// Contract
// - Collective construction: the ranks compare stage, names, dtypes and
//   shapes (Error(kMismatch) naming the first difference, on every rank).
//   stage must be 1 or 2 (3 needs module hooks that libtorch lacks;
//   Error(kInvalidArgument)). The optimizer must have no state yet.
// - On 2 ranks, or with a reduction that adds in rank order, the
//   parameters and state equal kolo::torch::DistributedOptimizer's bit for
//   bit (tests/torch/zero_optimizer_test.cc).
// - Threads, lifetime and failures as kolo::torch::DistributedOptimizer's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frameworks/torch/context.h"
#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/gradient_hook.h"

namespace kolo::torch::zero {

struct Options {
  int stage = 1;  // 1 or 2
  double bucketMb = 25;
  int backwardPassesPerStep = 1;
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(::torch::optim::Optimizer& optimizer, NamedTensors namedParameters,
                       std::shared_ptr<Context> context, Options options = {});
  DistributedOptimizer(
      ::torch::optim::Optimizer& optimizer,
      const ::torch::OrderedDict<std::string, ::torch::Tensor>& namedParameters,
      std::shared_ptr<Context> context, Options options = {})
      : DistributedOptimizer(optimizer, namedTensors(namedParameters), std::move(context),
                             options) {}
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Finishes this step's gradient reduction; the pieces' grads then hold
  // the averaged gradient of the owned elements. Idempotent until the next
  // backward pass.
  void synchronize();
  // synchronize(), the wrapped optimizer's step, the parameters' allgather.
  void step();
  // Zeroes (stage 1) or releases (stage 2) every gradient.
  void zeroGrad();
  // Scales the gradients so that their global L2 norm is at most maxNorm;
  // returns the norm before. Collective; synchronizes first.
  double clipGradNorm(double maxNorm);

  // The owned part of one parameter: elements [begin, end) of it,
  // flattened; `view` is what the wrapped optimizer updates.
  struct Piece {
    std::string name;
    ::torch::Tensor param;
    int64_t begin = 0;
    int64_t end = 0;
    ::torch::Tensor view;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  ::torch::optim::Optimizer& optimizer() { return optimizer_; }

 private:
  struct Param {
    std::string name;
    ::torch::Tensor tensor;
    size_t bucket = 0;
    int passes = 0;
    std::unique_ptr<GradientHook> hook;  // stage 2: calls onGradient
  };
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    int64_t total = 0, shard = 0, begin = 0, end = 0;
    ::torch::ScalarType dtype = ::torch::kFloat;
    std::vector<size_t> pieces;  // indices into pieces_
    int waiting = 0;             // stage 2: gradients still to come
    runtime::HandlePtr handle;   // pending reduce-scatter
    ::torch::Tensor flat, block;
  };

  void buildBuckets(double bucketMb);
  void installPieces();
  void checkAgree();
  void onGradient(size_t index);  // under mu_
  void launch(Bucket& b);         // under mu_
  void allgatherParameters();

  ::torch::optim::Optimizer& optimizer_;
  std::shared_ptr<Context> context_;
  Options options_;
  int id_ = 0;
  std::mutex mu_;  // guards the per-step fields of params_ and buckets_
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<Piece> pieces_;
  bool synchronized_ = false;
};

}  // namespace kolo::torch::zero
