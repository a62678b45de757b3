// TcpTransport: tagged messages over one TCP connection per pair of ranks.
// This file: posting (isend/irecv), the progress engine, liveness,
// failure, orderly shutdown and the public facade; the implementation
// class and its nomenclature are in tcp_transport_impl.h, setup in
// tcp_setup.cc, the frame reader and writer in tcp_frames.cc.
//
// progress() makes no system call when nothing is pending. Otherwise it
// writes every peer's queue and reads every peer (directly with recv() for
// up to kDirectPollPeers peers, after a zero-timeout poll() beyond that),
// so both directions advance in one call. idle() blocks in ppoll() on all
// sockets (readable, and writable where sends are queued).
//
// Failure: EOF or a socket error from a peer that did not say goodbye is
// Error(kPeerLost) naming it; the transport breaks: every pending request
// fails with that error, progress() rethrows it, and later isend/irecv
// return requests already failed with it.
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/check.h"
#include "common/logging.h"
#include "common/sha256.h"
#include "rendezvous/store.h"
#include "transport/tcp/tcp_handshake.h"
#include "transport/tcp/tcp_transport_impl.h"

namespace kolo::transport {

using namespace tcp;

// --------------------------------------------------------------- posting

void TcpTransport::Impl::checkPeerArgument(int peer, const char* what,
                                           bool allowAny) const {
  if (allowAny && peer == kAnySource) return;
  if (peer < 0 || peer >= size_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: rank " << rank_ << " cannot " << what << " rank " << peer
                                      << " (world size " << size_ << ")");
  }
  if (peer != rank_ && !peers_[peer].linked) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: rank " << rank_ << " cannot " << what << " rank " << peer
                                      << ": no link to it (not selected in "
                                         "Options::connect)");
  }
}

RequestPtr TcpTransport::Impl::failedRequest(Request::Kind kind, int peer, Tag tag,
                                             size_t bytes) {
  auto r = std::make_shared<Request>(kind, peer, tag, bytes);
  r->fail(error_);
  return r;
}

RequestPtr TcpTransport::Impl::isend(int dst, Tag tag, const void* data, size_t bytes) {
  checkPeerArgument(dst, "send to", false);
  if (data == nullptr && bytes > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "tcp transport: rank "
                                                << rank_ << ": send of " << bytes
                                                << " bytes to rank " << dst
                                                << " from a null buffer");
  }
  if (bytes & kControlBit) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: message of " << bytes << " bytes");
  }
  if (error_) return failedRequest(Request::Kind::kSend, dst, tag, bytes);
  auto request = std::make_shared<Request>(Request::Kind::kSend, dst, tag, bytes);
  if (dst == rank_) {
    sendToSelf(request, data);
    return request;
  }
  Peer& p = peers_[dst];
  if (p.lost) return lostRequest(Request::Kind::kSend, p, tag, bytes);
  if (p.goodbye) {
    request->fail(std::make_exception_ptr(
        Error(ErrorCode::kPeerLost,
              "rank " + std::to_string(dst) + " has shut down its transport; rank " +
                  std::to_string(rank_) + " cannot send to it",
              dst)));
    return request;
  }
  p.sendQueue.push_back(SendItem{request, Header{tag, bytes},
                                 static_cast<const uint8_t*>(data),
                                 sizeof(Header) + bytes, 0});
  ++sendsPending_;
  if (p.sendQueue.size() == 1) {
    try {
      flushPeer(p);
    } catch (const Error&) {
      // The transport broke; `request` was failed with the error.
    } catch (const PeerDropped&) {
      // The peer was dropped; `request` was failed with its loss.
    }
  }
  return request;
}

void TcpTransport::Impl::sendToSelf(const RequestPtr& request, const void* data) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    Request& r = *it->request;
    if (r.tag != request->tag || (r.peer != rank_ && r.peer != kAnySource)) continue;
    if (r.bytes != request->bytes) {
      r.fail(mismatch(rank_, r.tag, request->bytes, r.bytes));
    } else {
      if (r.bytes > 0) std::memcpy(it->data, data, r.bytes);
      r.peer = rank_;
      r.complete();
    }
    --recvsPending_;
    posted_.erase(it);
    request->complete();
    return;
  }
  Buffer buffer = takeBuffer(request->bytes);
  if (request->bytes > 0) std::memcpy(buffer.data.get(), data, request->bytes);
  unexpected_.push_back(
      Unexpected{rank_, request->tag, request->bytes, request->bytes, std::move(buffer)});
  request->complete();
}

RequestPtr TcpTransport::Impl::irecv(int src, Tag tag, void* data, size_t bytes) {
  checkPeerArgument(src, "receive from", true);
  if (data == nullptr && bytes > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "tcp transport: rank "
                                                << rank_ << ": receive of " << bytes
                                                << " bytes from rank " << src
                                                << " into a null buffer");
  }
  if (error_) return failedRequest(Request::Kind::kRecv, src, tag, bytes);
  auto request = std::make_shared<Request>(Request::Kind::kRecv, src, tag, bytes);
  auto* out = static_cast<uint8_t*>(data);

  // An unexpected message that arrived (or is arriving) first?
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->tag != tag || (src != kAnySource && it->source != src)) continue;
    const bool whole = it->received == it->bytes;
    Peer* p = it->source == rank_ ? nullptr : &peers_[it->source];
    request->peer = it->source;
    if (it->bytes != bytes) {
      request->fail(mismatch(it->source, tag, it->bytes, bytes));
      if (!whole) {  // the rest of its payload is discarded as it comes
        p->toUnexpected = false;
        p->target = nullptr;
      }
    } else if (whole) {
      if (bytes > 0) std::memcpy(out, it->buffer.data.get(), bytes);
      request->complete();
    } else {
      // Still arriving: take over, the rest goes straight to `out`.
      if (it->received > 0) std::memcpy(out, it->buffer.data.get(), it->received);
      p->toUnexpected = false;
      p->target = out;
      p->request = request;
      ++recvsPending_;
    }
    recycle(std::move(it->buffer));
    unexpected_.erase(it);
    return request;
  }

  if (src != kAnySource && src != rank_ && peers_[src].lost) {
    return lostRequest(Request::Kind::kRecv, peers_[src], tag, bytes);
  }
  if (src == kAnySource && !isolate_ && firstLoss()) {
    breakWith(firstLoss());
    return failedRequest(Request::Kind::kRecv, src, tag, bytes);
  }
  if (src != kAnySource && src != rank_ && peers_[src].closed) {
    request->fail(std::make_exception_ptr(
        Error(ErrorCode::kPeerLost,
              "rank " + std::to_string(src) + " has shut down its transport; rank " +
                  std::to_string(rank_) + " cannot receive from it",
              src)));
    return request;
  }
  posted_.push_back(Posted{request, out});
  ++recvsPending_;
  return request;
}

// -------------------------------------------------------------- progress

bool TcpTransport::Impl::progress() {
  if (error_) std::rethrow_exception(error_);
  if (recvsPending_ == 0 && sendsPending_ == 0) return false;
  try {
    return moveAll();
  } catch (const PeerDropped&) {
    return true;  // a peer was dropped (its requests failed): look again
  }
}

// progress()'s body: writes every queue, reads every peer.
bool TcpTransport::Impl::moveAll() {
  bool moved = false;
  if (sendsPending_ > 0) {
    for (Peer* p : active_) {
      if (!p->sendQueue.empty()) moved |= flushPeer(*p);
    }
  }
  if (active_.size() <= kDirectPollPeers) {
    for (size_t i = 0; i < active_.size(); ++i) moved |= readPeer(*active_[i]);
  } else {
    for (auto& pfd : pollSet_) pfd.events = POLLIN;
    int n = ::poll(pollSet_.data(), pollSet_.size(), 0);
    if (n > 0) {
      // readPeer may close a peer (orderly EOF) and rebuild the set: walk a
      // copy of the ready list.
      std::vector<Peer*> ready;
      for (size_t i = 0; i < pollSet_.size(); ++i) {
        if (pollSet_[i].revents != 0) ready.push_back(active_[i]);
      }
      for (Peer* p : ready) moved |= readPeer(*p);
    }
  }
  if (moved) {
    // A receive may have freed room on the other side; resume writing.
    for (Peer* p : active_) {
      if (!p->sendQueue.empty()) flushPeer(*p);
    }
  }
  return moved;
}

void TcpTransport::Impl::idle(std::chrono::microseconds max) {
  if (error_ || pollSet_.empty()) {
    std::this_thread::sleep_for(max);
    return;
  }
  sendHeartbeats();
  for (size_t i = 0; i < active_.size(); ++i) {
    pollSet_[i].events =
        static_cast<short>(POLLIN | (active_[i]->sendQueue.empty() ? 0 : POLLOUT));
  }
  timespec ts{static_cast<time_t>(max.count() / 1000000),
              static_cast<long>((max.count() % 1000000) * 1000)};
  ::ppoll(pollSet_.data(), pollSet_.size(), &ts, nullptr);
}

// Heartbeats go out only while this rank waits (idle), which is exactly
// when a peer may be blocked on it.
void TcpTransport::Impl::sendHeartbeats() {
  if (!heartbeat_.takeRound(Clock::now())) return;
  for (Peer* p : active_) {
    // A peer we are still streaming to hears from us anyway.
    if (!p->sendQueue.empty() || p->goodbye) continue;
    Header h{0, kHeartbeat};
    // With an empty queue the stream is at a frame boundary; a partial write
    // is finished through the queue like any frame.
    ssize_t n = ::send(p->fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0 && static_cast<size_t>(n) < sizeof(h)) {
      p->sendQueue.push_back(
          SendItem{nullptr, h, nullptr, sizeof(Header), static_cast<size_t>(n)});
      ++sendsPending_;
    }
  }
}

std::optional<bool> TcpTransport::Impl::silentFor(int peer,
                                                  std::chrono::milliseconds d) const {
  if (peer < 0 || peer >= size_ || peer == rank_ || !peers_[peer].linked) {
    return std::nullopt;
  }
  return heartbeat_.silentFor(peer, d, Clock::now());
}

std::exception_ptr TcpTransport::Impl::mismatch(int source, Tag tag, size_t sent,
                                                size_t expected) const {
  std::ostringstream os;
  os << "size mismatch: rank " << source << " sent " << sent << " bytes with tag " << tag
     << " but rank " << rank_ << " posted a receive of " << expected << " bytes";
  return std::make_exception_ptr(Error(ErrorCode::kMismatch, os.str(), source));
}

// ------------------------------------------------------------ utilities

TcpTransport::Impl::Buffer TcpTransport::Impl::takeBuffer(size_t bytes) {
  if (bytes == 0) return Buffer{};
  auto best = pool_.end();
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->capacity >= bytes && (best == pool_.end() || it->capacity < best->capacity)) {
      best = it;
    }
  }
  if (best != pool_.end()) {
    Buffer b = std::move(*best);
    pool_.erase(best);
    poolBytes_ -= b.capacity;
    return b;
  }
  return Buffer{std::unique_ptr<uint8_t[]>(new uint8_t[bytes]), bytes};
}

void TcpTransport::Impl::recycle(Buffer&& buffer) {
  if (buffer.capacity == 0 || buffer.capacity > kPoolMaxBytes) return;
  while (!pool_.empty() && poolBytes_ + buffer.capacity > kPoolMaxBytes) {
    poolBytes_ -= pool_.front().capacity;
    pool_.erase(pool_.begin());
  }
  poolBytes_ += buffer.capacity;
  pool_.push_back(std::move(buffer));
}

void TcpTransport::Impl::rebuildPollSet() {
  pollSet_.clear();
  for (Peer* p : active_) pollSet_.push_back({p->fd, POLLIN, 0});
}

// Orderly close: flush what is queued plus a goodbye frame to each peer,
// bounded in time, reading meanwhile so that peers flushing to us advance.
void TcpTransport::Impl::shutdown() {
  if (error_) return;
  for (Peer* p : active_) {
    if (p->goodbye) continue;  // it is closing: nothing more to tell it
    p->sendQueue.push_back(
        SendItem{nullptr, Header{0, kGoodbye}, nullptr, sizeof(Header), 0});
    ++sendsPending_;
  }
  const auto deadline =
      Clock::now() + std::min<Clock::duration>(options_.timeout, std::chrono::seconds(2));
  try {
    while (sendsPending_ > 0 && Clock::now() < deadline) {
      if (!progress()) idle(std::chrono::microseconds(1000));
    }
  } catch (const Error&) {
    // A peer died meanwhile: nothing more to deliver.
  }
}

// ---------------------------------------------------------------- facade

std::optional<bool> TcpTransport::silentFor(int peer, std::chrono::milliseconds d) const {
  return impl_->silentFor(peer, d);
}

void TcpTransport::abort(const Error& cause) {
  impl_->abort(cause);
}

std::unique_ptr<TcpTransport> TcpTransport::create(const Options& options,
                                                   rendezvous::Store& store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "tcp transport: rank " << options.rank << " of size " << options.size);
  }
  if (!options.connect.empty() &&
      options.connect.size() != static_cast<size_t>(options.size)) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "tcp transport: Options::connect has "
                                                << options.connect.size()
                                                << " entries for " << options.size
                                                << " ranks");
  }
  auto impl = std::make_unique<Impl>(options);
  impl->setup(store);
  std::unique_ptr<TcpTransport> transport(new TcpTransport(std::move(impl)));
  transport->spin_ = options.spin;
  return transport;
}

TcpTransport::TcpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpTransport::~TcpTransport() = default;

int TcpTransport::rank() const {
  return impl_->rank();
}
int TcpTransport::size() const {
  return impl_->size();
}
RequestPtr TcpTransport::isend(int dst, Tag tag, const void* data, size_t bytes) {
  return impl_->isend(dst, tag, data, bytes);
}
RequestPtr TcpTransport::irecv(int src, Tag tag, void* data, size_t bytes) {
  return impl_->irecv(src, tag, data, bytes);
}
bool TcpTransport::progress() {
  return impl_->progress();
}
void TcpTransport::idle(std::chrono::microseconds max) {
  impl_->idle(max);
}
std::chrono::milliseconds TcpTransport::timeout() const {
  return impl_->timeout();
}
void TcpTransport::setIsolatePeerFailures(bool on) {
  impl_->setIsolate(on);
}
bool TcpTransport::isolatesPeerFailures() const {
  return impl_->isolates();
}
bool TcpTransport::peerLost(int peer) const {
  return impl_->lost(peer);
}
bool TcpTransport::connected(int peer) const {
  return impl_->connected(peer);
}

}  // namespace kolo::transport
