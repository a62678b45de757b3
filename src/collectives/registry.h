// Named algorithm implementations and the table that selects among them.
//
// Each algorithm lives in its own file (allreduce_ring.cc, ...) and is
// listed here. Selection (registry.cc, selection.h) is the scale model's
// cheapest candidate per size class; KOLO_ALLREDUCE_ALGO / KOLO_ALGORITHM
// (Settings) or AllreduceOptions::algorithm override it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "collectives/context.h"

namespace kolo::collectives {

// Allreduce algorithms. All accept any world size >= 1 and any count.
void allreduceRing(Context& ctx, const AllreduceArgs& args);             // "ring"
void allreduceHalvingDoubling(Context& ctx, const AllreduceArgs& args);  // "rhd"
void allreduceTree(Context& ctx, const AllreduceArgs& args);             // "tree"
void allreduceHierarchical(Context& ctx, const AllreduceArgs& args);     // "hier"
void allreduceShm(Context& ctx, const AllreduceArgs& args);              // "shm"
// Each element reduced in rank order by one rank: bits independent of count,
// offset and topology (KOLO_DETERMINISTIC). Never chosen by the table.
void allreduceOrdered(Context& ctx, const AllreduceArgs& args);  // "ordered"

void broadcastBinomial(Context& ctx, const BroadcastArgs& args);
void allgatherRing(Context& ctx, const AllgatherArgs& args);
void reduceScatterRing(Context& ctx, const ReduceScatterArgs& args);
void alltoallPairwise(Context& ctx, const AlltoallArgs& args);
void barrierDissemination(Context& ctx);

using AllreduceFn = void (*)(Context&, const AllreduceArgs&);

struct AllreduceAlgorithm {
  std::string_view name;
  AllreduceFn run;
  // Whether it can run in this context (e.g. shm needs all ranks on one
  // host with a ShmGroup; hier needs local and cross groups).
  bool (*usable)(const Context&);
  // True when the algorithm verifies ctx.check itself (saving the separate
  // descriptor exchange); false for most.
  bool checksArguments = false;
  // True when it reads and writes a segmented vector (AllreduceArgs::
  // segments) itself; the others get a packed copy.
  bool takesSegments = false;
  // True when it honours AllreduceArgs::divisor; the others leave the
  // division to the caller.
  bool dividesResult = false;
};

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms();

// Looks up by name; throws Error(kInvalidArgument) listing the valid names
// for an unknown one and naming the reason when it is not usable here.
const AllreduceAlgorithm& findAllreduce(std::string_view name, const Context& ctx);

// Whether the algorithm `name` exists and can run in this context.
bool allreduceUsable(std::string_view name, const Context& ctx);

// The selection's choice for `bytes` in this context (ctx.selector's, or
// the model with the built-in constants when it is null).
const AllreduceAlgorithm& selectAllreduce(size_t bytes, const Context& ctx);

}  // namespace kolo::collectives
