// What a collective algorithm works with: the transports of the groups it
// may use and the tags reserved for this one operation.
//
// Algorithms are free functions registered by name (registry.h); each sees
// only the Transport interface (and, for the shared-memory algorithms, the
// host's ShmGroup), never a concrete transport.
#pragma once

#include <kolo/types.h>

#include <cstddef>
#include <vector>

#include "transport/transport.h"

namespace kolo::shm {
class ShmGroup;
}

namespace kolo::collectives {

struct OpDescriptor;
class StagingStores;
class AllreduceSelector;

// Each collective call gets a fresh block of kTagsPerOp tags starting at
// `tag`; an algorithm uses tag + step for its steps (step < kTagsPerOp).
inline constexpr transport::Tag kTagsPerOp = 1u << 16;

struct Context {
  transport::Transport& world;  // all ranks, rank() == layout.rank
  const Layout& layout;
  // Ranks of this host (local rank order), and one rank per host with the
  // same local rank (cross rank order). Null when not built (one host, or
  // ranks unevenly spread).
  transport::Transport* local = nullptr;
  transport::Transport* cross = nullptr;
  // Shared-memory arena of this host's ranks; null without shm.
  shm::ShmGroup* shm = nullptr;
  // Which stores fill the shm staging slots (staging_stores.h), kept across
  // calls by the communicator; null: plain stores.
  StagingStores* stores = nullptr;
  // The communicator's model-driven allreduce selection (selection.h);
  // null: the model with the built-in constants, uncached.
  const AllreduceSelector* selector = nullptr;
  transport::Tag tag = 0;
  // Set for algorithms whose registry entry says checksArguments: they
  // must verify that all ranks agree on this descriptor (descriptor_check.h)
  // as part of their first step. Null: already verified by the caller.
  const OpDescriptor* check = nullptr;
};

struct AllreduceArgs {
  const void* send;  // == recv for in place
  void* recv;
  size_t count;
  DataType dtype;
  ReduceOp op;  // kAverage is reduced as kSum and divided by the caller
  // Segmented form (only for algorithms whose registry entry says
  // takesSegments; send and recv are null then): the vector is these
  // pieces one after another, `count` elements in all.
  const AllreduceSegment* segments = nullptr;
  size_t segmentCount = 0;
  // Above 1 (only for algorithms whose registry entry says dividesResult):
  // the result is divided by it, as divideInPlace would afterwards (an
  // average's sum divided while it is still in cache).
  int divisor = 1;
};

struct BroadcastArgs {
  void* buffer;
  size_t count;
  DataType dtype;
  int root;
};

// counts[i] elements from rank i, placed at displs (prefix sums) in recv.
struct AllgatherArgs {
  const void* send;  // may point into recv at this rank's block (in place)
  void* recv;
  std::vector<size_t> counts;
  DataType dtype;
};

struct ReduceScatterArgs {
  const void* send;  // size * recvCount elements
  void* recv;        // recvCount elements
  size_t recvCount;
  DataType dtype;
  ReduceOp op;
};

struct AlltoallArgs {
  const void* send;
  void* recv;
  size_t countPerRank;
  DataType dtype;
};

}  // namespace kolo::collectives
