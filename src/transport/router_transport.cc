#include "transport/router_transport.h"

#include <sched.h>

#include <algorithm>

#include "common/check.h"

namespace kolo::transport {

RouterTransport::RouterTransport(int rank, int size,
                                 std::vector<std::unique_ptr<Transport>> parts,
                                 std::vector<int> routes, std::chrono::microseconds spin,
                                 std::chrono::milliseconds timeout)
    : rank_(rank),
      size_(size),
      parts_(std::move(parts)),
      routes_(std::move(routes)),
      timeout_(timeout) {
  KOLO_CHECK_EQ(static_cast<int>(routes_.size()), size_);
  KOLO_CHECK(!parts_.empty() || size_ == 1);
  for (int r : routes_)
    KOLO_CHECK(parts_.empty() || (r >= 0 && r < static_cast<int>(parts_.size())));
  spin_ = spin;
}

Transport& RouterTransport::partFor(int peer) {
  if (peer < 0 || peer >= size_) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "rank " << peer
                                                    << " is out of range for a group of "
                                                    << size_ << " ranks");
  }
  if (parts_.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "rank " << peer << " has no link from itself");
  }
  return *parts_[routes_[peer]];
}

RequestPtr RouterTransport::isend(int dst, Tag tag, const void* data, size_t bytes) {
  return partFor(dst).isend(dst, tag, data, bytes);
}

RequestPtr RouterTransport::irecv(int src, Tag tag, void* data, size_t bytes) {
  if (src == kAnySource) {
    if (parts_.size() > 1) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "a receive from any rank is not supported when ranks are reached "
                 "through both shared memory and tcp (set KOLO_TRANSPORT=tcp)");
    }
    if (parts_.empty())
      KOLO_THROW(ErrorCode::kInvalidArgument, "no peers to receive from");
    return parts_[0]->irecv(src, tag, data, bytes);
  }
  return partFor(src).irecv(src, tag, data, bytes);
}

bool RouterTransport::progress() {
  bool moved = false;
  for (auto& p : parts_) moved |= p->progress();
  return moved;
}

void RouterTransport::idle(std::chrono::microseconds max) {
  if (parts_.size() <= 1) {
    if (parts_.empty())
      Transport::idle(max);
    else
      parts_[0]->idle(max);
    return;
  }
  // Shared memory has no event to sleep on: keep the waits short so shm
  // traffic is noticed, and let tcp's poll() carry most of the wait.
  for (auto& p : parts_) p->idle(std::min(max, std::chrono::microseconds(50)));
}

std::optional<bool> RouterTransport::silentFor(int peer,
                                               std::chrono::milliseconds d) const {
  if (parts_.empty() || peer < 0 || peer >= size_) return std::nullopt;
  return parts_[routes_[peer]]->silentFor(peer, d);
}

void RouterTransport::abort(const Error& cause) {
  for (auto& p : parts_) {
    try {
      p->abort(cause);
    } catch (...) {
      // best effort: the other parts still get told
    }
  }
}

void RouterTransport::setIsolatePeerFailures(bool on) {
  for (auto& p : parts_) p->setIsolatePeerFailures(on);
}

bool RouterTransport::isolatesPeerFailures() const {
  return !parts_.empty() && std::all_of(parts_.begin(), parts_.end(), [](const auto& p) {
    return p->isolatesPeerFailures();
  });
}

bool RouterTransport::peerLost(int peer) const {
  if (parts_.empty() || peer < 0 || peer >= size_) return false;
  return parts_[routes_[peer]]->peerLost(peer);
}

std::chrono::milliseconds RouterTransport::timeout() const {
  auto t = timeout_;
  for (auto& p : parts_) t = std::min(t, p->timeout());
  return t;
}

}  // namespace kolo::transport
