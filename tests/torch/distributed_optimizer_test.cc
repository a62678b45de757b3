// The libtorch integration (src/frameworks/torch) with ranks as threads,
// each with its own Communicator and kolo::torch::Context:
// - after DistributedOptimizer::step() every rank holds identical
//   parameters, equal to one process's step on the union of the ranks'
//   batches (SGD with momentum, Adam, LARS);
// - backward_passes_per_step accumulates locally, then reduces once;
// - a parameter unused on some rank does not hang the step;
// - broadcastParameters / broadcastOptimizerState make ranks equal;
// - models that differ across ranks fail at construction, naming the
//   parameter, on every rank;
// - allreduceMetric; one LARS step against a hand computation.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "frameworks/torch/device_memory.h"
#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/lars.h"
#include "frameworks/torch/torch_versions.h"
#include "support/comm_world.h"

// The test model, outside namespace kolo::torch: libtorch's TORCH_MODULE
// names `torch::nn` unqualified.
namespace {

struct NetImpl : ::torch::nn::Module {
  explicit NetImpl(int hidden = 8, bool extra = false) {
    fc1 = register_module("fc1", ::torch::nn::Linear(4, hidden));
    fc2 = register_module("fc2", ::torch::nn::Linear(hidden, 3));
    if (extra) side = register_module("side", ::torch::nn::Linear(4, 3));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x, bool useSide = false) {
    auto y = fc2(::torch::tanh(fc1(x)));
    if (useSide) y = y + side(x);
    return y;
  }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr}, side{nullptr};
};
TORCH_MODULE(Net);

}  // namespace

namespace kolo::torch {
namespace {

std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

runtime::RuntimeOptions fastOptions() {
  runtime::RuntimeOptions o;
  o.cycleTimeMs = 0.5;
  o.stallWarningSeconds = 0;
  return o;
}

// A non-owning pointer for the DistributedOptimizer (the test owns ctx).
std::shared_ptr<Context> share(Context& ctx) {
  return std::shared_ptr<Context>(&ctx, [](Context*) {});
}

// fn(context) on n thread ranks.
void withContexts(int n, const std::function<void(Context&)>& fn) {
  ::torch::set_num_threads(1);
  test::withCommunicators(n, test::testSettings(), [&](Communicator& c) {
    auto ctx = Context::create(borrow(c), fastOptions());
    fn(*ctx);
  });
}

// Copies `from`'s parameter values into `to` (same architecture).
void copyParameters(Net& from, Net& to) {
  ::torch::NoGradGuard g;
  auto src = from->named_parameters();
  for (auto& item : to->named_parameters()) item.value().copy_(src[item.key()]);
}

Net makeNet(uint64_t seed, bool extra = false) {
  ::torch::manual_seed(seed);
  return Net(8, extra);
}

// Batch b of rank r: 5 samples, deterministic.
std::pair<::torch::Tensor, ::torch::Tensor> batch(int step, int rank) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step * 16 + rank);
  auto x = ::torch::randn({5, 4}, gen);
  auto y = ::torch::randn({5, 3}, gen);
  return {x, y};
}

enum class Kind { kSgd, kAdam, kLars };

std::unique_ptr<::torch::optim::Optimizer> makeOptimizer(Kind kind, Net& net) {
  switch (kind) {
    case Kind::kSgd:
      return std::make_unique<::torch::optim::SGD>(
          net->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
    case Kind::kAdam:
      return std::make_unique<::torch::optim::Adam>(net->parameters(),
                                                    ::torch::optim::AdamOptions(0.01));
    case Kind::kLars:
      return std::make_unique<Lars>(
          net->parameters(), LarsOptions(1.0).weightDecay(0.01).trustCoefficient(0.02));
  }
  return nullptr;
}

void expectClose(Net& a, Net& b, double tol, const std::string& what) {
  auto pb = b->named_parameters();
  for (auto& item : a->named_parameters()) {
    EXPECT_TRUE(::torch::allclose(item.value(), pb[item.key()], tol, tol))
        << what << ": " << item.key() << "\n"
        << item.value() << "\nvs\n"
        << pb[item.key()];
  }
}

class StepTest : public ::testing::TestWithParam<std::tuple<Kind, int>> {};

TEST_P(StepTest, EqualsOneProcessStepOnTheUnionOfBatches) {
  const auto [kind, n] = GetParam();
  const int steps = 3;
  Net initial = makeNet(5);
  // The reference: one process, the union of the ranks' batches (mean loss
  // over the union = average of the ranks' mean losses: equal batches).
  Net ref = makeNet(99);
  copyParameters(initial, ref);
  auto refOpt = makeOptimizer(kind, ref);
  for (int s = 0; s < steps; ++s) {
    std::vector<::torch::Tensor> xs, ys;
    for (int r = 0; r < n; ++r) {
      auto [x, y] = batch(s, r);
      xs.push_back(x);
      ys.push_back(y);
    }
    refOpt->zero_grad();
    ::torch::mse_loss(ref->forward(::torch::cat(xs)), ::torch::cat(ys)).backward();
    refOpt->step();
  }
  std::vector<Net> results(n, Net(nullptr));
  withContexts(n, [&](Context& ctx) {
    Net net = Net(8);
    copyParameters(initial, net);
    auto opt = makeOptimizer(kind, net);
    DistributedOptimizer dopt(*opt, net->named_parameters(), share(ctx));
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch(s, ctx.rank());
      dopt.zeroGrad();
      ::torch::mse_loss(net->forward(x), y).backward();
      dopt.step();
    }
    results[ctx.rank()] = net;
  });
  for (int r = 0; r < n; ++r) {
    expectClose(results[r], ref, 1e-5, "rank " + std::to_string(r) + " vs one process");
    auto p0 = results[0]->named_parameters();
    for (auto& item : results[r]->named_parameters()) {
      EXPECT_TRUE(::torch::equal(item.value(), p0[item.key()]))
          << "rank " << r << " differs from rank 0 in " << item.key();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, StepTest,
                         ::testing::Combine(::testing::Values(Kind::kSgd, Kind::kAdam,
                                                              Kind::kLars),
                                            ::testing::Values(2, 3)));

TEST(DistributedOptimizer, BackwardPassesPerStepAccumulatesThenReducesOnce) {
  const int n = 2, passes = 3;
  Net initial = makeNet(6);
  // Reference: every micro-batch's gradient summed, divided by the ranks.
  Net ref = makeNet(99);
  copyParameters(initial, ref);
  ::torch::optim::SGD refOpt(ref->parameters(), 0.05);
  refOpt.zero_grad();
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < passes; ++k) {
      auto [x, y] = batch(k, r);
      ::torch::mse_loss(ref->forward(x), y).backward();
    }
  }
  for (auto& p : ref->parameters()) p.mutable_grad().div_(n);
  refOpt.step();

  std::vector<Net> results(n, Net(nullptr));
  std::atomic<bool> reducedEarly{false};
  withContexts(n, [&](Context& ctx) {
    Net net = Net(8);
    copyParameters(initial, net);
    ::torch::optim::SGD opt(net->parameters(), 0.05);
    DistributedOptimizerOptions o;
    o.backwardPassesPerStep = passes;
    DistributedOptimizer dopt(opt, net->named_parameters(), share(ctx), o);
    dopt.zeroGrad();
    for (int k = 0; k < passes; ++k) {
      auto [x, y] = batch(k, ctx.rank());
      ::torch::mse_loss(net->forward(x), y).backward();
      if (k == 0) {
        // Nothing is reduced before the last pass: the gradient stays local
        // (an early allreduce would change it within this pause).
        const auto local = net->fc1->weight.grad().clone();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!::torch::equal(local, net->fc1->weight.grad())) reducedEarly = true;
      }
    }
    dopt.step();
    results[ctx.rank()] = net;
  });
  EXPECT_FALSE(reducedEarly.load());
  for (int r = 0; r < n; ++r)
    expectClose(results[r], ref, 1e-5, "rank " + std::to_string(r));
}

TEST(DistributedOptimizer, ParameterUnusedOnOneRankDoesNotHang) {
  const int n = 2;
  Net initial = makeNet(7, /*extra=*/true);
  std::vector<Net> results(n, Net(nullptr));
  std::vector<::torch::Tensor> sideGrad(n);
  withContexts(n, [&](Context& ctx) {
    Net net = Net(8, true);
    copyParameters(initial, net);
    ::torch::optim::SGD opt(net->parameters(), 0.1);
    DistributedOptimizer dopt(opt, net->named_parameters(), share(ctx));
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = batch(s, ctx.rank());
      dopt.zeroGrad();
      // Only rank 0 uses the side layer.
      ::torch::mse_loss(net->forward(x, ctx.rank() == 0), y).backward();
      dopt.synchronize();
      sideGrad[ctx.rank()] = net->side->weight.grad().clone();
      dopt.step();
    }
    results[ctx.rank()] = net;
  });
  EXPECT_TRUE(::torch::equal(sideGrad[0], sideGrad[1]));
  EXPECT_GT(sideGrad[0].abs().sum().item<double>(), 0.0);
  expectClose(results[0], results[1], 0, "rank 1 vs rank 0");
}

TEST(DistributedOptimizer, NonContiguousGradientAndSum) {
  // A parameter used transposed gets a gradient that may not be
  // contiguous; with kSum the ranks' gradients add up.
  const int n = 2;
  std::vector<::torch::Tensor> grads(n);
  withContexts(n, [&](Context& ctx) {
    auto w = ::torch::ones({3, 4}, ::torch::requires_grad());
    ::torch::optim::SGD opt({w}, 0.0);
    DistributedOptimizerOptions o;
    o.op = ReduceOp::kSum;
    DistributedOptimizer dopt(opt, NamedTensors{{"w", w}}, share(ctx), o);
    w.mutable_grad() =
        ::torch::full({4, 3}, double(ctx.rank() + 1)).t();  // non-contiguous
    ASSERT_FALSE(w.grad().is_contiguous());
    dopt.synchronize();
    grads[ctx.rank()] = w.grad().clone();
  });
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(::torch::equal(grads[r], ::torch::full({3, 4}, 3.0)));
}

TEST(DistributedOptimizer, MismatchedModelsFailNamingTheParameter) {
  std::vector<std::string> errors(2);
  withContexts(2, [&](Context& ctx) {
    ::torch::manual_seed(1);
    Net net = Net(ctx.rank() == 1 ? 9 : 8);  // fc1: [8, 4] vs [9, 4]
    ::torch::optim::SGD opt(net->parameters(), 0.1);
    try {
      DistributedOptimizer dopt(opt, net->named_parameters(), share(ctx));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      errors[ctx.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("'fc1.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("[8, 4]"), std::string::npos) << e;
    EXPECT_NE(e.find("[9, 4]"), std::string::npos) << e;
  }
  withContexts(2, [&](Context& ctx) {
    Net net = Net(8, ctx.rank() == 1);  // rank 1 has side.weight, side.bias
    ::torch::optim::SGD opt(net->parameters(), 0.1);
    try {
      DistributedOptimizer dopt(opt, net->named_parameters(), share(ctx));
      errors[ctx.rank()] = "(no error)";
    } catch (const Error& e) {
      errors[ctx.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("'side.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("missing on rank 0"), std::string::npos) << e;
  }
}

TEST(BroadcastParameters, MakesRanksEqualToRoot) {
  const int n = 3, root = 1;
  std::vector<Net> initial;
  for (int r = 0; r < n; ++r) initial.push_back(makeNet(100 + r));
  std::vector<Net> results(n, Net(nullptr));
  withContexts(n, [&](Context& ctx) {
    Net net = Net(8);
    copyParameters(initial[ctx.rank()], net);
    broadcastParameters(ctx, net->named_parameters(), root);
    results[ctx.rank()] = net;
  });
  for (int r = 0; r < n; ++r)
    expectClose(results[r], initial[root], 0, "rank " + std::to_string(r));
  // The ranks really started different.
  EXPECT_FALSE(::torch::equal(initial[0]->fc1->weight, initial[1]->fc1->weight));
}

TEST(BroadcastOptimizerState, MomentumAndLearningRateFollowRoot) {
  const int n = 2;
  std::vector<std::vector<::torch::Tensor>> buffers(n);
  std::vector<double> lrs(n);
  withContexts(n, [&](Context& ctx) {
    Net net = makeNet(3);
    // Local steps on different data: the momentum buffers differ.
    ::torch::optim::SGD opt(
        net->parameters(),
        ::torch::optim::SGDOptions(0.1 * (ctx.rank() + 1)).momentum(0.9));
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = batch(s, ctx.rank());
      opt.zero_grad();
      ::torch::mse_loss(net->forward(x), y).backward();
      opt.step();
    }
    broadcastParameters(ctx, net->named_parameters(), 0);
    broadcastOptimizerState(ctx, opt, 0);
    lrs[ctx.rank()] = opt.param_groups()[0].options().get_lr();
    for (auto& p : net->parameters()) {
      auto& s = static_cast<::torch::optim::SGDParamState&>(
          *opt.state().at(optimizerStateKey(opt, p)));
      buffers[ctx.rank()].push_back(s.momentum_buffer().clone());
    }
  });
  EXPECT_DOUBLE_EQ(lrs[0], 0.1);
  EXPECT_DOUBLE_EQ(lrs[1], 0.1);
  ASSERT_EQ(buffers[0].size(), buffers[1].size());
  for (size_t i = 0; i < buffers[0].size(); ++i) {
    EXPECT_TRUE(::torch::equal(buffers[0][i], buffers[1][i])) << "parameter " << i;
  }
}

TEST(AllreduceMetric, AveragesAndSums) {
  const int n = 3;
  std::vector<double> avg(n), sum(n);
  withContexts(n, [&](Context& ctx) {
    avg[ctx.rank()] = allreduceMetric(ctx, ctx.rank() + 1.0, "loss");
    sum[ctx.rank()] = allreduceMetric(ctx, ctx.rank() + 1.0, "count", ReduceOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_DOUBLE_EQ(avg[r], 2.0);
    EXPECT_DOUBLE_EQ(sum[r], 6.0);
  }
}

// One LARS step by hand: w = [3, 4] (norm 5), g = [0.6, 0.8] (norm 1),
// lr 0.1, eta 0.001, beta 0.01, m 0.9:
//   trust = 0.001 * 5 / (1 + 0.01 * 5) = 0.0047619...
//   v1 = 0.1 * trust * (g + 0.01 w) = 0.1 * trust * [0.63, 0.84]
//   w1 = w - v1
// Second step with the same g: v2 = 0.9 v1 + 0.1 trust2 (g + 0.01 w1).
// A zero bias takes the plain step (trust 1).
TEST(Lars, StepsMatchTheHandComputation) {
  auto w =
      ::torch::tensor({3.0, 4.0}, ::torch::dtype(::torch::kFloat64).requires_grad(true));
  auto b = ::torch::zeros({2}, ::torch::dtype(::torch::kFloat64).requires_grad(true));
  LarsOptions o(0.1);
  o.momentum(0.9).weightDecay(0.01).trustCoefficient(0.001).eps(0);
  Lars lars({w, b}, o);
  const double g[2] = {0.6, 0.8};
  w.mutable_grad() = ::torch::tensor({g[0], g[1]}, ::torch::kFloat64);
  b.mutable_grad() = ::torch::tensor({1.0, -2.0}, ::torch::kFloat64);
  lars.step();
  const double trust1 = 0.001 * 5 / (1 + 0.01 * 5);
  const double v1[2] = {0.1 * trust1 * (0.6 + 0.03), 0.1 * trust1 * (0.8 + 0.04)};
  const double w1[2] = {3 - v1[0], 4 - v1[1]};
  EXPECT_NEAR(w[0].item<double>(), w1[0], 1e-12);
  EXPECT_NEAR(w[1].item<double>(), w1[1], 1e-12);
  EXPECT_NEAR(b[0].item<double>(), -0.1, 1e-12);  // trust 1: lr * g
  EXPECT_NEAR(b[1].item<double>(), 0.2, 1e-12);
  lars.step();
  const double norm1 = std::sqrt(w1[0] * w1[0] + w1[1] * w1[1]);
  const double trust2 = 0.001 * norm1 / (1 + 0.01 * norm1);
  for (int i = 0; i < 2; ++i) {
    const double v2 = 0.9 * v1[i] + 0.1 * trust2 * (g[i] + 0.01 * w1[i]);
    EXPECT_NEAR(w[i].item<double>(), w1[i] - v2, 1e-12) << i;
  }
  EXPECT_DOUBLE_EQ(Lars::trustRatio(0, 1, o), 1.0);
  EXPECT_DOUBLE_EQ(Lars::trustRatio(2, 0, o), 1.0);
}

TEST(Lars, SaveAndLoadKeepMomentum) {
  auto w =
      ::torch::tensor({1.0, 2.0}, ::torch::dtype(::torch::kFloat64).requires_grad(true));
  Lars a({w}, LarsOptions(0.5));
  w.mutable_grad() = ::torch::tensor({0.1, 0.1}, ::torch::kFloat64);
  a.step();
  ::torch::serialize::OutputArchive out;
  a.save(out);
  std::string bytes;
  out.save_to([&](const void* d, size_t n) {
    bytes.append(static_cast<const char*>(d), n);
    return n;
  });
  Lars b({w}, LarsOptions(0.5));
  ::torch::serialize::InputArchive in;
  in.load_from(bytes.data(), bytes.size());
  b.load(in);
  auto key = optimizerStateKey(a, w);
  auto& sa = static_cast<LarsParamState&>(*a.state().at(key));
  auto& sb = static_cast<LarsParamState&>(*b.state().at(key));
  EXPECT_TRUE(::torch::equal(sa.momentumBuffer(), sb.momentumBuffer()));
}

// Where a request's tensor lives (device_memory.h): a CPU tensor stays a
// host request; a device kolo does not take is refused naming the
// operation and the device. (CUDA tensors: tests/torch/cuda_check.cc on a
// GPU.)
TEST(DeviceRequest, CpuStaysHostAndOtherDevicesAreRefusedByName) {
  runtime::OpRequest r;
  r.spec.onDevice = true;  // cleared for a CPU tensor
  deviceRequest(r, ::torch::ones({3}), "grad/w");
  EXPECT_FALSE(r.spec.onDevice);
  EXPECT_EQ(r.device, nullptr);
  try {
    deviceRequest(r, ::torch::ones({3}, ::torch::TensorOptions().device(::torch::kMeta)),
                  "DistributedOptimizer 'grad/w': allreduce");
    FAIL() << "a meta tensor was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(
                  "DistributedOptimizer 'grad/w': allreduce: tensor is on meta"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(r.spec.onDevice);
}

}  // namespace
}  // namespace kolo::torch
