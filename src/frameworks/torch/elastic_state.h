// Elastic training for libtorch programs: the C++ counterpart of
// kolo.torch.elastic (Horovod's hvd.elastic; docs/elastic.md, "C++").
//
//   kolo::torch::ElasticState state(kolo::torch::Context::fromEnvironment());
//   state.addModel("model", model.ptr());
//   state.addOptimizer("optimizer", sgd);
//   state.addSampler("sampler", sampler);          // kolo::train::ElasticSampler
//   state.addValue("epoch", 0);
//   kolo::torch::elastic::run(state, [&] {
//     kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters(),
//                                           state.contextPtr());
//     for (; state.value("epoch") < epochs; ...) { ...; state.commit(); }
//   });
//
// An ElasticState keeps a copy of what training needs to go on after a
// reset: commit() copies the live objects into host memory, restore() puts
// the last commit back (after a failure), sync() makes every rank equal to
// rank 0 (after a reset, when ranks may have joined). It holds the job's
// Context: a reset drops it and forms the next world's (makeContext).
//
// Contract
// - Registration (add*) names each object once (Error(kInvalidArgument)
//   for an empty or repeated name); every rank registers the same names in
//   the same order, before elastic::run. The registered models, optimizers
//   and samplers must outlive the state.
// - commit(), sync(), checkHostUpdates() and elastic::run are collective
//   (every rank, same order). save() and restore() are local.
// - The state owns the only lasting reference to its Context: code that
//   keeps contextPtr() (a DistributedOptimizer) must not outlive the
//   function given to elastic::run, so that a reset releases the old
//   world's transports before the next world forms.
// - Not thread-safe: called from the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "frameworks/torch/context.h"
#include "train/elastic_sampler.h"
#include "train/lr_schedule.h"

namespace kolo::rendezvous::elastic {
class HostUpdates;
}

namespace kolo::torch {

// The hosts of an elastic job changed (Horovod's name): thrown by commit()
// and checkHostUpdates() on every rank at the same commit. skipSync: every
// change only removed hosts, so the survivors' state need not be synced.
class HostsUpdatedInterrupt : public std::runtime_error {
 public:
  explicit HostsUpdatedInterrupt(bool skipSync)
      : std::runtime_error("the hosts of the job changed"), skipSync_(skipSync) {}
  bool skipSync() const { return skipSync_; }

 private:
  bool skipSync_;
};

struct ElasticStateOptions {
  // How the optimizers' learning rates follow a change of world size at a
  // reset, from n to n' ranks: multiplied by k(n') / k(n) (kolo's scaling
  // rule: linear by default, sqrt, or none to leave it to the callbacks).
  train::ScalingRule lrRule = train::ScalingRule::kLinear;
  // The next world's Context after a reset; empty: Context::fromEnvironment.
  std::function<std::shared_ptr<Context>()> makeContext;
};

class ElasticState {
 public:
  explicit ElasticState(std::shared_ptr<Context> context,
                        ElasticStateOptions options = {});
  ~ElasticState();
  ElasticState(const ElasticState&) = delete;
  ElasticState& operator=(const ElasticState&) = delete;

  // Registration: each is committed at once (the initial commit).
  void addModel(const std::string& name, std::shared_ptr<::torch::nn::Module> model);
  void addOptimizer(const std::string& name, ::torch::optim::Optimizer& optimizer);
  // The sampler is re-dealt to the new world at every reset.
  void addSampler(const std::string& name, train::ElasticSampler& sampler);
  // A plain integer (epoch, step, batch, ...), read and written by value().
  void addValue(const std::string& name, int64_t initial);
  // The live value; Error(kInvalidArgument) for a name not added.
  int64_t& value(const std::string& name);
  int64_t value(const std::string& name) const;

  Context& context() { return *context_; }
  const std::shared_ptr<Context>& contextPtr() const { return context_; }

  // Called, in order, after every reset (before the state is synced), after
  // the sampler re-deal and the learning-rate rescale.
  void registerResetCallbacks(std::vector<std::function<void()>> callbacks);

  // save(), then checkHostUpdates().
  void commit();
  // Copies the live objects into host memory (local).
  void save();
  // Puts the last save back into the live objects (local).
  void restore();
  // Every rank's models, optimizer states (learning rates included),
  // samplers and values become rank 0's live ones, then save(): a failure
  // right after a sync rolls back to the synced state, also on a rank that
  // just joined.
  void sync();
  // Throws HostsUpdatedInterrupt on every rank, together, when rank 0 has
  // been told that the hosts changed since the last check (by the elastic
  // launcher's counters in the job's store, or notifyHostsUpdated).
  void checkHostUpdates();
  // Announces a change of hosts at `timestamp` (grows with every change) to
  // this rank's state; rank 0's announcements decide.
  void notifyHostsUpdated(int64_t timestamp, bool removedOnly = false);

  // Drops the Context and forms the next world's (elastic::run, after a
  // failure or a host change). Collective over the next world.
  void resetWorld();
  // After resetWorld(): re-deals the samplers, rescales the learning rates
  // for the new world size, runs the callbacks.
  void onReset();

  // The live state as a libtorch archive (what a checkpoint holds): each
  // model's parameters and buffers, each optimizer's state and learning
  // rates, each sampler's position, each value. read() loads one into the
  // live objects (not committed); Error(kInvalidArgument) naming the first
  // entry that is missing or differs in shape.
  void write(::torch::serialize::OutputArchive& archive) const;
  void read(::torch::serialize::InputArchive& archive);

 private:
  struct ModelEntry {
    std::string name;
    std::shared_ptr<::torch::nn::Module> module;
    std::vector<::torch::Tensor> saved;  // parameters, then buffers
  };
  struct OptimizerEntry {
    std::string name;
    ::torch::optim::Optimizer* optimizer;
    std::string savedState;  // Optimizer::save
    std::vector<std::unique_ptr<::torch::optim::OptimizerOptions>>
        savedOptions;  // by group
  };
  struct SamplerEntry {
    std::string name;
    train::ElasticSampler* sampler;
    int64_t savedEpoch = 0;
    int64_t savedProcessed = 0;
  };

  void claim(const std::string& name);
  static void saveModel(ModelEntry& m);
  static void saveOptimizer(OptimizerEntry& o);
  void syncValues();

  std::shared_ptr<Context> context_;
  ElasticStateOptions options_;
  std::vector<std::string> names_;  // every registered name, in order
  std::vector<ModelEntry> models_;
  std::vector<OptimizerEntry> optimizers_;
  std::vector<SamplerEntry> samplers_;
  std::map<std::string, int64_t> values_;
  std::map<std::string, int64_t> savedValues_;
  std::vector<std::function<void()>> callbacks_;
  // The world size the live learning rates are scaled for, and the one the
  // saved ones are (a rollback followed by a resize scales from it).
  int worldSize_;
  int savedWorldSize_;
  // Host changes announced to this rank (timestamp, removed only), and the
  // last timestamp every rank agreed on.
  std::vector<std::pair<int64_t, bool>> hostUpdates_;
  int64_t lastHostUpdate_ = 0;
  // Rank 0's reader of the launcher's counters, opened at the first check
  // in an elastic world.
  std::unique_ptr<rendezvous::elastic::HostUpdates> launcherCounters_;
};

namespace elastic {

// Whether `error` means "a peer failed" (roll back and re-form): a lost
// peer, a timeout, or a broken transport (kPeerLost, kTimeout, kIo,
// kInternal); not the errors that say the program is wrong (invalid
// argument, mismatch, not initialized), which are not retried.
bool isPeerFailure(const Error& error);

// Calls fn() until it returns. Before each call the state is synced from
// rank 0 (unless the last HostsUpdatedInterrupt said skipSync). On a peer
// failure the state is restored to its last commit; on HostsUpdatedInterrupt
// it is kept. Either way the world is re-formed (resetWorld: the launcher
// forms the next generation without the lost ranks, with the added ones),
// onReset() runs, and fn is called again. Other exceptions propagate.
void run(ElasticState& state, const std::function<void()>& fn);

}  // namespace elastic
}  // namespace kolo::torch
