// A libtorch job stopped and resumed from a checkpoint ends bit for bit
// where an uninterrupted job ends (the C++ counterpart of
// tests/python/checkpoint_resume.py), on 2 ranks with KOLO_DETERMINISTIC=1.
//
// The training uses everything a checkpoint must carry: a model with
// dropout and noise drawn from torch's default generator (each rank's
// generator state), an ElasticSampler that shuffles (its position in the
// epoch), SGD with momentum (the optimizer's state), a learning rate
// multiplied by 0.7 every 5 steps (held only by the optimizer), and the
// step and epoch values.
//
//   checkpoint_resume --steps N --out F                 N steps, parameters to F
//   checkpoint_resume --steps N --stop-at K --ckpt P    K steps, save to P, exit
//   checkpoint_resume --steps N --resume P --out F      load P, go on to N steps
//
// tests/python/checkpoint_resume.sh runs the three and compares the files.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "frameworks/torch/checkpoint.h"
#include "frameworks/torch/distributed_optimizer.h"

namespace {

struct Args {
  int steps = 0;
  int stopAt = 0;
  std::string ckpt, resume, out;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--steps") {
      a.steps = std::atoi(value.c_str());
    } else if (flag == "--stop-at") {
      a.stopAt = std::atoi(value.c_str());
    } else if (flag == "--ckpt") {
      a.ckpt = value;
    } else if (flag == "--resume") {
      a.resume = value;
    } else if (flag == "--out") {
      a.out = value;
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      std::exit(2);
    }
  }
  return a;
}

int run(const Args& a) {
  constexpr int64_t kBatch = 8;
  constexpr int64_t kSamples = 240;
  ::torch::set_num_threads(1);
  kolo::torch::ElasticState state(kolo::torch::Context::fromEnvironment());
  const int rank = state.context().rank();
  ::torch::manual_seed(7);
  const auto data = ::torch::randn({kSamples, 10});
  const auto labels = ::torch::randint(0, 3, {kSamples});
  ::torch::manual_seed(1234);
  ::torch::nn::Sequential model(::torch::nn::Linear(10, 16), ::torch::nn::ReLU(),
                                ::torch::nn::Dropout(0.3), ::torch::nn::Linear(16, 3));
  ::torch::manual_seed(100 + rank);  // dropout and noise differ per rank
  ::torch::optim::SGD sgd(model->parameters(),
                          ::torch::optim::SGDOptions(0.05).momentum(0.9));
  kolo::train::ElasticSampler sampler(kSamples, rank, state.context().size(), true, 3);
  state.addModel("model", model.ptr());
  state.addOptimizer("optimizer", sgd);
  state.addSampler("sampler", sampler);
  state.addValue("epoch", 0);
  state.addValue("step", 0);
  if (!a.resume.empty()) {
    kolo::torch::checkpoint::load(a.resume, state);
    std::cout << "rank " << rank << " resumed at step " << state.value("step")
              << " epoch " << state.value("epoch") << std::endl;
  }
  kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters(),
                                        state.contextPtr());
  const int64_t until = a.stopAt > 0 ? a.stopAt : a.steps;
  while (state.value("step") < until) {
    const std::vector<int64_t> indices = sampler.indices();
    for (size_t b = 0; b < indices.size() && state.value("step") < until; b += kBatch) {
      const size_t end = std::min(indices.size(), b + kBatch);
      const auto idx = ::torch::tensor(
          std::vector<int64_t>(indices.begin() + b, indices.begin() + end));
      const auto x = data.index_select(0, idx) + ::torch::rand({1}) * 0.01;
      opt.zeroGrad();
      ::torch::nn::functional::cross_entropy(model->forward(x),
                                             labels.index_select(0, idx))
          .backward();
      opt.step();
      if (++state.value("step") % 5 == 0) {
        for (auto& group : sgd.param_groups()) {
          group.options().set_lr(group.options().get_lr() * 0.7);
        }
      }
      sampler.recordBatch(static_cast<int64_t>(end - b));
    }
    if (sampler.processed() >= kSamples) {
      ++state.value("epoch");
      sampler.setEpoch(state.value("epoch"));
    }
  }
  if (a.stopAt > 0) {
    kolo::torch::checkpoint::save(a.ckpt, state);
    std::cout << "rank " << rank << " saved at step " << state.value("step") << std::endl;
  }
  if (!a.out.empty() && rank == 0) {
    std::ofstream out(a.out);
    for (const auto& p : model->parameters()) {
      const auto flat = p.detach().reshape(-1).contiguous();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        char text[64];
        std::snprintf(text, sizeof(text), "%a ",
                      static_cast<double>(flat[i].item<float>()));
        out << text;
      }
    }
    out << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "checkpoint_resume: " << e.what() << std::endl;
    return 1;
  }
}
