#include "frameworks/torch/context.h"

#include <exception>
#include <numeric>
#include <vector>

#include "common/logging.h"
#include "common/settings.h"

namespace kolo::torch {

std::shared_ptr<Context> Context::fromEnvironment() {
  return create(Communicator::fromEnvironment(),
                runtime::RuntimeOptions::fromSettings(Settings::fromEnvironment()));
}

std::shared_ptr<Context> Context::create(std::shared_ptr<Communicator> world,
                                         const runtime::RuntimeOptions& options) {
  return std::shared_ptr<Context>(new Context(std::move(world), options));
}

Context::Context(std::shared_ptr<Communicator> world,
                 const runtime::RuntimeOptions& options)
    : world_(std::move(world)), deterministic_(options.deterministic) {
  std::vector<int> all(static_cast<size_t>(world_->size()));
  std::iota(all.begin(), all.end(), 0);
  runtime_ = std::make_unique<runtime::Runtime>(world_->split(all, "torch"), options);
}

Context::~Context() {
  // Destroyed while an exception unwinds (a failing rank leaving its
  // training function): no closing barrier, which the others, still in
  // their step, would never join; the runtime's shutdown fails their
  // pending operations at once, naming this rank.
  if (std::uncaught_exceptions() > 0) {
    runtime_->shutdown();
    return;
  }
  try {
    runtime::OpRequest end;
    end.spec.name = "kolo.torch.context.end";
    end.spec.kind = runtime::OpKind::kBarrier;
    runtime_->enqueue(end)->wait();
  } catch (const std::exception& e) {
    KOLO_LOG(kWarning) << "kolo::torch::Context: closing barrier failed: " << e.what();
  }
  runtime_->shutdown();
}

}  // namespace kolo::torch
