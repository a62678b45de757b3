// Sharded data parallelism for libtorch programs (ZeRO stages 1, 2 and 3;
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
// - The reduce-scatter of stages 1 and 2 is the runtime's, or under
//   KOLO_DETERMINISTIC=1 the ordered one of zero_ordered_reduce.h (an
//   alltoall, then the N blocks added in rank order and divided by N at
//   synchronize()), which stage 3 always uses.
// - step(): synchronize(), the wrapped optimizer's step on the pieces,
//   then each bucket's updated block is allgathered into every rank's
//   parameters. Bytes per step: one reduce-scatter and one allgather, one
//   allreduce's worth.
// - Stage 3: the model is wrapped first (zero_sharded_model.h: wrap()
//   shards the parameters and gathers each module around its forward and
//   backward); the pieces are views of the units' shards, each unit is a
//   bucket, its gradient arrives from the module's backward and is
//   reduce-scattered by Stage3Reducer (zero_stage3.h, ordered: bit for bit
//   under KOLO_DETERMINISTIC=1 on any number of ranks); step() updates the
//   shards only (the next forward gathers them).
// Parameters whose gradient never came reduce zeros, so every rank submits
// the same operations.
//
// Contract
// - Collective construction: the ranks compare stage, names, dtypes and
//   shapes (Error(kMismatch) naming the first difference, on every rank).
//   stage must be 1, 2 or 3; stage 3 needs Options::sharded (wrap()'s
//   result) holding every trainable parameter of the optimizer, and the
//   optimizer holding every trainable parameter of the wrapped model
//   (Error(kInvalidArgument) naming the parameter). The optimizer must
//   have no state yet.
// - Under KOLO_DETERMINISTIC=1 (Context::deterministic()) every stage
//   reduce-scatters in rank order (zero_ordered_reduce.h), and the
//   parameters and optimizer state equal those of
//   kolo::torch::DistributedOptimizer (same Context) bit for bit on any
//   number of ranks; without it, on 2 ranks (a + b is b + a), not always
//   on more (tests/torch/zero_optimizer_test.cc, zero_stage3_test.cc).
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

class ShardedModel;
class Stage3Reducer;

struct Options {
  int stage = 1;         // 1, 2 or 3
  double bucketMb = 25;  // stages 1 and 2 (stage 3: one bucket per wrapped module)
  int backwardPassesPerStep = 1;
  std::shared_ptr<ShardedModel> sharded;  // stage 3: what wrap(model, context) returned
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
  // Zeroes (stage 1) or releases (stages 2 and 3) every gradient.
  void zeroGrad();
  // Scales the gradients so that their global L2 norm is at most maxNorm;
  // returns the norm before. Collective; synchronizes first.
  double clipGradNorm(double maxNorm);

  // The owned part of one parameter: elements [begin, end) of it,
  // flattened; `view` is what the wrapped optimizer updates (a view of
  // the parameter at stages 1 and 2, of its unit's shard at stage 3).
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
    size_t unit = 0;             // stage 3: its unit in options_.sharded
    std::vector<size_t> pieces;  // indices into pieces_
    int waiting = 0;             // stage 2: gradients still to come
    runtime::HandlePtr handle;   // pending reduce-scatter
    ::torch::Tensor flat, block;
  };

  void buildBuckets(double bucketMb);
  void buildUnitBuckets();  // stage 3
  void installPieces();
  void installGradients(Bucket& b);  // b.block into the pieces' grads, under mu_
  void synchronizeUnits();           // stage 3's synchronize()
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
  std::unique_ptr<Stage3Reducer> stage3_;
};

}  // namespace kolo::torch::zero
