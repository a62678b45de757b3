// A Transport that is a view of a subset of another transport's ranks: the
// sub-groups (ranks of one host, one rank per host) that hierarchical
// collectives run flat algorithms over.
//
// Ranks: members[i] is the parent rank of group rank i; rank() is the index
// of parent.rank() in members. isend/irecv translate group ranks to parent
// ranks; a receive from kAnySource is posted on the parent as such and its
// request reports the sender as a group rank once done.
//
// Contract
// - Ownership: borrows the parent, which must outlive the group. Requests
//   returned are the group's own (peer in group ranks); they complete as
//   progress() runs, which drives the parent.
// - Tags are the parent's: messages of a group and of its parent (or of
//   another group over the same parent) between the same two ranks must use
//   different tags. A kAnySource receive may match a message from any parent
//   rank, member or not, so a group that receives from kAnySource must own
//   its tags on the parent.
// - Thread safety: as Transport; the group and its parent are one transport
//   for this purpose (one thread at a time over both).
// - Failure: the parent's errors pass through unchanged, and timeouts in
//   wait() name ranks through globalRank(): both name the job's global
//   ranks, not group ranks. The constructor throws
//   Error(kInvalidArgument) when parent.rank() is not a member, a member is
//   out of the parent's range or appears twice.
#pragma once

#include <chrono>
#include <vector>

#include "transport/transport.h"

namespace kolo::transport {

class GroupTransport : public Transport {
 public:
  GroupTransport(Transport& parent, std::vector<int> members,
                 std::chrono::microseconds spin = std::chrono::microseconds(100));

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }

  RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int src, Tag tag, void* data, size_t bytes) override;
  bool progress() override;
  void idle(std::chrono::microseconds max) override;
  std::chrono::milliseconds timeout() const override;
  bool blocksInIdle() const override { return parent_.blocksInIdle(); }
  // The parent's global rank of group rank r (errors name global ranks).
  int globalRank(int r) const override;
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const override;
  void abort(const Error& cause) override;
  // Isolation is the parent's (a group and its parent are one transport):
  // setting it here sets it on the parent.
  void setIsolatePeerFailures(bool on) override { parent_.setIsolatePeerFailures(on); }
  bool isolatesPeerFailures() const override { return parent_.isolatesPeerFailures(); }
  bool peerLost(int peer) const override;

  const std::vector<int>& members() const { return members_; }
  Transport& parent() const { return parent_; }

 private:
  struct Pending {
    RequestPtr group;   // handed to the caller
    RequestPtr parent;  // posted on the parent
  };

  int parentRank(int groupRank, const char* what) const;
  int groupRank(int parentRank) const;  // -1 for a non-member
  // Completes the group requests whose parent request is done.
  bool reap();

  Transport& parent_;
  std::vector<int> members_;
  int rank_ = -1;
  std::vector<Pending> pending_;
};

}  // namespace kolo::transport
