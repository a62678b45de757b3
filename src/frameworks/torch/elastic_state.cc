#include "frameworks/torch/elastic_state.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "common/settings.h"
#include "frameworks/torch/byte_collectives.h"
#include "frameworks/torch/distributed_optimizer.h"
#include "rendezvous/environment.h"
#include "rendezvous/host_updates.h"

namespace kolo::torch {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "ElasticState: " + message);
}

// A model's parameters, then its buffers, as (name, tensor).
NamedTensors modelTensors(const std::string& prefix, ::torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters()) {
    out.emplace_back(prefix + "/" + item.key(), item.value());
  }
  for (const auto& item : module.named_buffers()) {
    out.emplace_back(prefix + "/" + item.key(), item.value());
  }
  return out;
}

std::string archiveBytes(::torch::serialize::OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  return bytes;
}

// Loads `bytes` (Optimizer::save's) into `optimizer`, replacing its state.
void loadOptimizerState(::torch::optim::Optimizer& optimizer, const std::string& bytes) {
  optimizer.state().clear();
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  optimizer.load(archive);
}

}  // namespace

ElasticState::ElasticState(std::shared_ptr<Context> context, ElasticStateOptions options)
    : context_(std::move(context)), options_(std::move(options)) {
  if (!context_) invalid("needs a Context (got null)");
  worldSize_ = savedWorldSize_ = context_->size();
}

ElasticState::~ElasticState() = default;

// ---- registration ------------------------------------------------------------------

void ElasticState::claim(const std::string& name) {
  if (name.empty()) invalid("empty name");
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
    invalid("'" + name + "' is registered twice");
  }
  names_.push_back(name);
}

void ElasticState::addModel(const std::string& name,
                            std::shared_ptr<::torch::nn::Module> model) {
  if (!model) invalid("model '" + name + "' is null");
  claim(name);
  models_.push_back(ModelEntry{name, std::move(model), {}});
  saveModel(models_.back());
}

void ElasticState::addOptimizer(const std::string& name,
                                ::torch::optim::Optimizer& optimizer) {
  claim(name);
  optimizers_.push_back(OptimizerEntry{name, &optimizer, {}, {}});
  saveOptimizer(optimizers_.back());
}

void ElasticState::addSampler(const std::string& name, train::ElasticSampler& sampler) {
  claim(name);
  samplers_.push_back(SamplerEntry{name, &sampler, sampler.epoch(), sampler.processed()});
}

void ElasticState::addValue(const std::string& name, int64_t initial) {
  claim(name);
  values_[name] = initial;
  savedValues_[name] = initial;
}

int64_t& ElasticState::value(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) invalid("no value named '" + name + "'");
  return it->second;
}

int64_t ElasticState::value(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) invalid("no value named '" + name + "'");
  return it->second;
}

void ElasticState::registerResetCallbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& c : callbacks) callbacks_.push_back(std::move(c));
}

// ---- commit, restore, sync ------------------------------------------------------------

void ElasticState::saveModel(ModelEntry& m) {
  ::torch::NoGradGuard noGrad;
  m.saved.clear();
  for (const auto& [name, t] : modelTensors(m.name, *m.module)) {
    m.saved.push_back(t.detach().clone());
  }
}

// The per-parameter state through libtorch's serialization (a deep copy),
// the groups' options (learning rate, momentum, ...) as clones: Optimizer::
// load restores the state only.
void ElasticState::saveOptimizer(OptimizerEntry& o) {
  ::torch::serialize::OutputArchive archive;
  o.optimizer->save(archive);
  o.savedState = archiveBytes(archive);
  o.savedOptions.clear();
  for (auto& group : o.optimizer->param_groups()) {
    o.savedOptions.push_back(group.options().clone());
  }
}

void ElasticState::commit() {
  save();
  checkHostUpdates();
}

void ElasticState::save() {
  for (auto& m : models_) saveModel(m);
  for (auto& o : optimizers_) saveOptimizer(o);
  for (auto& s : samplers_) {
    s.savedEpoch = s.sampler->epoch();
    s.savedProcessed = s.sampler->processed();
  }
  savedValues_ = values_;
  savedWorldSize_ = worldSize_;  // the learning rates just saved are scaled for it
}

void ElasticState::restore() {
  ::torch::NoGradGuard noGrad;
  for (auto& m : models_) {
    const NamedTensors live = modelTensors(m.name, *m.module);
    for (size_t i = 0; i < live.size(); ++i) live[i].second.copy_(m.saved[i]);
  }
  for (auto& o : optimizers_) {
    loadOptimizerState(*o.optimizer, o.savedState);
    auto& groups = o.optimizer->param_groups();
    for (size_t i = 0; i < groups.size(); ++i)
      groups[i].set_options(o.savedOptions[i]->clone());
  }
  for (auto& s : samplers_) s.sampler->setPosition(s.savedEpoch, s.savedProcessed);
  values_ = savedValues_;
  worldSize_ = savedWorldSize_;
}

void ElasticState::sync() {
  for (auto& m : models_)
    broadcastParameters(*context_, modelTensors(m.name, *m.module), 0);
  for (auto& o : optimizers_) broadcastOptimizerState(*context_, *o.optimizer, 0);
  syncValues();
  worldSize_ = context_->size();  // rank 0's learning rates are scaled for it
  save();
}

// The samplers' positions and the values, rank 0's, in one broadcast. The
// element count is part of the operation: ranks that registered different
// numbers of them fail with a mismatch.
void ElasticState::syncValues() {
  std::vector<int64_t> flat;
  for (auto& s : samplers_) {
    flat.push_back(s.sampler->epoch());
    flat.push_back(s.sampler->processed());
  }
  for (const auto& [name, v] : values_) flat.push_back(v);
  if (flat.empty()) return;
  runtime::OpRequest r;
  r.spec.name = "kolo.elastic.values";
  r.spec.kind = runtime::OpKind::kBroadcast;
  r.spec.dtype = DataType::kInt64;
  r.spec.shape = {static_cast<int64_t>(flat.size())};
  r.spec.root = 0;
  r.input = r.output = flat.data();
  context_->runtime().enqueue(r)->wait();
  size_t at = 0;
  for (auto& s : samplers_) {
    s.sampler->setPosition(flat[at], flat[at + 1]);
    at += 2;
  }
  for (auto& [name, v] : values_) v = flat[at++];
}

// ---- host updates
// ----------------------------------------------------------------------

void ElasticState::notifyHostsUpdated(int64_t timestamp, bool removedOnly) {
  hostUpdates_.emplace_back(timestamp, removedOnly);
}

// Rank 0 turns the launcher's host-update counters into a notification:
// kolorun counts every change its --host-discovery-script makes; counters
// above the ones this world was formed with mean a change since (the
// counter is the timestamp: it only grows). Rank 0's view is broadcast so
// that every rank throws at the same commit.
void ElasticState::checkHostUpdates() {
  if (context_->rank() == 0) {
    const ElasticWorld world = context_->world().elasticWorld();
    if (world.generation > 0) {
      if (!launcherCounters_) {
        const Settings settings = Settings::fromEnvironment();
        launcherCounters_ = std::make_unique<rendezvous::elastic::HostUpdates>(
            rendezvous::detectJobEnvironment().rendezvous,
            std::chrono::milliseconds(
                static_cast<int64_t>(settings.connectTimeoutSeconds * 1000)),
            settings.resolveJobSecret());
      }
      const auto now = launcherCounters_->read();
      if (now.updates > world.hostUpdates) {
        notifyHostsUpdated(now.updates, now.additions == world.hostAdditions);
      }
    }
  }
  int64_t last = lastHostUpdate_;
  bool removedOnly = true, seen = false;
  for (const auto& [timestamp, removed] : hostUpdates_) {
    if (timestamp > last) {
      last = timestamp;
      removedOnly = removedOnly && removed;
      seen = true;
    }
  }
  hostUpdates_.clear();
  int64_t agreed[3] = {lastHostUpdate_, last, removedOnly && seen ? 1 : 0};
  runtime::OpRequest r;
  r.spec.name = "kolo.elastic.host_updates";
  r.spec.kind = runtime::OpKind::kBroadcast;
  r.spec.dtype = DataType::kInt64;
  r.spec.shape = {3};
  r.spec.root = 0;
  r.input = r.output = agreed;
  context_->runtime().enqueue(r)->wait();
  lastHostUpdate_ = agreed[1];
  if (agreed[1] > agreed[0]) throw HostsUpdatedInterrupt(agreed[2] != 0);
}

// ---- reset
// -------------------------------------------------------------------------------

void ElasticState::resetWorld() {
  if (context_.use_count() > 1) {
    KOLO_LOG(kWarning) << "ElasticState: the old world's Context is still referenced "
                          "outside the state; its transports stay open until the last "
                          "reference goes";
  }
  context_.reset();  // the old world's runtime and communicators end here
  context_ = options_.makeContext ? options_.makeContext() : Context::fromEnvironment();
  if (!context_) invalid("makeContext returned null");
}

void ElasticState::onReset() {
  const int n = context_->size();
  for (auto& s : samplers_) s.sampler->reset(context_->rank(), n);
  if (n != worldSize_ && options_.lrRule != train::ScalingRule::kNone) {
    const double factor = train::scaleLearningRate(1.0, n, options_.lrRule) /
                          train::scaleLearningRate(1.0, worldSize_, options_.lrRule);
    for (auto& o : optimizers_) {
      for (auto& group : o.optimizer->param_groups()) {
        group.options().set_lr(group.options().get_lr() * factor);
      }
    }
  }
  worldSize_ = n;
  for (auto& callback : callbacks_) callback();
}

// ---- archive
// ------------------------------------------------------------------------------

void ElasticState::write(::torch::serialize::OutputArchive& archive) const {
  for (const auto& m : models_) {
    for (const auto& [name, t] : modelTensors(m.name, *m.module)) {
      archive.write("model/" + name, t.detach());
    }
  }
  for (const auto& o : optimizers_) {
    ::torch::serialize::OutputArchive sub(archive.compilation_unit());
    o.optimizer->save(sub);
    archive.write("optimizer/" + o.name, sub);
    std::vector<double> lrs;
    for (auto& group : o.optimizer->param_groups())
      lrs.push_back(group.options().get_lr());
    archive.write("optimizer_lr/" + o.name, ::torch::tensor(lrs, ::torch::kFloat64));
  }
  for (const auto& s : samplers_) {
    archive.write("sampler/" + s.name,
                  ::torch::tensor({s.sampler->epoch(), s.sampler->processed()}));
  }
  for (const auto& [name, v] : values_) archive.write("value/" + name, c10::IValue(v));
}

void ElasticState::read(::torch::serialize::InputArchive& archive) {
  auto tensorAt = [&](const std::string& key) {
    ::torch::Tensor t;
    if (!archive.try_read(key, t)) invalid("the archive has no entry '" + key + "'");
    return t;
  };
  ::torch::NoGradGuard noGrad;
  for (auto& m : models_) {
    for (const auto& [name, live] : modelTensors(m.name, *m.module)) {
      const ::torch::Tensor t = tensorAt("model/" + name);
      if (t.sizes() != live.sizes() || t.scalar_type() != live.scalar_type()) {
        invalid("'model/" + name + "' has shape " + c10::str(t.sizes()) + " " +
                c10::toString(t.scalar_type()) + " in the archive, " +
                c10::str(live.sizes()) + " " + c10::toString(live.scalar_type()) +
                " in the model");
      }
      live.copy_(t);
    }
  }
  for (auto& o : optimizers_) {
    ::torch::serialize::InputArchive sub;
    if (!archive.try_read("optimizer/" + o.name, sub)) {
      invalid("the archive has no entry 'optimizer/" + o.name + "'");
    }
    o.optimizer->state().clear();
    o.optimizer->load(sub);
    const ::torch::Tensor lrs = tensorAt("optimizer_lr/" + o.name);
    auto& groups = o.optimizer->param_groups();
    if (lrs.numel() != static_cast<int64_t>(groups.size())) {
      invalid("'optimizer_lr/" + o.name + "' has " + std::to_string(lrs.numel()) +
              " learning rates for " + std::to_string(groups.size()) +
              " parameter groups");
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      groups[i].options().set_lr(lrs[static_cast<int64_t>(i)].item<double>());
    }
  }
  for (auto& s : samplers_) {
    const ::torch::Tensor pos = tensorAt("sampler/" + s.name);
    if (pos.numel() != 2)
      invalid("'sampler/" + s.name + "' is not an (epoch, position) pair");
    s.sampler->setPosition(pos[0].item<int64_t>(), pos[1].item<int64_t>());
  }
  for (auto& [name, v] : values_) {
    c10::IValue read;
    if (!archive.try_read("value/" + name, read) || !read.isInt()) {
      invalid("the archive has no integer entry 'value/" + name + "'");
    }
    v = read.toInt();
  }
}

// ---- run
// -------------------------------------------------------------------------------

namespace elastic {

bool isPeerFailure(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kPeerLost:
    case ErrorCode::kTimeout:
    case ErrorCode::kIo:
    case ErrorCode::kInternal: return true;
    default: return false;
  }
}

void run(ElasticState& state, const std::function<void()>& fn) {
  bool skipSync = false;
  while (true) {
    try {
      if (!skipSync) state.sync();
      fn();
      return;
    } catch (const HostsUpdatedInterrupt& e) {
      skipSync = e.skipSync();
    } catch (const Error& e) {
      if (!isPeerFailure(e)) throw;
      KOLO_LOG(kInfo) << "elastic: rolling back to the last commit after: " << e.what();
      state.restore();
      skipSync = false;
    }
    state.resetWorld();
    state.onReset();
  }
}

}  // namespace elastic
}  // namespace kolo::torch
