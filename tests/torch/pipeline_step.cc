// kolo::torch::pipeline on 2 or 4 ranks (kolorun -np 2|4 torch_pipeline_step):
// - exactness: the gradients of a pipelined step (2 stages, and on 4 ranks
//   4 stages plus two 2-stage pipelines side by side on teams {0,1} and
//   {2,3}; GPipe and 1F1B; checkpointing never, except_last, always) equal
//   bit for bit in float64 those of the unpipelined model run over the same
//   micro-batches, at the first step and at a second one (shapes already
//   negotiated); the loss too, and forward() matches the model's output;
// - bad use throws on every rank, without hanging: split points outside
//   the model, ranks disagreeing on the schedule, a stage whose output
//   changes shape at its second micro-batch, a stage returning a tuple.
// Prints "pipeline ok" on every rank when all checks pass on all ranks.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <tuple>

#include "frameworks/torch/pipeline.h"

namespace pipeline = kolo::torch::pipeline;

namespace {

constexpr int64_t kChunks = 4;
// Dropout (layer 2, on the first stage) draws from the generator seeded so
// before the reference's loop and before each pipelined step: a recomputed
// forward must draw what the first one drew.
constexpr uint64_t kDropoutSeed = 11;
int failures = 0;
int me = 0;

void fail(const std::string& what) {
  ++failures;
  std::cout << "rank " << me << ": FAILED " << what << std::endl;
}

torch::nn::Sequential model() {
  torch::manual_seed(1);
  torch::nn::Sequential m(torch::nn::Linear(6, 10), torch::nn::Tanh(),
                          torch::nn::Dropout(0.5), torch::nn::Linear(10, 10),
                          torch::nn::Tanh(), torch::nn::Linear(10, 10), torch::nn::Tanh(),
                          torch::nn::Linear(10, 3), torch::nn::Tanh());
  m->to(torch::kFloat64);
  return m;
}

at::Tensor lossFn(const at::Tensor& out, const at::Tensor& target) {
  return torch::mse_loss(out, target);
}

struct Reference {
  torch::nn::Sequential model = ::model();
  double loss = 0;
};

// The whole model on this rank over the same micro-batches, in order.
Reference reference(const at::Tensor& x, const at::Tensor& y) {
  Reference ref;
  auto xs = x.chunk(kChunks), ys = y.chunk(kChunks);
  torch::manual_seed(kDropoutSeed);
  for (int64_t m = 0; m < kChunks; ++m) {
    at::Tensor loss = lossFn(ref.model->forward(xs[m]), ys[m]) / kChunks;
    ref.loss += loss.item<double>();
    loss.backward();
  }
  return ref;
}

// This stage's parameters' gradients equal the reference's for its layers.
void checkGradients(pipeline::Pipeline& pipe, Reference& ref, const std::string& what) {
  const int64_t first = pipe.bounds()[pipe.stage()];
  for (size_t i = 0; i < pipe.module()->size(); ++i) {
    auto mine = pipe.module()[i]->parameters();
    auto theirs = ref.model[first + i]->parameters();
    for (size_t p = 0; p < mine.size(); ++p) {
      if (!mine[p].grad().defined() || !torch::equal(mine[p].grad(), theirs[p].grad())) {
        fail(what + ": gradient of layer " + std::to_string(first + i) + " parameter " +
             std::to_string(p) + " differs");
      }
    }
  }
}

void exactness(kolo::Communicator& comm, const std::vector<int64_t>& splits,
               const std::string& schedule, const std::string& checkpoint,
               const at::Tensor& x, const at::Tensor& y, Reference& ref) {
  pipeline::Options o;
  o.splitPoints = splits;
  o.chunks = kChunks;
  o.schedule = schedule;
  o.checkpoint = checkpoint;
  pipeline::Pipeline pipe(model(), o, comm);
  const std::string what = schedule + "/" + checkpoint + " " +
                           std::to_string(pipe.stages()) + " stages, stage " +
                           std::to_string(pipe.stage());
  for (int step = 0; step < 2; ++step) {
    for (auto& p : pipe.module()->parameters()) p.mutable_grad() = at::Tensor();
    torch::manual_seed(kDropoutSeed);
    at::Tensor loss = pipe.trainStep(x, lossFn, y);
    checkGradients(pipe, ref, what + " step " + std::to_string(step));
    if (pipe.isLast() && std::abs(loss.item<double>() - ref.loss) > 1e-12) {
      fail(what + ": loss " + std::to_string(loss.item<double>()));
    }
    if (pipe.isLast() != loss.defined()) fail(what + ": loss defined off the last stage");
  }
  const int64_t expectHeld =
      schedule == "gpipe" ? kChunks
                          : std::min<int64_t>(pipe.stages() - pipe.stage(), kChunks);
  if (pipe.peakHeld() != expectHeld) {
    fail(what + ": held " + std::to_string(pipe.peakHeld()) + " micro-batches");
  }
  pipe.module()->eval();
  at::Tensor out = pipe.forward(x);
  if (pipe.isLast()) {
    torch::NoGradGuard off;
    ref.model->eval();
    if (!torch::allclose(out, ref.model->forward(x))) fail(what + ": forward output");
    ref.model->train();
  }
}

// `body` must throw a kolo::Error whose message contains `text`.
void expectError(const std::string& text, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(text) == std::string::npos) {
      fail("expected an error with '" + text + "', got: " + e.what());
    }
    return;
  }
  fail("no error with '" + text + "'");
}

// Returns its input, narrowed by a column at its second call.
struct ShapeShifterImpl : torch::nn::Module {
  int calls = 0;
  at::Tensor forward(const at::Tensor& x) {
    return ++calls == 2 ? x.narrow(1, 0, x.size(1) - 1) : x;
  }
};
TORCH_MODULE(ShapeShifter);

struct PairImpl : torch::nn::Module {
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x) { return {x, x}; }
};
TORCH_MODULE(Pair);

// A model with `odd` inserted at layer 4: stage `bad` (1 of 4, 0 of 2) has it.
template <typename Odd>
void badStage(kolo::Communicator& world, Odd odd, const std::string& own,
              const at::Tensor& x, const at::Tensor& y) {
  auto m = model();
  torch::nn::Sequential withOdd;
  for (size_t i = 0; i < m->size(); ++i) {
    if (i == 4) withOdd->push_back("odd", odd);
    withOdd->push_back(*(m->begin() + i));
  }
  pipeline::Options o;
  o.splitPoints =
      world.size() == 4 ? std::vector<int64_t>{2, 5, 7} : std::vector<int64_t>{5};
  o.chunks = 2;
  const int bad = world.size() == 4 ? 1 : 0;
  pipeline::Pipeline pipe(withOdd, o, world);
  const std::string text = world.rank() == bad
                               ? own
                               : "pipeline stage " + std::to_string(bad) + " (rank " +
                                     std::to_string(bad) + ") failed: ";
  expectError(text, [&] { pipe.trainStep(x, lossFn, y); });
  expectError("unusable after an earlier failure", [&] { pipe.trainStep(x, lossFn, y); });
}

void badUse(kolo::Communicator& world, const at::Tensor& x, const at::Tensor& y) {
  pipeline::Options o;
  o.splitPoints =
      world.size() == 4 ? std::vector<int64_t>{3, 5, 10} : std::vector<int64_t>{10};
  expectError("outside the model", [&] { pipeline::Pipeline(model(), o, world); });
  o.splitPoints.clear();
  o.balance =
      world.size() == 4 ? std::vector<int64_t>{3, 2, 2, 2} : std::vector<int64_t>{5, 4};
  o.schedule = world.rank() == 1 ? "1f1b" : "gpipe";
  expectError("ranks disagree on the schedule",
              [&] { pipeline::Pipeline(model(), o, world); });
  badStage(world, ShapeShifter(), "micro-batch 1's output is", x, y);
  badStage(world, Pair(), "", x, y);
}

}  // namespace

int main() {
  try {
    auto world = kolo::Communicator::fromEnvironment();
    me = world->rank();
    torch::manual_seed(7);
    at::Tensor x = torch::randn({8, 6}, torch::kFloat64);
    at::Tensor y = torch::randn({8, 3}, torch::kFloat64);
    Reference ref = reference(x, y);
    std::shared_ptr<kolo::Communicator> pair;
    if (world->size() == 4) {
      pair = me < 2 ? world->split({0, 1}, "pipeline/01")
                    : world->split({2, 3}, "pipeline/23");
    }
    for (const char* schedule : {"gpipe", "1f1b"}) {
      for (const char* checkpoint : {"never", "except_last", "always"}) {
        if (world->size() == 4) {
          exactness(*world, {3, 5, 7}, schedule, checkpoint, x, y, ref);
          exactness(*pair, {5}, schedule, checkpoint, x, y, ref);
        } else {
          exactness(*world, {5}, schedule, checkpoint, x, y, ref);
        }
      }
    }
    badUse(*world, x, y);
    int all = failures;
    kolo::AllreduceOptions sum;
    sum.send = sum.recv = &all;
    sum.count = 1;
    sum.dtype = kolo::DataType::kInt32;
    world->allreduce(sum);
    if (all != 0) {
      std::cout << "rank " << me << ": " << all << " failed checks" << std::endl;
      return 1;
    }
    std::cout << "pipeline ok" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cout << "rank " << me << ": " << e.what() << std::endl;
    return 1;
  }
}
