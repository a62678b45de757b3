// Pipeline parallelism for libtorch programs (docs/pipeline.md, the
// libtorch section): a torch::nn::Sequential split into stages, one per
// rank of a communicator, micro-batches' activations flowing forward and
// their gradients back over kolo's point-to-point messages; the schedules
// (pipeline_schedule.h) and checkpointing modes of kolo.torch.pipeline.
//
//   auto world = kolo::Communicator::fromEnvironment();
//   kolo::torch::pipeline::Options o;
//   o.splitPoints = {4};  // layers [0, 4) on rank 0, [4, n) on rank 1
//   o.chunks = 4;
//   o.schedule = "1f1b";
//   kolo::torch::pipeline::Pipeline pipe(model, o, *world);
//   torch::optim::SGD sgd(pipe.module()->parameters(), 0.1);
//   at::Tensor loss = pipe.trainStep(x, lossFn, y);  // defined on the last stage
//   pipe.step(sgd);
//
// Contract
// - Construction is collective over the communicator (world, or a team from
//   Communicator::split so that several pipelines run side by side); every
//   rank passes the same model (same layers) and options. The ranks agree
//   once, at construction: a bad option on any rank (split points outside
//   the model or not increasing, a balance that does not add up, an unknown
//   schedule or checkpoint mode, chunks < 1), or ranks disagreeing on the
//   split, schedule, chunks or checkpoint mode, throws kolo::Error on every
//   rank (kInvalidArgument naming the rank and the value; kMismatch naming
//   both ranks and both values).
// - Stage s is rank s of the communicator and owns layers
//   [bounds()[s], bounds()[s+1]) (module(): a Sequential holding the same
//   layer objects, under their names in the model).
// - trainStep(batch, lossFn, targets): one step of the schedule. The batch
//   (read on the first stage) and the targets (on the last) are split into
//   `chunks` equal micro-batches along dimension 0; the last stage adds
//   lossFn(output, target) / chunks for each; gradients accumulate into the
//   stage's parameters' grad(). Returns the step's loss (the sum of the
//   micro-batches' scaled losses) on the last stage, an undefined tensor
//   elsewhere. step(optimizer) then applies and zeroes them.
// - forward(batch): without gradients; the micro-batches' outputs
//   concatenated on the last stage, undefined elsewhere.
// - Shapes: before its first activation, each stage sends its successor the
//   output's dtype and shape; later activations and gradients are tensors
//   only, and a stage's output must keep that dtype and shape.
// - Checkpointing: "never" keeps each micro-batch's graph until its
//   backward; "always" keeps only the stage's input and recomputes the
//   forward in the backward (the CPU generator's state restored, so
//   dropout draws the same); "except_last" checkpoints every micro-batch
//   but the last.
// - Failures in trainStep/forward (the stage's forward or the loss
//   throwing, an output whose dtype or shape differs from the first one, a
//   batch or targets that do not split) reach every stage: the stage where
//   it happened throws its error, the others kolo::Error(kInvalidArgument)
//   "pipeline stage s (rank r) failed: <its message>". Stages after the
//   failing one learn in the same call, stages before it when they wait for
//   a gradient (in trainStep; in forward, at their next trainStep). The
//   pipeline is then unusable: later calls throw at once. A lost peer or a
//   silent one fails the waiting stage within KOLO_TIMEOUT (kolo::Error).
// - Not thread-safe; the communicator and the model must outlive it.
#pragma once

#include <kolo/communicator.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frameworks/torch/pipeline_links.h"
#include "frameworks/torch/pipeline_schedule.h"

namespace kolo::torch::pipeline {

struct Options {
  // Give one of them: splitPoints (stages - 1 increasing layer indices,
  // 0 < p1 < ... < n) or balance (layers per stage, each >= 1, summing to n).
  std::vector<int64_t> splitPoints;
  std::vector<int64_t> balance;
  int64_t chunks = 1;
  std::string schedule = "gpipe";    // scheduleNames()
  std::string checkpoint = "never";  // "never", "except_last", "always"
};

using LossFn =
    std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

class Pipeline {
 public:
  Pipeline(::torch::nn::Sequential model, const Options& options, Communicator& comm);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  at::Tensor trainStep(const at::Tensor& batch, const LossFn& lossFn,
                       const at::Tensor& targets);
  at::Tensor forward(const at::Tensor& batch);
  // optimizer.step(), then optimizer.zero_grad().
  void step(::torch::optim::Optimizer& optimizer);

  ::torch::nn::Sequential& module() { return module_; }
  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool isFirst() const { return stage_ == 0; }
  bool isLast() const { return stage_ == stages_ - 1; }
  const std::vector<int64_t>& bounds() const { return bounds_; }
  int64_t chunks() const { return options_.chunks; }
  const std::string& schedule() const { return options_.schedule; }
  const std::string& checkpoint() const { return options_.checkpoint; }
  // The most micro-batches whose activations the stage held at once in the
  // last trainStep.
  int64_t peakHeld() const { return peakHeld_; }

 private:
  // What the stage keeps of a micro-batch between its forward and backward.
  struct Held {
    at::Tensor input, output;
    bool recompute = false;
    at::Tensor generatorState;  // recompute: the CPU generator's state
  };
  // One trainStep or forward call.
  struct Step {
    bool grad = true;
    const LossFn* lossFn = nullptr;
    std::vector<at::Tensor> inputs, targets;  // the micro-batches
    std::map<int64_t, Held> held;
    std::vector<at::Tensor> losses, outputs;
  };

  // pipeline.cc: agreement and the public calls.
  void agree(const std::string& error);
  std::vector<at::Tensor> split(const at::Tensor& batch, const char* what) const;
  // Runs `body`; on a failure tells the other stages (see the contract).
  void guarded(const std::function<void()>& body);
  void checkUsable() const;
  // pipeline_stage.cc: one micro-batch, and failures.
  at::Tensor receiveInput(bool grad);
  void forwardOne(Step& step, int64_t m);
  at::Tensor stageForward(const at::Tensor& x);
  void sendOutput(const at::Tensor& y, int64_t m);
  void backwardOne(Step& step, int64_t m);
  at::Tensor recomputed(Held& held);
  bool checkpointed(int64_t m) const;
  void tellNeighbours(const std::string& message);
  [[noreturn]] void failFrom(const Descriptor& notice, int fromStage);
  void notify(int stage, int dataTag, const Descriptor& notice);

  Options options_;
  Communicator& comm_;
  int stage_ = 0, stages_ = 1;
  std::vector<int64_t> bounds_;
  ::torch::nn::Sequential module_;
  std::unique_ptr<Links> links_;
  uint32_t channel_ = 0;
  bool inputKnown_ = false, descriptorSent_ = false;
  at::ScalarType inDtype_ = at::kFloat, outDtype_ = at::kFloat;
  std::vector<int64_t> inShape_, outShape_;
  std::string failed_;  // non-empty: a failure made the pipeline unusable
  int64_t peakHeld_ = 0;
};

}  // namespace kolo::torch::pipeline
