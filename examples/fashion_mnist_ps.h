// The parameter-server modes of examples/fashion_mnist.cpp (--mode sync-ps,
// downpour, easgd; docs/parameter_server.md) through kolo's C API
// (<kolo/kolo.h>, <kolo/ps.h>), the way kolo.torch.ps drives them.
//
// Contract
// - PsWorld() calls kolo_init: on a server rank it serves and ends the
//   process (exit 0 once every worker has said goodbye), so it returns on
//   workers only; rank() and size() then count the workers. The destructor
//   calls kolo_finalize (the workers' goodbye to the servers).
// - PsOptimizer wraps a libtorch optimizer over float32 CPU parameters.
//   sync-ps and downpour: step() sends the gradients; the servers apply the
//   wrapped optimizer's rule (SGD with momentum, Adam) and the worker pulls
//   as the mode says. easgd: step() runs the wrapped optimizer on the
//   worker, then the elastic exchange with the center every period steps.
// - Every failure throws std::runtime_error with kolo_last_error()'s text.
#pragma once

#include <kolo/kolo.h>
#include <kolo/ps.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace fmnist {

inline void check(int rc, const char* what) {
  if (rc != KOLO_OK) {
    throw std::runtime_error(std::string(what) + " failed: " + kolo_last_error());
  }
}

struct PsSettings {
  std::string mode;       // "sync-ps", "downpour", "easgd"
  std::string optimizer;  // "sgd" (momentum 0.9), "adam"
  int stalenessBound = 4;
  float easgdAlpha = 0.5f;
  int easgdPeriod = 4;
};

class PsWorld {
 public:
  PsWorld() { check(kolo_init(), "kolo_init"); }
  ~PsWorld() { kolo_finalize(); }
  PsWorld(const PsWorld&) = delete;
  PsWorld& operator=(const PsWorld&) = delete;
  int rank() const { return kolo_rank(); }
  int size() const { return kolo_size(); }
  // The workers' allreduce of one double (a metric).
  double allreduce(double value, kolo_op op) const {
    double out = 0;
    check(kolo_allreduce(&value, &out, 1, KOLO_FLOAT64, op), "kolo_allreduce (metric)");
    return out;
  }
};

class PsOptimizer {
 public:
  PsOptimizer(torch::optim::Optimizer& opt, std::vector<torch::Tensor> params,
              const PsSettings& s)
      : opt_(opt), params_(std::move(params)), easgd_(s.mode == "easgd") {
    int servers = 0;
    check(kolo_ps_servers(&servers), "kolo_ps_servers");
    if (servers == 0) {
      throw std::runtime_error("--mode " + s.mode +
                               " needs parameter servers: start the job with kolorun "
                               "--servers S (or KOLO_SERVERS=S)");
    }
    if (s.optimizer != "sgd" && s.optimizer != "adam") {
      throw std::runtime_error("--optimizer " + s.optimizer +
                               " is not supported with --mode " + s.mode +
                               " (the parameter servers take sgd and adam)");
    }
    const double lr = opt.param_groups().at(0).options().get_lr();
    kolo_ps_options o{};
    o.mode = s.mode == "sync-ps" ? "sync" : s.mode.c_str();
    o.optimizer = s.optimizer == "sgd" ? "SGD" : "Adam";
    o.lr = static_cast<float>(lr);
    o.momentum = s.optimizer == "sgd" ? 0.9f : 0.0f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.alpha = 0.99f;
    o.staleness_bound = s.stalenessBound;
    o.easgd_alpha = s.easgdAlpha;
    o.push_period = o.pull_period = 1;
    o.easgd_period = s.easgdPeriod;
    std::vector<uint64_t> counts;
    for (auto& p : params_) {
      if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous() ||
          !p.device().is_cpu())
        throw std::runtime_error(
            "the parameter servers take contiguous float32 CPU tensors");
      counts.push_back(static_cast<uint64_t>(p.numel()));
    }
    torch::NoGradGuard noGrad;
    auto ptrs = pointers();
    check(kolo_ps_start(&o, params_.size(), ptrs.data(), counts.data()), "kolo_ps_start");
  }

  void zeroGrad() { opt_.zero_grad(); }

  void step(double lr) {
    torch::NoGradGuard noGrad;
    auto ptrs = pointers();
    std::vector<const float*> grads;
    std::vector<torch::Tensor> keep;  // contiguous gradients alive during the call
    if (easgd_) {
      opt_.step();
      grads.assign(ptrs.begin(), ptrs.end());  // unused by easgd
    } else {
      for (auto& p : params_) {
        keep.push_back(p.grad().defined() ? p.grad().contiguous() : torch::zeros_like(p));
        grads.push_back(keep.back().data_ptr<float>());
      }
    }
    check(kolo_ps_step(ptrs.data(), grads.data(), static_cast<float>(lr)),
          "kolo_ps_step");
  }

  // The servers' parameters (easgd: the center) into the model.
  void pull() {
    torch::NoGradGuard noGrad;
    auto ptrs = pointers();
    check(kolo_ps_pull(ptrs.data()), "kolo_ps_pull");
  }

  // "server s: version v, u updates, r refused, largest staleness m; ..."
  std::string stats() const {
    std::vector<uint64_t> v(4096);
    size_t n = 0;
    check(kolo_ps_stats(v.data(), v.size(), &n), "kolo_ps_stats");
    int servers = 0;
    check(kolo_ps_servers(&servers), "kolo_ps_servers");
    const size_t per = n / static_cast<size_t>(servers);
    std::string out;
    for (int s = 0; s < servers; ++s) {
      const uint64_t* x = v.data() + s * per;
      out += (s ? "; server " : "server ") + std::to_string(s) + ": version " +
             std::to_string(x[0]) + ", " + std::to_string(x[1]) + " updates, " +
             std::to_string(x[2]) + " refused, largest staleness " + std::to_string(x[3]);
    }
    return out;
  }

 private:
  std::vector<float*> pointers() {
    std::vector<float*> out;
    for (auto& p : params_) out.push_back(p.data_ptr<float>());
    return out;
  }

  torch::optim::Optimizer& opt_;
  std::vector<torch::Tensor> params_;
  bool easgd_;
};

}  // namespace fmnist
