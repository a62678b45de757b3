// The optimizers a parameter server applies to its shard, and the EASGD
// elastic exchange (docs/parameter_server.md, "Modes").
//
// Contract
// - The rules are PyTorch 1.13's single-tensor implementations, element by
//   element in float32 in the same order of operations, so a server's step
//   equals torch.optim's step on the same gradient up to float rounding.
// - UpdateRule owns the optimizer state of `elements` parameters (momentum
//   buffers, moments); apply() takes the learning rate of this step (a
//   scheduler's current value). Not thread-safe: one shard, one caller.
// - Errors: an unknown optimizer name, or hyper-parameters torch rejects
//   (negative lr, momentum, weight decay, eps; betas outside [0, 1);
//   Nesterov without momentum or with dampening), throw
//   Error(kInvalidArgument) naming the value and what is accepted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kolo::ps {

enum class OptimizerKind : uint8_t { kSgd, kAdam, kAdamW, kRmsprop };

// "sgd", "adam", "adamw", "rmsprop" (case-insensitive, also torch's class
// names "SGD", "Adam", "AdamW", "RMSprop").
OptimizerKind parseOptimizerKind(const std::string& name);
const char* optimizerKindName(OptimizerKind k);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.01f;
  float weightDecay = 0.0f;
  // SGD; RMSprop uses momentum too.
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  // Adam, AdamW.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;  // also RMSprop's
  // RMSprop.
  float alpha = 0.99f;
  bool centered = false;
};

// Throws Error(kInvalidArgument) for values torch rejects.
void validate(const OptimizerConfig& c);

class UpdateRule {
 public:
  UpdateRule(const OptimizerConfig& config, size_t elements);

  // param -= the optimizer's step for `grad`, with learning rate `lr`.
  void apply(float* param, const float* grad, float lr);

  uint64_t steps() const { return steps_; }
  size_t elements() const { return elements_; }
  const OptimizerConfig& config() const { return config_; }

  // The optimizer state, for checkpoints (src/ps/checkpoint.h): the step
  // count and the buffers; a buffer the rule does not use is empty.
  struct State {
    uint64_t steps = 0;
    std::vector<float> a, b, c;
  };
  State state() const { return {steps_, a_, b_, c_}; }
  // Takes a saved state back; each buffer must have the size this rule's
  // would have (Error(kMismatch) naming the buffer and both sizes).
  void restore(State s);

 private:
  void applySgd(float* p, const float* g, float lr);
  void applyAdam(float* p, const float* g, float lr);
  void applyRmsprop(float* p, const float* g, float lr);

  OptimizerConfig config_;
  size_t elements_;
  uint64_t steps_ = 0;
  std::vector<float> a_;  // SGD momentum buffer, Adam exp_avg, RMSprop square_avg
  std::vector<float> b_;  // Adam exp_avg_sq, RMSprop momentum buffer
  std::vector<float> c_;  // RMSprop grad_avg (centered)
};

// One elastic exchange of EASGD (Zhang, Choromanska and LeCun 2015) on the
// center's side: diff = alpha * (x - center); center += diff. The worker
// then does x -= diff. alpha must be in (0, 1] (kInvalidArgument).
void easgdExchange(float* center, const float* x, float* diff, size_t n, float alpha);

}  // namespace kolo::ps
