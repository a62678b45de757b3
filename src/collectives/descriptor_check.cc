#include "collectives/descriptor_check.h"

#include <cstring>
#include <sstream>

#include "collectives/registry.h"
#include "common/check.h"
#include "transport/shm/shm_group.h"

namespace kolo::collectives {

const char* toString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reducescatter";
    case CollectiveKind::kAlltoall: return "alltoall";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kFinalize: return "finalize";
  }
  return "unknown";
}

namespace {

std::string describe(const OpDescriptor& d) {
  std::ostringstream os;
  os << toString(d.kind);
  if (d.kind == CollectiveKind::kBarrier || d.kind == CollectiveKind::kFinalize) {
    return os.str();
  }
  os << "(count=" << d.count << ", dtype=" << toString(static_cast<DataType>(d.dtype));
  if (d.kind == CollectiveKind::kAllreduce || d.kind == CollectiveKind::kReduceScatter) {
    os << ", op=" << toString(static_cast<ReduceOp>(d.op));
  }
  if (d.kind == CollectiveKind::kBroadcast) os << ", root=" << d.root;
  if (d.kind == CollectiveKind::kAllgather && d.extra != 0) {
    os << ", per-rank counts hash=" << std::hex << d.extra << std::dec;
  }
  os << ")";
  return os.str();
}

bool same(const OpDescriptor& a, const OpDescriptor& b) {
  // Ranks that all leave agree, however each of them leaves.
  if (a.kind == CollectiveKind::kFinalize && b.kind == CollectiveKind::kFinalize) {
    return true;
  }
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         a.count == b.count && a.extra == b.extra;
}

// A rank whose descriptor is the closing step left the job while others
// wait in a collective: every rank (the leaving one too) throws the same
// error, built from the whole list, naming the lowest such rank, how it
// left, and the collective of the lowest waiting rank.
constexpr std::string_view kLeftTheJob = " left the job (";

void checkDeparture(std::span<const OpDescriptor> all) {
  int left = -1;
  int waiting = -1;
  for (size_t r = 0; r < all.size(); ++r) {
    const bool leaving = all[r].kind == CollectiveKind::kFinalize;
    if (leaving && left < 0) left = static_cast<int>(r);
    if (!leaving && waiting < 0) waiting = static_cast<int>(r);
  }
  if (left < 0 || waiting < 0) return;
  KOLO_THROW_PEER(
      ErrorCode::kPeerLost, left,
      "rank " << left << kLeftTheJob
              << (all[left].extra == kFinalizeAtExit ? "exited without finalize"
                                                     : "finalized")
              << ") while rank " << waiting << " waited in " << describe(all[waiting])
              << " (collective #" << all[waiting].sequence << ")");
}

}  // namespace

bool isDeparture(const Error& e) {
  return e.code() == ErrorCode::kPeerLost &&
         std::string_view(e.what()).find(kLeftTheJob) != std::string_view::npos;
}

void verifyDescriptors(std::span<const OpDescriptor> all, int self) {
  checkDeparture(all);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].invalid && static_cast<int>(r) != self) {
      KOLO_THROW_PEER(ErrorCode::kInvalidArgument, static_cast<int>(r),
                      "rank " << r << " passed invalid arguments to "
                              << toString(all[r].kind) << " (see rank " << r
                              << "'s error); this rank's call fails with it");
    }
  }
  for (size_t r = 1; r < all.size(); ++r) {
    if (!same(all[0], all[r])) {
      KOLO_THROW_PEER(ErrorCode::kMismatch, static_cast<int>(r),
                      "ranks disagree on collective #"
                          << all[0].sequence << ": rank 0 called " << describe(all[0])
                          << " but rank " << r << " called " << describe(all[r]));
    }
  }
}

void exchangeAndVerify(shm::ShmGroup& group, const OpDescriptor& mine,
                       const std::vector<int>& globalRanks) {
  static_assert(sizeof(OpDescriptor) <= shm::ShmGroup::kInlineBytes);
  // One inline step: descriptor and step number share a cache line.
  const uint64_t step = group.nextSequence();
  const int parity = static_cast<int>(step & 1);
  std::memcpy(group.inlinePayload(group.localRank(), parity), &mine, sizeof(mine));
  group.publishInline(parity, step);
  group.publish(0, step);
  bool agree = true;
  for (int r = 0; r < group.localSize(); ++r) {
    if (r == group.localRank()) continue;
    group.waitInline(r, parity, step);
    agree &= std::memcmp(group.inlinePayload(r, parity), &mine, sizeof(mine)) == 0;
  }
  if (agree) return;
  std::vector<OpDescriptor> all(group.localSize());
  for (int r = 0; r < group.localSize(); ++r) {
    std::memcpy(&all[r], group.inlinePayload(r, parity), sizeof(OpDescriptor));
  }
  // The group is the whole world here, so local rank order is rank order.
  (void)globalRanks;
  verifyDescriptors(all, group.localRank());
}

void exchangeAndVerify(Context& ctx, const OpDescriptor& mine) {
  const int n = ctx.world.size();
  if (n == 1) {
    verifyDescriptors(std::span<const OpDescriptor>(&mine, 1), 0);
    return;
  }
  std::vector<OpDescriptor> all(n);
  AllgatherArgs args{&mine, all.data(), std::vector<size_t>(n, sizeof(OpDescriptor)),
                     DataType::kUInt8};
  allgatherRing(ctx, args);
  verifyDescriptors(all, ctx.world.rank());
}

}  // namespace kolo::collectives
