// The allreduce algorithms by name, and the table that picks one by
// topology and message size.
//
// Selection is data (kSelection below): for the job's topology, the first
// row whose maxBytes >= the message size names the algorithm. Topologies:
//   kShmHost    every rank on one host with a shared-memory arena (ctx.shm)
//   kMultiHost  several hosts, some with more than one rank, and the local
//               and cross groups built (ctx.local, ctx.cross)
//   kFlat       anything else (tcp only, one rank per host, ...)
// The thresholds follow the usual cost model: recursive doubling sends
// log2(n) whole vectors but needs only log2(n) latencies; halving-doubling
// moves 2(n-1)/n of the vector in 2 log2(n) steps; the ring moves the same
// amount in 2(n-1) steps but pipelines and touches each link once per step.
// Measured here (2 cores, tcp loopback, ranks as threads, a loaded
// machine): tree matches a bare 8-byte exchange and beats rhd/ring up to
// ~16 KiB; rhd and ring are within noise of each other around 512 KiB; the
// ring runs 64 MiB within 10-25% of a bare 64 MiB sendRecv.
// KOLO_ALLREDUCE_ALGO / AllreduceOptions::algorithm bypass the table
// (findAllreduce).
#include <cstdint>
#include <limits>
#include <sstream>

#include "collectives/registry.h"
#include "common/check.h"

namespace kolo::collectives {
namespace {

enum class Topology { kShmHost, kMultiHost, kFlat };

struct SelectionRow {
  Topology topology;
  size_t maxBytes;  // inclusive
  std::string_view algorithm;
};

constexpr size_t kAny = std::numeric_limits<size_t>::max();

constexpr SelectionRow kSelection[] = {
    {Topology::kShmHost, kAny, "shm"},
    // Across hosts, only the tiniest vectors are better off with a flat
    // log2(n)-step exchange than with the three-phase hierarchical schedule.
    {Topology::kMultiHost, 4 * 1024, "tree"},
    {Topology::kMultiHost, kAny, "hier"},
    {Topology::kFlat, 16 * 1024, "tree"},
    {Topology::kFlat, 512 * 1024, "rhd"},
    {Topology::kFlat, kAny, "ring"},
};

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

Topology topologyOf(const Context& ctx) {
  if (allOnOneHostWithShm(ctx)) return Topology::kShmHost;
  if (hasHostGroups(ctx) && ctx.layout.crossSize > 1 &&
      ctx.layout.size > ctx.layout.crossSize) {
    return Topology::kMultiHost;
  }
  return Topology::kFlat;
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
  const Topology topology = topologyOf(ctx);
  for (const SelectionRow& row : kSelection) {
    if (row.topology != topology || bytes > row.maxBytes) continue;
    const AllreduceAlgorithm* a = lookup(row.algorithm);
    KOLO_CHECK(a != nullptr);
    if (a->usable(ctx)) return *a;
  }
  return *lookup("ring");
}

}  // namespace kolo::collectives
