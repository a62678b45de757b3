// Ranks agree on an operation before moving data.
//
// Every collective call is described by an OpDescriptor (kind, dtype, op,
// count, root, ...). Before data moves, the ranks exchange descriptors
// (through shared memory on one host: one step of the ShmGroup; otherwise
// an allgather of 32-byte records). Each rank then compares all of them in
// the same way, so every rank throws the same Error(kMismatch), naming the
// first rank that disagrees with rank 0 and both values — instead of
// hanging or silently corrupting data.
//
// A rank whose own arguments are invalid (null buffer, bad root) still takes
// part in the exchange with `invalid` set, so the other ranks fail with an
// error naming it rather than waiting for it until the timeout.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <kolo/error.h>

#include "collectives/context.h"

namespace kolo::shm {
class ShmGroup;
}

namespace kolo::collectives {

enum class CollectiveKind : uint8_t {
  kAllreduce,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kBarrier,
  kFinalize,  // the closing step of a communicator (finalize, destructor)
};
const char* toString(CollectiveKind kind);

// Whether `e` is the error of a departed rank (a finalize descriptor met a
// collective's): every rank computes it from the same descriptors, so no
// rank needs to tell another.
bool isDeparture(const Error& e);

struct OpDescriptor {
  CollectiveKind kind = CollectiveKind::kBarrier;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t invalid = 0;  // this rank's arguments failed validation
  int32_t root = 0;
  uint64_t count = 0;
  uint64_t extra = 0;     // allgather with varying counts: a hash of all counts
  uint64_t sequence = 0;  // the communicator's operation number
};
static_assert(sizeof(OpDescriptor) == 32);

// OpDescriptor::extra of a kFinalize descriptor: how the rank leaves
// (0: it finalized, i.e. destroyed its communicator).
inline constexpr uint64_t kFinalizeAtExit = 1;  // the process exits without finalize

// Throws Error(kMismatch) when any descriptor differs from ranks[0]'s, or
// Error(kInvalidArgument) naming a rank that flagged invalid arguments.
// `self` is this rank; it is not needed for the verdict (all ranks reach the
// same one) but lets the message say "this rank".
void verifyDescriptors(std::span<const OpDescriptor> all, int self);

// One ShmGroup step: publish ours, read everybody's, verify.
void exchangeAndVerify(shm::ShmGroup& group, const OpDescriptor& mine,
                       const std::vector<int>& globalRanks);

// Over the transport: allgather of descriptors, then verify.
void exchangeAndVerify(Context& ctx, const OpDescriptor& mine);

}  // namespace kolo::collectives
