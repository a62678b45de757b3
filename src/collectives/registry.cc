// The allreduce algorithms by name, and the selection among them.
//
// Selection is the scale model (predict/allreduce_model.h, docs/scale.md):
// the cheapest candidate for the call's size class in the job's shape,
// with the communicator's constants (KOLO_PREDICT_CONSTANTS, else built
// in), cached per size class by the communicator's AllreduceSelector
// (selection.h, which also says why every rank chooses the same). The
// candidates: on one host with a shared-memory arena only shm (the only
// algorithm that checks the call's arguments in its own first step: were
// others chosen for some sizes, ranks whose sizes disagree would run
// different protocols and hang instead of failing); elsewhere tree, rhd
// and ring, and hier across hosts with several ranks each. This replaced a
// hand-set table (tree up to 16 KiB, rhd up to 512 KiB, then ring; across
// hosts tree up to 4 KiB, then hier); docs/scale.md compares the two.
// KOLO_ALLREDUCE_ALGO / KOLO_ALGORITHM / AllreduceOptions::algorithm
// bypass the selection (findAllreduce).
#include <sstream>

#include "collectives/registry.h"
#include "collectives/selection.h"
#include "common/check.h"

namespace kolo::collectives {
namespace {

bool always(const Context&) {
  return true;
}

bool allOnOneHostWithShm(const Context& ctx) {
  return ctx.shm != nullptr && ctx.layout.crossSize == 1 &&
         ctx.layout.localSize == ctx.world.size();
}

bool hasHostGroups(const Context& ctx) {
  return ctx.local != nullptr && ctx.cross != nullptr;
}

// Why an algorithm is not usable, for the error message.
std::string whyNotUsable(std::string_view name, const Context& ctx) {
  std::ostringstream os;
  os << ctx.layout.size << " ranks on " << ctx.layout.crossSize << " host(s)";
  if (name == "shm") {
    return "it needs every rank on one host with shared memory (this job: " + os.str() +
           (ctx.shm == nullptr ? ", no shared-memory arena)" : ")");
  }
  if (name == "hier") {
    return "it needs the per-host and cross-host groups, which are built only "
           "when ranks share hosts (this job: " +
           os.str() + ")";
  }
  return "not usable in this context (" + os.str() + ")";
}

const AllreduceAlgorithm* lookup(std::string_view name) {
  for (const auto& a : allreduceAlgorithms()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

}  // namespace

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms() {
  static const std::vector<AllreduceAlgorithm> algorithms = {
      {"shm", allreduceShm, allOnOneHostWithShm, /*checksArguments=*/true,
       /*takesSegments=*/true, /*dividesResult=*/true},
      {"ring", allreduceRing, always},
      {"rhd", allreduceHalvingDoubling, always},
      {"tree", allreduceTree, always},
      {"hier", allreduceHierarchical, hasHostGroups},
      // Only by name (AllreduceOptions::algorithm, KOLO_ALLREDUCE_ALGO).
      {"ordered", allreduceOrdered, always},
  };
  return algorithms;
}

const AllreduceAlgorithm& findAllreduce(std::string_view name, const Context& ctx) {
  const AllreduceAlgorithm* a = lookup(name);
  if (a == nullptr) {
    std::ostringstream valid;
    for (const auto& alg : allreduceAlgorithms()) {
      valid << (valid.tellp() > 0 ? ", " : "") << alg.name;
    }
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "unknown allreduce algorithm '"
                   << name << "' (KOLO_ALLREDUCE_ALGO or AllreduceOptions::algorithm); "
                   << "valid names: " << valid.str());
  }
  if (!a->usable(ctx)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "allreduce algorithm '"
                                                << name << "' cannot run on rank "
                                                << ctx.layout.rank << ": "
                                                << whyNotUsable(name, ctx));
  }
  return *a;
}

bool allreduceUsable(std::string_view name, const Context& ctx) {
  const AllreduceAlgorithm* a = lookup(name);
  return a != nullptr && a->usable(ctx);
}

const AllreduceAlgorithm& selectAllreduce(size_t bytes, const Context& ctx) {
  std::string_view name;
  if (ctx.world.size() == 1) {
    name = "tree";  // nothing to choose: the communicator copies
  } else if (ctx.selector != nullptr) {
    name = ctx.selector->choose(bytes);
  } else {
    const predict::JobShape shape = shapeOfContext(
        ctx, ctx.shm != nullptr ? predict::Path::kShm : predict::Path::kTcp,
        predict::Path::kTcp);
    name = predict::toString(
        predict::selectAllreduce(bytes, shape, predict::builtInConstants()));
  }
  const AllreduceAlgorithm* a = lookup(name);
  KOLO_CHECK(a != nullptr);
  if (a->usable(ctx)) return *a;
  return *lookup("ring");
}

}  // namespace kolo::collectives
