// kolo::torch::zero::DistributedOptimizer with ranks as threads:
// - stages 1 and 2 give the parameters and the optimizer state of
//   kolo::torch::DistributedOptimizer bit for bit after 20 steps (float64,
//   SGD with momentum and Adam, sizes that do not divide by the rank
//   count, buckets that split parameters between ranks), also with
//   gradient accumulation: on 2 ranks with the runtime's reduce-scatter,
//   on 3 ranks under KOLO_DETERMINISTIC=1 (the ordered reduce-scatter of
//   zero_ordered_reduce.h; the runtime's adds in another order there);
// - each rank's optimizer state covers ceil(total / N) elements per bucket;
// - clipGradNorm clips by the global norm;
// - bad use: stage 4, stages mixed across ranks, a parameter not named
//   (stage 3: zero_stage3_test.cc).
#include <gtest/gtest.h>

#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/zero_optimizer.h"
#include "zero_test_support.h"

namespace {

struct ZNetImpl : ::torch::nn::Module {
  ZNetImpl() {
    fc1 = register_module("fc1", ::torch::nn::Linear(7, 13));
    fc2 = register_module("fc2", ::torch::nn::Linear(13, 3));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x) { return fc2(::torch::tanh(fc1(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(ZNet);

}  // namespace

namespace kolo::torch {
namespace {

constexpr double kTinyMb = 40 * 8 / 1048576.0;  // 40 float64: buckets split parameters

const ZNet& initialNet();

// `deterministic`: RuntimeOptions::deterministic (KOLO_DETERMINISTIC=1).
void withContexts(int n, const std::function<void(std::shared_ptr<Context>)>& fn,
                  bool deterministic = false) {
  initialNet();
  zero_test::withContexts(n, deterministic, fn);
}

// The initial parameters, made once on the test's thread (the global
// generator is shared by the rank threads).
const ZNet& initialNet() {
  static const ZNet net = [] {
    ::torch::manual_seed(3);
    ZNet n;
    n->to(::torch::kDouble);
    return n;
  }();
  return net;
}

// A copy of the initial network.
ZNet makeNet() {
  ZNet net;
  net->to(::torch::kDouble);
  ::torch::NoGradGuard g;
  auto src = initialNet()->named_parameters();
  for (auto& item : net->named_parameters()) item.value().copy_(src[item.key()]);
  return net;
}

std::pair<::torch::Tensor, ::torch::Tensor> batch(int step, int rank) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(500 + step * 16 + rank);
  auto opts = ::torch::TensorOptions().dtype(::torch::kDouble);
  return {::torch::randn({4, 7}, gen, opts), ::torch::randn({4, 3}, gen, opts)};
}

std::unique_ptr<::torch::optim::Optimizer> makeOptimizer(bool adam, ZNet& net) {
  if (adam) {
    return std::make_unique<::torch::optim::Adam>(
        net->parameters(), ::torch::optim::AdamOptions(0.01).weight_decay(1e-3));
  }
  return std::make_unique<::torch::optim::SGD>(
      net->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9));
}

template <class Opt>
void train(ZNet& net, Opt& opt, int rank, int steps, int passes) {
  zero_test::train(net, opt, rank, steps, passes, batch);
}

using zero_test::stateOf;

// (adam, stage, backward passes per step, ranks); 3 ranks run under
// KOLO_DETERMINISTIC=1.
class ZeroExactTest : public ::testing::TestWithParam<std::tuple<bool, int, int, int>> {};

constexpr int kExactSteps = 20;

TEST_P(ZeroExactTest, EqualsDistributedOptimizerBitForBit) {
  const auto [adam, stage, passes, ranks] = GetParam();
  withContexts(
      ranks,
      [&, adam = adam, stage = stage, passes = passes,
       ranks = ranks](std::shared_ptr<Context> ctx) {
        ZNet ref = makeNet();
        auto refInner = makeOptimizer(adam, ref);
        DistributedOptimizerOptions refOptions;
        refOptions.backwardPassesPerStep = passes;
        DistributedOptimizer refOpt(*refInner, ref->named_parameters(), ctx, refOptions);
        train(ref, refOpt, ctx->rank(), kExactSteps, passes);

        ZNet net = makeNet();
        auto inner = makeOptimizer(adam, net);
        zero::Options options;
        options.stage = stage;
        options.bucketMb = kTinyMb;
        options.backwardPassesPerStep = passes;
        zero::DistributedOptimizer opt(*inner, net->named_parameters(), ctx, options);
        train(net, opt, ctx->rank(), kExactSteps, passes);

        auto refParams = ref->named_parameters();
        for (auto& item : net->named_parameters()) {
          EXPECT_TRUE(::torch::equal(item.value(), refParams[item.key()]))
              << "rank " << ctx->rank() << " of " << ranks << ", stage " << stage << ": "
              << item.key();
        }
        int64_t owned = zero_test::expectShardedState(
            opt, *inner, *refInner, refParams, adam,
            "rank " + std::to_string(ctx->rank()) + " of " + std::to_string(ranks));
        const int64_t total = 7 * 13 + 13 + 13 * 3 + 3;
        EXPECT_LE(owned, total / ranks + 8);  // ceil(bucket / N) per bucket
        EXPECT_GT(owned, 0);
      },
      ranks == 3);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroExactTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2),
                                            ::testing::Values(1, 2),
                                            ::testing::Values(2, 3)));

TEST(ZeroOptimizerTest, ClipsByTheGlobalNorm) {
  withContexts(2, [](std::shared_ptr<Context> ctx) {
    ZNet ref = makeNet();
    ::torch::optim::SGD refInner(ref->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizer refOpt(refInner, ref->named_parameters(), ctx);
    ZNet net = makeNet();
    ::torch::optim::SGD inner(net->parameters(), ::torch::optim::SGDOptions(0.1));
    zero::Options options;
    options.stage = 2;
    options.bucketMb = kTinyMb;
    zero::DistributedOptimizer opt(inner, net->named_parameters(), ctx, options);
    auto [x, y] = batch(0, ctx->rank());
    zero_test::expectClipsLikeTorch(ref, refOpt, net, opt, x, y, 0.01);
    auto refParams = ref->named_parameters();
    for (auto& item : net->named_parameters()) {
      EXPECT_TRUE(::torch::allclose(item.value(), refParams[item.key()], 1e-12, 1e-14))
          << item.key();
    }
  });
}

TEST(ZeroOptimizerTest, BadUseFailsClearly) {
  withContexts(2, [](std::shared_ptr<Context> ctx) {
    ZNet net = makeNet();
    ::torch::optim::SGD inner(net->parameters(), ::torch::optim::SGDOptions(0.1));
    zero::Options four;
    four.stage = 4;
    try {
      zero::DistributedOptimizer opt(inner, net->named_parameters(), ctx, four);
      ADD_FAILURE() << "stage 4 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("stage must be 1, 2 or 3, got 4"),
                std::string::npos);
    }
    NamedTensors some = namedTensors(net->named_parameters());
    some.pop_back();
    try {
      zero::DistributedOptimizer opt(inner, some, ctx);
      ADD_FAILURE() << "an unnamed parameter accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not in namedParameters"),
                std::string::npos);
    }
    zero::Options mixed;
    mixed.stage = ctx->rank() == 0 ? 1 : 2;
    try {
      zero::DistributedOptimizer opt(inner, net->named_parameters(), ctx, mixed);
      ADD_FAILURE() << "mixed stages accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_NE(std::string(e.what()).find("stage 1 on rank 0 but stage 2 on rank 1"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace kolo::torch
