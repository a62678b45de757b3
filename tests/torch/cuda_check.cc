// kolo's libtorch integration on CUDA tensors, run by scripts/gpu-check.sh
// under kolorun with 2 and 3 ranks sharing one GPU (docs/gpu.md):
//
// - DistributedOptimizer (average, sum, average with a predivide factor)
//   on float32, float64, float16 and bfloat16 parameters on the GPU, one of
//   them unused: after step() every parameter equals the same run's on CPU
//   parameters (element by element, bit for bit: the same reduction runs
//   on the same bytes) and the value computed here from every rank's
//   gradient;
// - broadcastParameters of CUDA tensors of every dtype (root's values on
//   every rank) and broadcastOptimizerState of an SGD with momentum on the
//   GPU.
//
// Prints "torch_cuda_check: ... passed" on rank 0 and exits 0; a failed
// check prints what differs (rank, tensor, index, both values) and exits 1.
// Without a CUDA device for libtorch it prints "torch_cuda_check: SKIP ..."
// and exits 0.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "frameworks/torch/context.h"
#include "frameworks/torch/distributed_optimizer.h"

namespace {

int me = 0;
int checks = 0;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "torch_cuda_check: FAIL on rank %d: %s\n", me, what.c_str());
  std::exit(1);
}

void expectEqual(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  at::Tensor g = got.detach().cpu().contiguous(), w = want.detach().cpu().contiguous();
  if (g.scalar_type() != w.scalar_type() || g.sizes() != w.sizes()) {
    fail(what + ": type or shape differs");
  }
  if (!g.equal(w)) {
    at::Tensor diff = (g.to(at::kDouble) != w.to(at::kDouble)).nonzero();
    const int64_t i = diff.size(0) ? diff[0][0].item<int64_t>() : -1;
    fail(what + ": differs at flat index " + std::to_string(i) + ": " +
         std::to_string(g.reshape(-1)[i].item<double>()) + " vs " +
         std::to_string(w.reshape(-1)[i].item<double>()));
  }
  ++checks;
}

// A rank's gradient of parameter `k`: small integers, exact in every dtype.
at::Tensor rankGradient(int rank, int k, int64_t n, at::ScalarType type) {
  return (torch::arange(n, torch::kFloat64).remainder(5) + rank + k).to(type);
}

struct Run {
  std::vector<at::Tensor> params;  // after one step
};

// One step of SGD(lr 1) through DistributedOptimizer on `device`: loss =
// sum_k sum(p_k * g_k) (p_2 unused), so p_k.grad() = g_k on each rank.
Run step(const std::shared_ptr<kolo::torch::Context>& ctx, const c10::Device& device,
         at::ScalarType type, kolo::torch::DistributedOptimizerOptions options,
         const std::string& tag) {
  const int64_t sizes[] = {37, 1000, 3};
  kolo::torch::NamedTensors named;
  std::vector<at::Tensor> params;
  for (int k = 0; k < 3; ++k) {
    at::Tensor p = (torch::ones({sizes[k]}, torch::kFloat64) * (k + 1))
                       .to(type)
                       .to(device)
                       .set_requires_grad(true);
    params.push_back(p);
    named.emplace_back(tag + ".p" + std::to_string(k), p);
  }
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(1.0));
  kolo::torch::DistributedOptimizer opt(sgd, named, ctx, options);
  opt.zeroGrad();
  at::Tensor loss =
      torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  for (int k = 0; k < 2; ++k) {
    loss = loss + (params[k] * rankGradient(ctx->rank(), k, sizes[k], type).to(device))
                      .to(torch::kFloat64)
                      .sum();
  }
  loss.backward();
  opt.step();
  return Run{params};
}

void optimizerChecks(const std::shared_ptr<kolo::torch::Context>& ctx) {
  const c10::Device cuda(c10::DeviceType::CUDA, 0), cpu(c10::DeviceType::CPU);
  const int n = ctx->size();
  const at::ScalarType types[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  const char* names[] = {"float32", "float64", "float16", "bfloat16"};
  for (int t = 0; t < 4; ++t) {
    for (int mode = 0; mode < 3; ++mode) {
      kolo::torch::DistributedOptimizerOptions o;
      o.op = mode == 1 ? kolo::ReduceOp::kSum : kolo::ReduceOp::kAverage;
      if (mode == 2) o.gradientPredivideFactor = 2.0;
      const std::string tag = std::string(names[t]) + ".mode" + std::to_string(mode);
      Run onGpu = step(ctx, cuda, types[t], o, "gpu." + tag);
      Run onCpu = step(ctx, cpu, types[t], o, "cpu." + tag);
      for (int k = 0; k < 3; ++k) {
        expectEqual(onGpu.params[k], onCpu.params[k], tag + " p" + std::to_string(k));
        if (!onGpu.params[k].is_cuda()) fail(tag + ": parameter left the GPU");
      }
      // p0 against the value computed here: (k+1) - reduce_r(g_r).
      at::Tensor sum = torch::zeros({37}, torch::kFloat64);
      for (int r = 0; r < n; ++r) sum += rankGradient(r, 0, 37, at::kDouble);
      at::Tensor reduced = mode == 1 ? sum : sum / n;
      at::Tensor want = (torch::ones({37}, torch::kFloat64) - reduced).to(types[t]);
      // The reduction rounds in the parameter's dtype; compare in float64
      // within its precision.
      if (!torch::allclose(onGpu.params[0].cpu().to(at::kDouble), want.to(at::kDouble),
                           types[t] == at::kDouble ? 1e-12 : 1e-2, 1e-2)) {
        fail(tag + ": p0 is not 1 - the reduced gradient");
      }
      ++checks;
      // The unused parameter: a zero gradient, unchanged.
      expectEqual(onGpu.params[2], (torch::ones({3}, torch::kFloat64) * 3).to(types[t]),
                  tag + " unused p2");
    }
  }
}

void broadcastChecks(kolo::torch::Context& ctx) {
  const c10::Device cuda(c10::DeviceType::CUDA, 0);
  const int root = ctx.size() - 1;
  const at::ScalarType types[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                  at::kInt,   at::kLong,   at::kByte};
  kolo::torch::NamedTensors named;
  std::vector<at::Tensor> want;
  for (int t = 0; t < 7; ++t) {
    at::Tensor mine = (torch::arange(50, torch::kFloat64) + ctx.rank()).to(types[t]);
    want.push_back((torch::arange(50, torch::kFloat64) + root).to(types[t]));
    // A non-contiguous one too: broadcast through a contiguous copy.
    at::Tensor onGpu = t == 0 ? mine.reshape({5, 10}).to(cuda).t() : mine.to(cuda);
    if (t == 0) want.back() = want.back().reshape({5, 10}).t();
    named.emplace_back("bcast.t" + std::to_string(t), onGpu);
  }
  kolo::torch::broadcastParameters(ctx, named, root);
  for (int t = 0; t < 7; ++t) expectEqual(named[t].second, want[t], named[t].first);

  // Optimizer state: root's momentum buffers (different per rank before).
  at::Tensor p =
      torch::ones({64}, torch::TensorOptions().device(cuda)).set_requires_grad(true);
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.1).momentum(0.9));
  p.mutable_grad() =
      torch::full({64}, float(ctx.rank() + 1), torch::TensorOptions().device(cuda));
  sgd.step();
  kolo::torch::broadcastOptimizerState(ctx, sgd, root);
  auto& state = static_cast<torch::optim::SGDParamState&>(
      *sgd.state().at(kolo::torch::optimizerStateKey(sgd, p)));
  expectEqual(state.momentum_buffer(), torch::full({64}, float(root + 1)), "momentum");
  if (!state.momentum_buffer().is_cuda()) fail("momentum buffer left the GPU");
}

}  // namespace

int main() {
  try {
    auto ctx = kolo::torch::Context::fromEnvironment();
    me = ctx->rank();
    if (!torch::cuda::is_available()) {
      if (me == 0) std::printf("torch_cuda_check: SKIP no CUDA device for libtorch\n");
      return 0;
    }
    optimizerChecks(ctx);
    broadcastChecks(*ctx);
    if (me == 0) {
      std::printf(
          "torch_cuda_check: %d checks passed on each of %d ranks (DistributedOptimizer "
          "average/sum/predivide x float32/float64/float16/bfloat16 against CPU; "
          "broadcastParameters x 7 dtypes; broadcastOptimizerState)\n",
          checks, ctx->size());
    }
    return 0;
  } catch (const std::exception& e) {
    fail(e.what());
  }
}
