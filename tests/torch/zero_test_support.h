// What the libtorch zero tests share (zero_optimizer_test.cc,
// zero_stage3_test.cc): ranks as threads, each with a kolo::torch::Context
// over its communicator; the training loop both the reference and the
// sharded optimizer run; the optimizer state entries of one parameter.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frameworks/torch/context.h"
#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/torch_versions.h"
#include "support/comm_world.h"

namespace kolo::torch::zero_test {

// Runs fn on n rank threads, each with a Context over its communicator
// (cycle 0.5 ms, no stall warnings). `deterministic`:
// RuntimeOptions::deterministic, i.e. KOLO_DETERMINISTIC=1.
inline void withContexts(int n, bool deterministic,
                         const std::function<void(std::shared_ptr<Context>)>& fn) {
  ::torch::set_num_threads(1);
  kolo::test::withCommunicators(n, kolo::test::testSettings(), [&](Communicator& c) {
    runtime::RuntimeOptions o;
    o.cycleTimeMs = 0.5;
    o.stallWarningSeconds = 0;
    o.deterministic = deterministic;
    auto ctx =
        Context::create(std::shared_ptr<Communicator>(&c, [](Communicator*) {}), o);
    fn(std::shared_ptr<Context>(ctx.get(), [](Context*) {}));
  });
}

// `steps` optimizer steps of `passes` backward passes each, on the batches
// batchOf(pass index, rank) gives (input, target), mean squared error.
template <class Net, class Opt, class BatchOf>
void train(Net& net, Opt& opt, int rank, int steps, int passes, BatchOf batchOf) {
  for (int s = 0; s < steps; ++s) {
    opt.zeroGrad();
    for (int k = 0; k < passes; ++k) {
      auto [x, y] = batchOf(s * passes + k, rank);
      ::torch::mse_loss(net->forward(x), y).backward();
    }
    opt.step();
  }
}

// The state entries of one parameter (SGD: momentum; Adam: moments, step).
inline std::vector<::torch::Tensor> stateOf(::torch::optim::Optimizer& opt,
                                            const ::torch::Tensor& p, bool adam) {
  auto& entry = *opt.state().at(optimizerStateKey(opt, p));
  if (adam) {
    auto& s = static_cast<::torch::optim::AdamParamState&>(entry);
    return {s.exp_avg().reshape({-1}), s.exp_avg_sq().reshape({-1}),
            ::torch::tensor({static_cast<double>(s.step())})};
  }
  return {
      static_cast<::torch::optim::SGDParamState&>(entry).momentum_buffer().reshape({-1})};
}

// Checks that each piece of the zero optimizer `opt` holds exactly its
// range of the reference optimizer's state (scalars such as Adam's step
// whole); `where` prefixes the failure messages. Returns the elements
// this rank owns.
template <class ZeroOptimizer, class Params>
int64_t expectShardedState(const ZeroOptimizer& opt, ::torch::optim::Optimizer& inner,
                           ::torch::optim::Optimizer& refInner, Params& refParams,
                           bool adam, const std::string& where) {
  int64_t owned = 0;
  for (const auto& piece : opt.pieces()) {
    owned += piece.end - piece.begin;
    auto mine = stateOf(inner, piece.view, adam);
    auto full = stateOf(refInner, refParams[piece.name], adam);
    for (size_t i = 0; i < mine.size(); ++i) {
      auto expect = full[i].numel() == 1 && mine[i].numel() == 1
                        ? full[i]
                        : full[i].narrow(0, piece.begin, piece.end - piece.begin);
      EXPECT_TRUE(::torch::equal(mine[i], expect))
          << where << ": state " << i << " of " << piece.name << " [" << piece.begin
          << ", " << piece.end << ")";
    }
  }
  return owned;
}

// One backward of (x, y) through the reference and the sharded network,
// then global-norm clipping to max_norm and a step on each: the zero
// optimizer's norm must be torch's clip_grad_norm_ of the reference's
// averaged gradients.
template <class Net, class ZeroOptimizer>
void expectClipsLikeTorch(Net& ref, DistributedOptimizer& refOpt, Net& net,
                          ZeroOptimizer& opt, const ::torch::Tensor& x,
                          const ::torch::Tensor& y, double maxNorm) {
  ::torch::mse_loss(ref->forward(x), y).backward();
  ::torch::mse_loss(net->forward(x), y).backward();
  refOpt.synchronize();
  const double refNorm = ::torch::nn::utils::clip_grad_norm_(ref->parameters(), maxNorm);
  refOpt.step();
  const double norm = opt.clipGradNorm(maxNorm);
  opt.step();
  EXPECT_NEAR(norm, refNorm, 1e-12 * refNorm);
}

}  // namespace kolo::torch::zero_test
