// How a libtorch program reaches kolo: one Context per process holds the
// world communicator and a runtime (docs/runtime.md) over a team of all
// ranks named "torch", through which DistributedOptimizer and the
// broadcast/metric helpers submit their named operations.
//
//   auto ctx = kolo::torch::Context::fromEnvironment();  // under kolorun
//   ctx->rank(); ctx->size();
//
// The team has its own communicator (Communicator::split), so the program
// may still call collectives on world() directly from its own thread while
// the runtime's background thread works.
//
// Contract
// - fromEnvironment() and create() are collective: every rank calls them
//   (same order relative to other collectives on the world communicator).
//   They block until the team is connected and throw kolo::Error on
//   failure (as Communicator::fromEnvironment and split do).
// - runtime() is thread-safe (see Runtime); the Context must outlive every
//   DistributedOptimizer and every pending operation using it.
// - Destruction: every rank passes a barrier through the runtime (so no
//   rank shuts the runtime down while another still has operations in
//   flight), then the runtime stops. A failed barrier (a lost peer) is
//   logged, not thrown. Destroyed while an exception unwinds, it skips the
//   barrier: the runtime stops at once and the other ranks' pending
//   operations fail with kPeerLost naming this rank.
#pragma once

#include <kolo/communicator.h>

#include <memory>
#include <string>

#include "runtime/runtime.h"

namespace kolo::torch {

class Context {
 public:
  // The world from the environment (kolorun, mpirun, srun, torchrun) and a
  // runtime with RuntimeOptions::fromSettings(Settings::fromEnvironment()).
  static std::shared_ptr<Context> fromEnvironment();
  // Over an existing world communicator (e.g. tests, or a program that
  // built its own): splits off the "torch" team and starts its runtime.
  static std::shared_ptr<Context> create(std::shared_ptr<Communicator> world,
                                         const runtime::RuntimeOptions& options);

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  const Layout& layout() const { return world_->layout(); }
  Communicator& world() { return *world_; }
  runtime::Runtime& runtime() { return *runtime_; }
  // The runtime adds in rank order (KOLO_DETERMINISTIC=1,
  // RuntimeOptions::deterministic).
  bool deterministic() const { return deterministic_; }

 private:
  Context(std::shared_ptr<Communicator> world, const runtime::RuntimeOptions& options);

  std::shared_ptr<Communicator> world_;
  std::unique_ptr<runtime::Runtime> runtime_;
  bool deterministic_ = false;
};

}  // namespace kolo::torch
