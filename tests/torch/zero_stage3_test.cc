// kolo::torch::zero stage 3 (wrap + DistributedOptimizer) with ranks as
// threads and the runtime's KOLO_DETERMINISTIC=1 (ordered) reductions:
// - 20 steps of float64 training of a Sequential whose units have 91, 91
//   and 35 elements (none divides by 2 or 3; the first unit's weight is
//   split between ranks): the parameters (gathered) and the optimizer
//   state equal kolo::torch::DistributedOptimizer's bit for bit, for SGD
//   with momentum and Adam, on 2 and 3 ranks, with and without gradient
//   accumulation; evaluation under NoGradGuard gives the reference output;
// - between steps a rank holds only its shards: every parameter's storage
//   is 0 bytes, each shard has ceil(total / N) elements, the optimizer
//   state covers the owned elements only; forward and backward never hold
//   more than two units and prefetch the next one;
// - clipGradNorm clips by the global norm (3 ranks);
// - bad use: stage 3 without wrap (names the parameter), backward without
//   a stage-3 optimizer, an optimizer missing a parameter of the model, a
//   module twice in the Sequential.
#include <gtest/gtest.h>

#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/zero_optimizer.h"
#include "frameworks/torch/zero_sharded_model.h"
#include "zero_test_support.h"

namespace kolo::torch {
namespace {

namespace nn = ::torch::nn;

nn::Sequential buildNet() {
  nn::Sequential net(nn::Linear(6, 13), nn::Tanh(),
                     nn::Linear(nn::LinearOptions(13, 7).bias(false)), nn::Tanh(),
                     nn::Linear(nn::LinearOptions(7, 5).bias(false)));
  net->to(::torch::kDouble);
  return net;
}

// The initial parameters, made once on the test's thread (the global
// generator is shared by the rank threads).
const nn::Sequential& initialNet() {
  static const nn::Sequential net = [] {
    ::torch::manual_seed(5);
    return buildNet();
  }();
  return net;
}

nn::Sequential makeNet() {
  nn::Sequential net = buildNet();
  ::torch::NoGradGuard g;
  auto src = initialNet()->named_parameters();
  for (auto& item : net->named_parameters()) item.value().copy_(src[item.key()]);
  return net;
}

void withContexts(int n, const std::function<void(std::shared_ptr<Context>)>& fn) {
  initialNet();
  zero_test::withContexts(n, /*deterministic=*/true, fn);  // the ordered allreduce
}

std::pair<::torch::Tensor, ::torch::Tensor> batch(int step, int rank) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(700 + step * 16 + rank);
  auto opts = ::torch::TensorOptions().dtype(::torch::kDouble);
  return {::torch::randn({4, 6}, gen, opts), ::torch::randn({4, 5}, gen, opts)};
}

std::unique_ptr<::torch::optim::Optimizer> makeOptimizer(
    bool adam, const std::vector<::torch::Tensor>& params) {
  if (adam) {
    return std::make_unique<::torch::optim::Adam>(
        params, ::torch::optim::AdamOptions(0.01).weight_decay(1e-3));
  }
  return std::make_unique<::torch::optim::SGD>(
      params, ::torch::optim::SGDOptions(0.05).momentum(0.9));
}

template <class Opt>
void train(nn::Sequential& net, Opt& opt, int rank, int steps, int passes) {
  zero_test::train(net, opt, rank, steps, passes, batch);
}

using zero_test::stateOf;

zero::Options stage3(std::shared_ptr<zero::ShardedModel> sharded, int passes = 1) {
  zero::Options o;
  o.stage = 3;
  o.sharded = std::move(sharded);
  o.backwardPassesPerStep = passes;
  return o;
}

class Stage3ExactTest : public ::testing::TestWithParam<std::tuple<bool, int, int>> {};

TEST_P(Stage3ExactTest, EqualsDistributedOptimizerBitForBit) {
  const auto [adam, ranks, passes] = GetParam();
  withContexts(ranks, [&, adam = adam, ranks = ranks,
                       passes = passes](std::shared_ptr<Context> ctx) {
    const int rank = ctx->rank();
    nn::Sequential ref = makeNet();
    auto refInner = makeOptimizer(adam, ref->parameters());
    DistributedOptimizerOptions refOptions;
    refOptions.backwardPassesPerStep = passes;
    DistributedOptimizer refOpt(*refInner, ref->named_parameters(), ctx, refOptions);
    train(ref, refOpt, rank, 20, passes);

    nn::Sequential net = makeNet();
    std::vector<std::string> namesBefore = net->named_parameters().keys();
    auto sharded = zero::wrap(net, ctx);
    EXPECT_EQ(net->named_parameters().keys(), namesBefore);
    ASSERT_EQ(sharded->unitCount(), 3u);
    auto inner = makeOptimizer(adam, net->parameters());
    zero::DistributedOptimizer opt(*inner, net->named_parameters(), ctx,
                                   stage3(sharded, passes));
    train(net, opt, rank, 20, passes);

    // Between steps: only the shards.
    int64_t shardBytes = 0;
    const int64_t totals[] = {6 * 13 + 13, 13 * 7, 7 * 5};
    for (size_t u = 0; u < sharded->unitCount(); ++u) {
      const zero::Unit& unit = sharded->unit(u);
      EXPECT_EQ(unit.total(), totals[u]);
      EXPECT_EQ(unit.shard().numel(), (totals[u] + ranks - 1) / ranks) << "unit " << u;
      EXPECT_EQ(unit.heldBytes(), 0) << "unit " << u;
      shardBytes += unit.shard().numel() * 8;
    }
    for (auto& item : net->named_parameters()) {
      EXPECT_EQ(item.value().storage().nbytes(), 0u) << item.key();
    }
    EXPECT_EQ(sharded->heldBytes(), shardBytes);
    EXPECT_EQ(sharded->gatheredNow(), 0);
    EXPECT_LE(sharded->gatheredPeak(), 2);
    EXPECT_GT(sharded->prefetches(), 0);

    auto refParams = ref->named_parameters();
    int64_t owned = zero_test::expectShardedState(opt, *inner, *refInner, refParams, adam,
                                                  "rank " + std::to_string(rank));
    EXPECT_LE(owned, shardBytes / 8);
    EXPECT_GT(owned, 0);
    {
      zero::FullParameters full(*sharded);
      for (auto& item : net->named_parameters()) {
        EXPECT_TRUE(::torch::equal(item.value(), refParams[item.key()]))
            << "rank " << rank << ": " << item.key();
      }
    }
    EXPECT_EQ(sharded->gatheredNow(), 0);
    ::torch::NoGradGuard noGrad;
    auto [x, y] = batch(99, rank);
    EXPECT_TRUE(::torch::equal(net->forward(x), ref->forward(x)));
    EXPECT_EQ(sharded->gatheredNow(), 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Stage3, Stage3ExactTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(2, 3),
                                            ::testing::Values(1, 2)));

TEST(ZeroStage3Test, ClipsByTheGlobalNorm) {
  withContexts(3, [](std::shared_ptr<Context> ctx) {
    nn::Sequential ref = makeNet();
    ::torch::optim::SGD refInner(ref->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizer refOpt(refInner, ref->named_parameters(), ctx);
    nn::Sequential net = makeNet();
    auto sharded = zero::wrap(net, ctx);
    ::torch::optim::SGD inner(net->parameters(), ::torch::optim::SGDOptions(0.1));
    zero::DistributedOptimizer opt(inner, net->named_parameters(), ctx, stage3(sharded));
    auto [x, y] = batch(0, ctx->rank());
    zero_test::expectClipsLikeTorch(ref, refOpt, net, opt, x, y, 0.01);
    auto refParams = ref->named_parameters();
    zero::FullParameters full(*sharded);
    for (auto& item : net->named_parameters()) {
      EXPECT_TRUE(::torch::allclose(item.value(), refParams[item.key()], 1e-12, 1e-14))
          << item.key();
    }
  });
}

void expectError(const std::function<void()>& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << text;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(ZeroStage3Test, BadUseFailsClearly) {
  withContexts(2, [](std::shared_ptr<Context> ctx) {
    nn::Sequential plain = makeNet();
    ::torch::optim::SGD sgd(plain->parameters(), ::torch::optim::SGDOptions(0.1));
    expectError(
        [&] {
          zero::DistributedOptimizer opt(sgd, plain->named_parameters(), ctx,
                                         stage3(nullptr));
        },
        "stage 3 needs kolo::torch::zero::wrap(model) before the optimizer is built (its "
        "result in Options::sharded); parameter '0.weight' is not in a wrapped module");

    nn::Sequential net = makeNet();
    auto sharded = zero::wrap(net, ctx);
    expectError(
        [&] {
          zero::DistributedOptimizer opt(sgd, plain->named_parameters(), ctx,
                                         stage3(sharded));
        },
        "parameter '0.weight' is not in a wrapped module");
    auto [x, y] = batch(0, ctx->rank());
    expectError(
        [&] { ::torch::mse_loss(net->forward(x), y).backward(); },
        "backward through wrapped module '4' needs a stage-3 DistributedOptimizer");
    EXPECT_EQ(sharded->gatheredNow(), 0);

    std::vector<::torch::Tensor> some = net->parameters();
    some.pop_back();
    ::torch::optim::SGD partial(some, ::torch::optim::SGDOptions(0.1));
    NamedTensors someNamed = namedTensors(net->named_parameters());
    someNamed.pop_back();
    expectError(
        [&] { zero::DistributedOptimizer opt(partial, someNamed, ctx, stage3(sharded)); },
        "parameter '4.weight' of the wrapped model is not in the optimizer");

    nn::Linear twice(3, 3);
    nn::Sequential doubled(twice, twice);
    expectError([&] { zero::wrap(doubled, ctx); },
                "child '1' is a module that appears twice");
  });
}

}  // namespace
}  // namespace kolo::torch
