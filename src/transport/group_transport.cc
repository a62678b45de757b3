#include "transport/group_transport.h"

#include <algorithm>
#include <string>

#include "common/check.h"

namespace kolo::transport {

GroupTransport::GroupTransport(Transport& parent, std::vector<int> members,
                               std::chrono::microseconds spin)
    : parent_(parent), members_(std::move(members)) {
  spin_ = spin;
  const int n = parent_.size();
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < members_.size(); ++i) {
    const int m = members_[i];
    if (m < 0 || m >= n) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "group member " << i << " is rank " << m
                                 << ", outside the parent's ranks [0, " << n << ")");
    }
    if (seen[m]) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "rank " << m << " appears twice among the group's members");
    }
    seen[m] = true;
    if (m == parent_.rank()) rank_ = static_cast<int>(i);
  }
  if (rank_ < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << parent_.rank() << " builds a group of " << members_.size()
                       << " ranks that does not include it");
  }
}

int GroupTransport::parentRank(int groupRank, const char* what) const {
  if (groupRank < 0 || groupRank >= size()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << " rank " << groupRank << " of a group of " << size()
                    << " ranks (group rank " << rank_ << ", global rank "
                    << parent_.rank() << ")");
  }
  return members_[groupRank];
}

int GroupTransport::groupRank(int parentRank) const {
  auto it = std::find(members_.begin(), members_.end(), parentRank);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

RequestPtr GroupTransport::isend(int dst, Tag tag, const void* data, size_t bytes) {
  auto p = parent_.isend(parentRank(dst, "send to"), tag, data, bytes);
  auto g = std::make_shared<Request>(Request::Kind::kSend, dst, tag, bytes);
  pending_.push_back({g, std::move(p)});
  return g;
}

RequestPtr GroupTransport::irecv(int src, Tag tag, void* data, size_t bytes) {
  const int psrc = src == kAnySource ? kAnySource : parentRank(src, "receive from");
  auto p = parent_.irecv(psrc, tag, data, bytes);
  auto g = std::make_shared<Request>(Request::Kind::kRecv, src, tag, bytes);
  pending_.push_back({g, std::move(p)});
  return g;
}

bool GroupTransport::reap() {
  bool any = false;
  for (size_t i = 0; i < pending_.size();) {
    Pending& e = pending_[i];
    if (!e.parent->done()) {
      ++i;
      continue;
    }
    if (e.group->peer == kAnySource) e.group->peer = groupRank(e.parent->peer);
    if (e.parent->error) {
      e.group->fail(e.parent->error);
    } else {
      e.group->complete();
    }
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
    any = true;
  }
  return any;
}

bool GroupTransport::progress() {
  const bool moved = parent_.progress();
  return reap() || moved;
}

void GroupTransport::idle(std::chrono::microseconds max) {
  parent_.idle(max);
}

std::chrono::milliseconds GroupTransport::timeout() const {
  return parent_.timeout();
}

std::optional<bool> GroupTransport::silentFor(int peer,
                                              std::chrono::milliseconds d) const {
  if (peer < 0 || peer >= size()) return std::nullopt;
  return parent_.silentFor(members_[peer], d);
}

void GroupTransport::abort(const Error& cause) {
  parent_.abort(cause);
}

bool GroupTransport::peerLost(int peer) const {
  return peer >= 0 && peer < size() && parent_.peerLost(members_[peer]);
}

int GroupTransport::globalRank(int r) const {
  if (r < 0 || r >= size()) return r;
  return parent_.globalRank(members_[r]);
}

}  // namespace kolo::transport
