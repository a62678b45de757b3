// Fashion-MNIST with libtorch on N ranks: a small CNN trained with
// kolo::torch::DistributedOptimizer (docs/training.md).
//
//   build/bin/kolorun -np 2 build/bin/fashion_mnist --epochs 3
//
// Each rank reads its shard of the training set (DistributedSampler,
// reshuffled each epoch), computes gradients on --batch-size images, and
// the optimizer averages them across ranks before every step. The learning
// rate is the base --lr scaled by the world size (--scale) and reached by a
// linear warm-up over --warmup-epochs (Goyal et al.). Rank 0 shows a
// progress bar per epoch on stderr, then the epoch's loss (averaged over
// ranks), the accuracy on the full test set (each rank evaluates a part;
// the counts are summed), images per second (all ranks) and the epoch's
// time. A 1-rank run records its throughput in
// <build>/fashion_mnist_1rank.json (or --baseline FILE); a run on more
// ranks prints its speedup over that record, beside the machine's ceiling
// when the record carries one (scripts/demo.py adds it: two 1-rank runs at
// once), and says so when the record's run was of other steps or batches.
//
// --mode chooses how the ranks combine their work: allreduce (the
// default, above), or parameter servers (docs/parameter_server.md) among
// the ranks of a job started with servers, e.g. 1 server and 3 workers:
//
//   build/bin/kolorun --servers 1 -np 4 build/bin/fashion_mnist --mode downpour
//
// sync-ps averages the workers' gradients on the servers (--scale linear,
// as allreduce); downpour applies each worker's gradient as it arrives (at
// most --staleness-bound versions stale; one worker's batch per update, so
// its default --scale is none) and easgd steps each worker's own optimizer,
// exchanging the elastic difference with the center every --easgd-period
// steps (--scale linear by default: measured better than none on the
// center's accuracy, docs/performance-history.md "Parameter servers"). The workers
// evaluate the servers' parameters (easgd: the center; a worker's own are
// restored after).
//
// --data DIR is either the Fashion-MNIST IDX files (default: Debian's
// /usr/share/datasets/fashion-mnist) or an image folder with train/ and
// test/ subfolders of class folders of JPEG files (as fmnist-to-jpeg
// writes them), decoded by a background prefetching thread.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "data/prefetcher.h"
#include "fashion_mnist_ps.h"
#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/lars.h"
#include "train/lr_schedule.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace kd = kolo::data;

struct Flags {
  int epochs = 3;
  int batchSize = 64;
  double lr = -1;     // -1: the optimizer's default
  std::string scale;  // "": linear, or none for downpour
  std::string mode = "allreduce";
  int stalenessBound = 4;
  double easgdAlpha = 0.5;
  int easgdPeriod = 4;
  double warmupEpochs = 0;
  std::string decay = "constant";
  std::string optimizer = "adam";
  std::string data = kd::kFashionMnistDir;
  int threads = 1;
  uint64_t seed = 42;
  std::string json;
  std::string baseline;
  bool progress = true;
  int64_t maxSteps = 0;  // 0: the whole shard each epoch
};

void usage() {
  std::cerr
      << "usage: fashion_mnist [--epochs N] [--batch-size B (per rank)] [--lr BASE]\n"
         "  [--scale linear|sqrt|none] [--warmup-epochs K] [--decay "
         "constant|cosine|step|exp]\n"
         "  [--optimizer sgd|adam|lars] [--data DIR] [--threads N] [--seed S]\n"
         "  [--json FILE] [--baseline FILE] [--max-steps N] [--no-progress]\n"
         "  [--mode allreduce|sync-ps|downpour|easgd] [--staleness-bound T]\n"
         "  [--easgd-alpha A] [--easgd-period P]\n";
}

Flags parseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--epochs")
      f.epochs = std::stoi(value());
    else if (a == "--batch-size")
      f.batchSize = std::stoi(value());
    else if (a == "--lr")
      f.lr = std::stod(value());
    else if (a == "--scale")
      f.scale = value();
    else if (a == "--warmup-epochs")
      f.warmupEpochs = std::stod(value());
    else if (a == "--decay")
      f.decay = value();
    else if (a == "--optimizer")
      f.optimizer = value();
    else if (a == "--data")
      f.data = value();
    else if (a == "--threads")
      f.threads = std::stoi(value());
    else if (a == "--seed")
      f.seed = std::stoull(value());
    else if (a == "--json")
      f.json = value();
    else if (a == "--baseline")
      f.baseline = value();
    else if (a == "--max-steps")
      f.maxSteps = std::stoll(value());
    else if (a == "--mode")
      f.mode = value();
    else if (a == "--staleness-bound")
      f.stalenessBound = std::stoi(value());
    else if (a == "--easgd-alpha")
      f.easgdAlpha = std::stod(value());
    else if (a == "--easgd-period")
      f.easgdPeriod = std::stoi(value());
    else if (a == "--no-progress")
      f.progress = false;
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      std::cerr << "fashion_mnist: unknown flag " << a << "\n";
      usage();
      std::exit(2);
    }
  }
  if (f.epochs < 1 || f.batchSize < 1 || f.threads < 1 || f.maxSteps < 0) {
    std::cerr << "fashion_mnist: --epochs, --batch-size and --threads must be >= 1, "
                 "--max-steps >= 0\n";
    std::exit(2);
  }
  if (f.mode != "allreduce" && f.mode != "sync-ps" && f.mode != "downpour" &&
      f.mode != "easgd") {
    std::cerr << "fashion_mnist: --mode " << f.mode
              << ": expected allreduce, sync-ps, downpour or easgd\n";
    std::exit(2);
  }
  if (f.scale.empty()) {
    f.scale = f.mode == "downpour" ? "none" : "linear";
  }
  return f;
}

// Two convolutions and two fully connected layers: about 90-91% test
// accuracy after a few epochs.
struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(int channels) {
    conv1 = register_module("conv1",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 16, 3)));
    conv2 =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 5 * 5, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);  // 28 -> 26 -> 13
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);  // 13 -> 11 -> 5
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Cnn);

// A data set: either Fashion-MNIST in memory or an image folder on disk.
class Dataset {
 public:
  static std::unique_ptr<Dataset> open(const std::string& dir, bool train) {
    auto d = std::make_unique<Dataset>();
    if (std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") ||
        !std::filesystem::is_directory(dir + "/train")) {
      d->mnist_ = kd::loadFashionMnist(dir, train ? kd::Split::kTrain : kd::Split::kTest);
    } else {
      kd::ImageFolderOptions o;  // 28 x 28 grayscale
      d->folder_ =
          std::make_unique<kd::ImageFolder>(dir + (train ? "/train" : "/test"), o);
    }
    return d;
  }
  int64_t size() const { return folder_ ? folder_->size() : mnist_.count; }
  // Normalized images [n, 1, 28, 28] and labels [n] of the listed samples.
  kd::ImageBatch load(const std::vector<int64_t>& indices) const {
    if (folder_) return kd::loadBatch(*folder_, indices);
    kd::ImageBatch b;
    b.count = static_cast<int64_t>(indices.size());
    const int64_t pixels = mnist_.rows * mnist_.cols;
    b.images.resize(static_cast<size_t>(b.count * pixels));
    for (size_t j = 0; j < indices.size(); ++j) {
      const uint8_t* src = mnist_.images.data() + indices[j] * pixels;
      for (int64_t p = 0; p < pixels; ++p)
        b.images[j * pixels + p] = src[p] * (1.0f / 255);
      b.labels.push_back(mnist_.labels[static_cast<size_t>(indices[j])]);
    }
    return b;
  }

 private:
  kd::FashionMnist mnist_;
  std::unique_ptr<kd::ImageFolder> folder_;
};

std::pair<torch::Tensor, torch::Tensor> toTensors(kd::ImageBatch& b) {
  auto x = torch::from_blob(b.images.data(), {b.count, 1, 28, 28}, torch::kFloat32);
  x = (x - 0.2860f) / 0.3530f;  // a new tensor: b may go
  auto y = torch::tensor(b.labels, torch::kLong);
  return {x, y};
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const Flags& f, Cnn& model,
                                                       double lr) {
  if (f.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        model->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  }
  if (f.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(model->parameters(),
                                                torch::optim::AdamOptions(lr));
  }
  if (f.optimizer == "lars") {
    return std::make_unique<kolo::torch::Lars>(
        model->parameters(),
        kolo::torch::LarsOptions(lr).momentum(0.9).weightDecay(5e-4));
  }
  std::cerr << "fashion_mnist: unknown optimizer " << f.optimizer
            << " (sgd, adam, lars)\n";
  std::exit(2);
}

double defaultLr(const std::string& optimizer) {
  if (optimizer == "sgd") return 0.02;
  if (optimizer == "lars") return 2.0;
  return 0.001;
}

void progressBar(int epoch, int epochs, int64_t done, int64_t total, double loss,
                 double imagesPerSecond) {
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(width, ' ');
  std::fprintf(
      stderr, "\repoch %d/%d [%s] %3d%% %lld/%lld loss %.4f %.0f img/s", epoch, epochs,
      bar.c_str(), static_cast<int>(100 * done / std::max<int64_t>(total, 1)),
      static_cast<long long>(done), static_cast<long long>(total), loss, imagesPerSecond);
  std::fflush(stderr);
}

// <directory of this executable>/../fashion_mnist_1rank.json, i.e.
// build/fashion_mnist_1rank.json for build/bin/fashion_mnist.
std::string defaultBaselinePath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "fashion_mnist_1rank.json";
  return (exe.parent_path().parent_path() / "fashion_mnist_1rank.json").string();
}

// The number after "key": in a flat JSON object (what this program writes).
double jsonNumber(const std::string& text, const std::string& key, double otherwise) {
  const auto at = text.find("\"" + key + "\":");
  if (at == std::string::npos) return otherwise;
  return std::strtod(text.c_str() + at + key.size() + 3, nullptr);
}

// The speedup of this run (rate images/s on size ranks) over the 1-rank
// record: with the record's ceiling (ceiling_images_per_second: two 1-rank
// runs at once, written by scripts/demo.py) how near this run comes to what
// the machine allows, else the efficiency against size x the record.
// Figures from runs of another batch size, number of steps per epoch or of
// epochs are not comparable: the line says which differ.
void printSpeedup(const std::string& record, double rate, int size, const Flags& f,
                  int64_t steps) {
  const double one = jsonNumber(record, "images_per_second", 0);
  if (one <= 0) return;
  std::string differ;
  auto check = [&](const char* key, double mine, const char* what) {
    const double theirs = jsonNumber(record, key, -1);
    if (theirs >= 0 && theirs != mine)
      differ += std::string(differ.empty() ? "" : ", ") + what;
  };
  check("batch_size", f.batchSize, "batch size");
  check("steps_per_epoch", static_cast<double>(steps), "steps per epoch");
  check("epochs", f.epochs, "epochs");
  const std::string note =
      differ.empty() ? "" : " [the 1-rank run used another " + differ + "]";
  const double ceiling = jsonNumber(record, "ceiling_images_per_second", 0);
  if (ceiling > 0) {
    std::printf(
        "speedup over 1 rank: %.2fx (%.0f -> %.0f images/s); ceiling of this machine "
        "(two 1-rank runs at once): %.2fx; kolo reaches %.0f%% of it%s\n",
        rate / one, one, rate, ceiling / one, 100 * rate / ceiling, note.c_str());
  } else {
    std::printf(
        "speedup over 1 rank: %.2fx (%.0f -> %.0f images/s; efficiency %.0f%%)%s\n",
        rate / one, one, rate, 100 * rate / one / size, note.c_str());
  }
}

// The ranks' cooperation: allreduce (kolo::torch::Context and its
// DistributedOptimizer) or the parameter servers (fashion_mnist_ps.h).
class Distributed {
 public:
  explicit Distributed(const Flags& f) : f_(f) {
    if (f.mode == "allreduce") {
      ctx_ = kolo::torch::Context::fromEnvironment();
    } else {
      world_ = std::make_unique<fmnist::PsWorld>();  // servers end here
    }
  }
  int rank() const { return ctx_ ? ctx_->rank() : world_->rank(); }
  int size() const { return ctx_ ? ctx_->size() : world_->size(); }

  // After the model is made: allreduce broadcasts rank 0's parameters, the
  // parameter servers seed from worker 0 and every worker pulls.
  // Takes the optimizer (it must outlive the distributed optimizers).
  torch::optim::Optimizer& attach(Cnn& model,
                                  std::unique_ptr<torch::optim::Optimizer> owned) {
    optimizer_ = std::move(owned);
    torch::optim::Optimizer& optimizer = *optimizer_;
    if (ctx_) {
      kolo::torch::broadcastParameters(*ctx_, model->named_parameters(), 0);
      dopt_ = std::make_unique<kolo::torch::DistributedOptimizer>(
          optimizer, model->named_parameters(), ctx_);
      kolo::torch::broadcastOptimizerState(*ctx_, optimizer, 0);
      return optimizer;
    }
    fmnist::PsSettings s{f_.mode, f_.optimizer, f_.stalenessBound,
                         static_cast<float>(f_.easgdAlpha), f_.easgdPeriod};
    popt_ = std::make_unique<fmnist::PsOptimizer>(optimizer, model->parameters(), s);
    return optimizer;
  }
  void zeroGrad() { dopt_ ? dopt_->zeroGrad() : popt_->zeroGrad(); }
  void step(double lr) { dopt_ ? dopt_->step() : popt_->step(lr); }

  // A metric over the ranks (workers): average, sum or max.
  double metric(double value, const std::string& name, kolo::ReduceOp op) {
    if (ctx_) return kolo::torch::allreduceMetric(*ctx_, value, name, op);
    const double r =
        world_->allreduce(value, op == kolo::ReduceOp::kMax ? KOLO_MAX : KOLO_SUM);
    return op == kolo::ReduceOp::kAverage ? r / size() : r;
  }

  // Around an evaluation: the servers' parameters in the model (every
  // worker has pushed its epoch); easgd's worker keeps its own after.
  void beginEvaluation(Cnn& model) {
    if (!popt_) return;
    saved_.clear();
    if (f_.mode == "easgd") {
      for (auto& p : model->parameters()) saved_.push_back(p.detach().clone());
    }
    popt_->pull();
  }
  void endEvaluation(Cnn& model) {
    torch::NoGradGuard noGrad;
    auto params = model->parameters();
    for (size_t i = 0; i < saved_.size(); ++i) params[i].copy_(saved_[i]);
    saved_.clear();
  }
  std::string serverStats() const { return popt_ ? popt_->stats() : ""; }

 private:
  const Flags& f_;
  std::shared_ptr<kolo::torch::Context> ctx_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<kolo::torch::DistributedOptimizer> dopt_;
  std::unique_ptr<fmnist::PsWorld> world_;
  std::unique_ptr<fmnist::PsOptimizer> popt_;
  std::vector<torch::Tensor> saved_;
};

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parseFlags(argc, argv);
  torch::set_num_threads(f.threads);
  try {
    // The model first: the optimizers' hooks on its parameters go before it.
    torch::manual_seed(f.seed);
    Cnn model(1);
    Distributed dist(f);
    const int rank = dist.rank();
    const int size = dist.size();
    const bool lead = rank == 0;

    auto train = Dataset::open(f.data, true);
    auto test = Dataset::open(f.data, false);

    const double base = f.lr > 0 ? f.lr : defaultLr(f.optimizer);
    kolo::train::LrSchedule schedule;
    schedule.warmupStartLr = base;
    schedule.peakLr = kolo::train::scaleLearningRate(
        base, size, kolo::train::parseScalingRule(f.scale));
    schedule.warmup = f.warmupEpochs;
    schedule.decay = kolo::train::parseDecayRule(f.decay);
    schedule.total = f.epochs;
    schedule.decayInterval = std::max(1.0, f.epochs / 3.0);
    schedule.validate();

    torch::optim::Optimizer& optimizer = dist.attach(
        model, makeOptimizer(f, model, kolo::train::learningRateAt(schedule, 0)));

    kd::DistributedSampler sampler(train->size(), rank, size, f.seed);
    const int64_t perRank = sampler.numSamples();
    const int64_t batches = (perRank + f.batchSize - 1) / f.batchSize;
    // --max-steps cuts every epoch short (smoke tests, fixed-length
    // throughput runs); the learning-rate schedule still counts full epochs.
    const int64_t steps = f.maxSteps > 0 ? std::min(batches, f.maxSteps) : batches;
    if (lead) {
      std::printf(
          "fashion_mnist: %d %s, %lld training images (%lld per rank), batch %d per "
          "rank, %s lr %.5g -> %.5g (%s, warm-up %.3g epochs, %s decay), %d thread(s), "
          "mode %s\n",
          size, f.mode == "allreduce" ? "rank(s)" : "worker(s)",
          static_cast<long long>(train->size()), static_cast<long long>(perRank),
          f.batchSize, f.optimizer.c_str(), base, schedule.peakLr, f.scale.c_str(),
          f.warmupEpochs, f.decay.c_str(), f.threads, f.mode.c_str());
      std::fflush(stdout);
    }

    std::vector<double> epochSeconds, epochRates, epochAccuracy;
    double accuracy = 0, lastLoss = 0;
    for (int epoch = 0; epoch < f.epochs; ++epoch) {
      sampler.setEpoch(epoch);
      const std::vector<int64_t> order = sampler.indices();
      kd::Prefetcher<kd::ImageBatch> pipeline(
          steps,
          [&](int64_t b) {
            const auto first = order.begin() + b * f.batchSize;
            const auto last =
                order.begin() + std::min<int64_t>((b + 1) * f.batchSize, perRank);
            return train->load(std::vector<int64_t>(first, last));
          },
          4);
      model->train();
      double lossSum = 0;
      const auto start = Clock::now();
      auto lastDraw = start;
      for (int64_t b = 0; b < steps; ++b) {
        kd::ImageBatch batch = pipeline.next().value();
        auto [x, y] = toTensors(batch);
        const double lr = kolo::train::learningRateAt(
            schedule, kolo::train::epochProgress(epoch, b, batches));
        for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
        dist.zeroGrad();
        auto loss = torch::cross_entropy_loss(model->forward(x), y);
        loss.backward();
        dist.step(lr);
        lossSum += loss.item<double>();
        const auto now = Clock::now();
        if (lead && f.progress &&
            (b + 1 == steps || now - lastDraw > std::chrono::milliseconds(200))) {
          const double s = std::chrono::duration<double>(now - start).count();
          progressBar(epoch + 1, f.epochs, b + 1, steps, lossSum / (b + 1),
                      (b + 1) * f.batchSize * size / std::max(s, 1e-9));
          lastDraw = now;
        }
      }
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (lead && f.progress) std::fprintf(stderr, "\n");
      // Global figures: the slowest rank's time, every rank's loss and the
      // whole test set's accuracy.
      seconds = dist.metric(seconds, "epoch_seconds", kolo::ReduceOp::kMax);
      lastLoss = dist.metric(lossSum / steps, "train_loss", kolo::ReduceOp::kAverage);
      model->eval();
      dist.beginEvaluation(model);
      torch::NoGradGuard noGrad;
      const kd::Range mine = kd::evaluationRange(test->size(), rank, size);
      double correct = 0;
      for (int64_t i = mine.begin; i < mine.end; i += 1000) {
        std::vector<int64_t> idx;
        for (int64_t j = i; j < std::min<int64_t>(i + 1000, mine.end); ++j)
          idx.push_back(j);
        kd::ImageBatch batch = test->load(idx);
        auto [x, y] = toTensors(batch);
        correct += model->forward(x).argmax(1).eq(y).sum().item<double>();
      }
      dist.endEvaluation(model);
      correct = dist.metric(correct, "test_correct", kolo::ReduceOp::kSum);
      accuracy = correct / static_cast<double>(test->size());
      epochAccuracy.push_back(accuracy);
      const double rate =
          static_cast<double>(std::min(steps * f.batchSize, perRank) * size) / seconds;
      epochSeconds.push_back(seconds);
      epochRates.push_back(rate);
      if (lead) {
        std::printf(
            "epoch %d/%d: loss %.4f, test accuracy %.2f%%, %.0f images/s, %.1f s\n",
            epoch + 1, f.epochs, lastLoss, 100 * accuracy, rate, seconds);
        std::fflush(stdout);
      }
    }

    if (lead && f.mode != "allreduce") {
      std::printf("parameter servers: %s\n", dist.serverStats().c_str());
    }
    // Throughput: the mean over epochs, leaving out the first (warming up
    // caches and the runtime's response cache) when there are several.
    const size_t skip = epochRates.size() > 1 ? 1 : 0;
    double rate = 0;
    for (size_t i = skip; i < epochRates.size(); ++i) rate += epochRates[i];
    rate /= static_cast<double>(epochRates.size() - skip);
    if (lead) {
      std::ostringstream json;
      json << "{\"ranks\": " << size << ", \"epochs\": " << f.epochs
           << ", \"batch_size\": " << f.batchSize << ", \"threads\": " << f.threads
           << ", \"optimizer\": \"" << f.optimizer << "\", \"base_lr\": " << base
           << ", \"peak_lr\": " << schedule.peakLr << ", \"scale\": \"" << f.scale
           << "\", \"train_loss\": " << lastLoss << ", \"test_accuracy\": " << accuracy
           << ", \"images_per_second\": " << rate << ", \"steps_per_epoch\": " << steps
           << ", \"epoch_seconds\": [";
      for (size_t i = 0; i < epochSeconds.size(); ++i) {
        json << (i ? ", " : "") << epochSeconds[i];
      }
      json << "], \"mode\": \"" << f.mode << "\", \"epoch_accuracy\": [";
      for (size_t i = 0; i < epochAccuracy.size(); ++i) {
        json << (i ? ", " : "") << epochAccuracy[i];
      }
      json << "]}\n";
      if (!f.json.empty()) std::ofstream(f.json) << json.str();
      const std::string baselinePath =
          f.baseline.empty() ? defaultBaselinePath() : f.baseline;
      std::printf("final: test accuracy %.2f%%, %.0f images/s on %d rank(s)\n",
                  100 * accuracy, rate, size);
      if (size == 1) {
        std::ofstream(baselinePath) << json.str();
        std::printf("recorded as the 1-rank baseline in %s\n", baselinePath.c_str());
      } else if (std::ifstream in{baselinePath}) {
        std::stringstream text;
        text << in.rdbuf();
        printSpeedup(text.str(), rate, size, f, steps);
      } else {
        std::printf("no 1-rank baseline at %s: run with -np 1 first for the speedup\n",
                    baselinePath.c_str());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nfashion_mnist: %s\n", e.what());
    return 1;
  }
}
