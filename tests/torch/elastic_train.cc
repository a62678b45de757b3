// Elastic training of a libtorch program through a lost rank (the C++
// counterpart of tests/python/elastic_train.py, run by
// tests/python/elastic_run.sh under `kolorun --min-np 2 -np 3`).
//
// Every rank trains a small model with kolo::torch::DistributedOptimizer on
// a synthetic dataset through an ElasticSampler, committing the state every
// 2 steps. The worker named by --victim ends itself with SIGKILL (or, with
// --raise, throws out of main) at step --at of the first world. The others
// must see the failure, roll back to the last commit, re-form a world of 2
// in the same processes and finish the epochs with identical parameters;
// each survivor prints "worker W done: rank R of N, steps S, params H".
// With --rewrite FILE TEXT, worker 0 instead rewrites the hosts file of
// kolorun's --host-discovery-script at step --at: a host comes or goes, and
// the workers re-form through HostsUpdatedInterrupt (or the lost peer).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/elastic_state.h"

namespace {

struct Args {
  int victim = 1;
  int at = 5;
  int epochs = 2;
  int world = 3;
  int samples = 384;
  bool raise = false;
  double stepSleep = 0;     // seconds of pretended compute per step
  std::string rewriteFile;  // instead of a failure, worker 0 writes
  std::string rewriteText;  // this text (\n: a new line) there at step --at
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto text = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto next = [&] { return std::atoi(text().c_str()); };
    if (flag == "--victim") {
      a.victim = next();
    } else if (flag == "--at") {
      a.at = next();
    } else if (flag == "--epochs") {
      a.epochs = next();
    } else if (flag == "--world") {
      a.world = next();
    } else if (flag == "--samples") {
      a.samples = next();
    } else if (flag == "--raise") {
      a.raise = true;
    } else if (flag == "--step-sleep") {
      a.stepSleep = std::atof(text().c_str());
    } else if (flag == "--rewrite") {
      a.rewriteFile = text();
      a.rewriteText = text();
      for (size_t at; (at = a.rewriteText.find("\\n")) != std::string::npos;) {
        a.rewriteText.replace(at, 2, "\n");
      }
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      std::exit(2);
    }
  }
  return a;
}

// FNV-1a of the parameters' bytes, as hex.
std::string digest(::torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters()) {
    const auto c = p.detach().contiguous();
    const auto* bytes = static_cast<const uint8_t*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

int train(const Args& args) {
  constexpr int64_t kBatch = 16;
  const char* workerEnv = std::getenv("KOLO_ELASTIC_WORKER");
  const int worker = workerEnv ? std::atoi(workerEnv) : -1;
  ::torch::set_num_threads(1);
  kolo::torch::ElasticState state(kolo::torch::Context::fromEnvironment());
  ::torch::manual_seed(1);
  const auto data = ::torch::randn({args.samples, 8});
  const auto labels = (data.sum(1) > 0).to(::torch::kLong);
  ::torch::manual_seed(0);
  ::torch::nn::Sequential model(::torch::nn::Linear(8, 16), ::torch::nn::ReLU(),
                                ::torch::nn::Linear(16, 2));
  ::torch::optim::SGD sgd(model->parameters(),
                          ::torch::optim::SGDOptions(0.05 * state.context().size()));
  kolo::train::ElasticSampler sampler(args.samples, state.context().rank(),
                                      state.context().size(), true, 2);
  state.addModel("model", model.ptr());
  state.addOptimizer("optimizer", sgd);
  state.addSampler("sampler", sampler);
  state.addValue("epoch", 0);
  state.addValue("step", 0);
  state.registerResetCallbacks({[&] {
    std::cout << "worker " << worker << " reset: now rank " << state.context().rank()
              << " of " << state.context().size() << ", step " << state.value("step")
              << std::endl;
  }});

  kolo::torch::elastic::run(state, [&] {
    const bool firstWorld = state.context().size() == args.world;
    kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters(),
                                          state.contextPtr());
    while (state.value("epoch") < args.epochs) {
      const std::vector<int64_t> indices = sampler.indices();
      for (size_t b = 0; b + kBatch <= indices.size(); b += kBatch) {
        if (!args.rewriteFile.empty() && firstWorld && worker == 0 &&
            state.value("step") == args.at) {
          std::ofstream(args.rewriteFile) << args.rewriteText << "\n";
          std::cout << "worker 0 rewrote the hosts at step " << state.value("step")
                    << std::endl;
        } else if (args.rewriteFile.empty() && firstWorld && worker == args.victim &&
                   state.value("step") == args.at) {
          if (args.raise) throw std::runtime_error("worker gives up");
          std::cout << "worker " << worker << " kills itself at step "
                    << state.value("step") << std::endl;
          ::kill(::getpid(), SIGKILL);
        }
        if (args.stepSleep > 0) {
          std::this_thread::sleep_for(std::chrono::duration<double>(args.stepSleep));
        }
        const auto idx = ::torch::tensor(
            std::vector<int64_t>(indices.begin() + b, indices.begin() + b + kBatch));
        opt.zeroGrad();
        ::torch::nn::functional::cross_entropy(model->forward(data.index_select(0, idx)),
                                               labels.index_select(0, idx))
            .backward();
        opt.step();
        sampler.recordBatch(kBatch);
        if (++state.value("step") % 2 == 0) state.commit();
      }
      ++state.value("epoch");
      sampler.setEpoch(state.value("epoch"));
      state.commit();
    }
  });
  std::cout << "worker " << worker << " done: rank " << state.context().rank() << " of "
            << state.context().size() << ", steps " << state.value("step") << ", params "
            << digest(*model) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    return train(args);
  } catch (const std::exception& e) {
    std::cerr << "elastic_train: " << e.what() << std::endl;
    return 1;
  }
}
