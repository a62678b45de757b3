// Each rule follows torch/optim/<name>.py's _single_tensor_<name> of
// PyTorch 1.13; the comments name the tensor each buffer stands for.
#include "ps/update_rule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "common/check.h"

namespace kolo::ps {

OptimizerKind parseOptimizerKind(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (lower == "sgd") return OptimizerKind::kSgd;
  if (lower == "adam") return OptimizerKind::kAdam;
  if (lower == "adamw") return OptimizerKind::kAdamW;
  if (lower == "rmsprop") return OptimizerKind::kRmsprop;
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "optimizer '" << name
                           << "' is not supported by the parameter servers (supported: "
                              "SGD, Adam, AdamW, RMSprop)");
}

const char* optimizerKindName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd: return "SGD";
    case OptimizerKind::kAdam: return "Adam";
    case OptimizerKind::kAdamW: return "AdamW";
    case OptimizerKind::kRmsprop: return "RMSprop";
  }
  return "?";
}

void validate(const OptimizerConfig& c) {
  auto nonNegative = [&](const char* what, float v) {
    if (!(v >= 0.0f)) {
      KOLO_THROW(ErrorCode::kInvalidArgument, optimizerKindName(c.kind)
                                                  << ": " << what << "=" << v
                                                  << " (expected a value >= 0)");
    }
  };
  nonNegative("lr", c.lr);
  nonNegative("weight_decay", c.weightDecay);
  nonNegative("momentum", c.momentum);
  nonNegative("eps", c.eps);
  nonNegative("alpha", c.alpha);
  auto unit = [&](const char* what, float v) {
    if (!(v >= 0.0f && v < 1.0f)) {
      KOLO_THROW(ErrorCode::kInvalidArgument, optimizerKindName(c.kind)
                                                  << ": " << what << "=" << v
                                                  << " (expected 0 <= value < 1)");
    }
  };
  if (c.kind == OptimizerKind::kAdam || c.kind == OptimizerKind::kAdamW) {
    unit("betas[0]", c.beta1);
    unit("betas[1]", c.beta2);
  }
  if (c.kind == OptimizerKind::kSgd && c.nesterov &&
      (c.momentum <= 0.0f || c.dampening != 0.0f)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "SGD: nesterov needs momentum > 0 and dampening = 0 (momentum="
                   << c.momentum << ", dampening=" << c.dampening << ")");
  }
}

UpdateRule::UpdateRule(const OptimizerConfig& config, size_t elements)
    : config_(config), elements_(elements) {
  validate(config_);
  switch (config_.kind) {
    case OptimizerKind::kSgd:
      if (config_.momentum != 0.0f) a_.assign(elements, 0.0f);
      break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      a_.assign(elements, 0.0f);
      b_.assign(elements, 0.0f);
      break;
    case OptimizerKind::kRmsprop:
      a_.assign(elements, 0.0f);
      if (config_.momentum > 0.0f) b_.assign(elements, 0.0f);
      if (config_.centered) c_.assign(elements, 0.0f);
      break;
  }
}

void UpdateRule::restore(State s) {
  const std::vector<float>* mine[] = {&a_, &b_, &c_};
  const std::vector<float>* theirs[] = {&s.a, &s.b, &s.c};
  for (int k = 0; k < 3; ++k) {
    if (mine[k]->size() != theirs[k]->size()) {
      KOLO_THROW(ErrorCode::kMismatch,
                 optimizerKindName(config_.kind)
                     << " state buffer " << k << ": " << theirs[k]->size()
                     << " elements saved, expected " << mine[k]->size());
    }
  }
  steps_ = s.steps;
  a_ = std::move(s.a);
  b_ = std::move(s.b);
  c_ = std::move(s.c);
}

void UpdateRule::apply(float* param, const float* grad, float lr) {
  ++steps_;
  switch (config_.kind) {
    case OptimizerKind::kSgd: applySgd(param, grad, lr); break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: applyAdam(param, grad, lr); break;
    case OptimizerKind::kRmsprop: applyRmsprop(param, grad, lr); break;
  }
}

// d_p = g + wd * p; buf = d_p on the first step, else
// momentum * buf + (1 - dampening) * d_p; d_p = nesterov ? d_p + momentum *
// buf : buf; p -= lr * d_p.
void UpdateRule::applySgd(float* p, const float* g, float lr) {
  const OptimizerConfig& c = config_;
  const bool first = steps_ == 1;
  for (size_t i = 0; i < elements_; ++i) {
    float d = c.weightDecay != 0.0f ? g[i] + c.weightDecay * p[i] : g[i];
    if (c.momentum != 0.0f) {
      float& buf = a_[i];
      buf = first ? d : buf * c.momentum + (1.0f - c.dampening) * d;
      d = c.nesterov ? d + c.momentum * buf : buf;
    }
    p[i] += -lr * d;
  }
}

// Adam: g += wd * p. AdamW: p *= 1 - lr * wd. Then exp_avg (a_) and
// exp_avg_sq (b_) move towards g and g^2; with the bias corrections
// bc1 = 1 - beta1^t and bc2 = 1 - beta2^t:
// p -= (lr / bc1) * exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps).
void UpdateRule::applyAdam(float* p, const float* g, float lr) {
  const OptimizerConfig& c = config_;
  const bool decoupled = c.kind == OptimizerKind::kAdamW;
  const double t = static_cast<double>(steps_);
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), t);
  const float stepSize = static_cast<float>(lr / bc1);
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  for (size_t i = 0; i < elements_; ++i) {
    float grad = g[i];
    if (decoupled) {
      p[i] *= 1.0f - lr * c.weightDecay;
    } else if (c.weightDecay != 0.0f) {
      grad = grad + c.weightDecay * p[i];
    }
    float& m = a_[i];
    float& v = b_[i];
    m = m * c.beta1 + (1.0f - c.beta1) * grad;
    v = v * c.beta2 + (1.0f - c.beta2) * grad * grad;
    const float denom = std::sqrt(v) / bc2Sqrt + c.eps;
    p[i] += -stepSize * (m / denom);
  }
}

// g += wd * p; square_avg (a_) = alpha * square_avg + (1 - alpha) * g^2;
// centered: grad_avg (c_) likewise with g, avg = sqrt(square_avg -
// grad_avg^2) + eps, else avg = sqrt(square_avg) + eps; with momentum:
// buf (b_) = momentum * buf + g / avg, p -= lr * buf; else p -= lr * g / avg.
void UpdateRule::applyRmsprop(float* p, const float* g, float lr) {
  const OptimizerConfig& c = config_;
  for (size_t i = 0; i < elements_; ++i) {
    const float grad = c.weightDecay != 0.0f ? g[i] + c.weightDecay * p[i] : g[i];
    float& sq = a_[i];
    sq = sq * c.alpha + (1.0f - c.alpha) * grad * grad;
    float avg;
    if (c.centered) {
      float& ga = c_[i];
      ga = ga * c.alpha + (1.0f - c.alpha) * grad;
      avg = std::sqrt(sq - ga * ga) + c.eps;
    } else {
      avg = std::sqrt(sq) + c.eps;
    }
    if (c.momentum > 0.0f) {
      float& buf = b_[i];
      buf = buf * c.momentum + grad / avg;
      p[i] += -lr * buf;
    } else {
      p[i] += -lr * (grad / avg);
    }
  }
}

void easgdExchange(float* center, const float* x, float* diff, size_t n, float alpha) {
  if (!(alpha > 0.0f && alpha <= 1.0f)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "easgd_alpha=" << alpha << " (expected 0 < alpha <= 1)");
  }
  for (size_t i = 0; i < n; ++i) {
    diff[i] = alpha * (x[i] - center[i]);
    center[i] += diff[i];
  }
}

}  // namespace kolo::ps
