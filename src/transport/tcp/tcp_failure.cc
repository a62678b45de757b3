// TcpTransport's failures: a link that fails (the peer died, closed
// without goodbye, or sent a malformed frame), an abort notice, and this
// rank's own abort.
//
// What a failed link does depends on the mode (transport.h):
// - default: when a request needs the peer (a send queued to it, a receive
//   from it or from any rank), the transport breaks: every pending and
//   later request fails with the error, progress() rethrows it. When none
//   does, the loss is only remembered (the peer "dropped"): the transport
//   breaks with it when a later request needs that peer. So a survivor
//   whose remaining requests need other ranks finishes them, and reports
//   what the job agreed on (e.g. a departure) rather than a secondary close.
// - isolation: the peer is dropped; only requests to and from it fail (and
//   receives from any rank pending at that moment), now and later.
#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/tcp/tcp_transport_impl.h"

namespace kolo::transport {

using namespace tcp;

void TcpTransport::Impl::abort(const Error& cause) {
  if (!error_) breakWith(std::make_exception_ptr(cause));
  std::string message = cause.what();
  if (message.size() > kMaxAbortBytes - sizeof(AbortNotice)) {
    message.resize(kMaxAbortBytes - sizeof(AbortNotice));
  }
  std::vector<uint8_t> frame;
  appendHeader(frame, Header{sizeof(AbortNotice) + message.size(), kAbort});
  appendAbortNotice(frame, AbortNotice{static_cast<int32_t>(cause.code()), cause.peer()});
  frame.insert(frame.end(), message.begin(), message.end());
  // Bounded: a peer that does not drain its socket is not waited for.
  const auto deadline = Clock::now() + std::chrono::milliseconds(200);
  for (Peer* p : active_) {
    if (p->midFrame || p->goodbye || p->fd < 0) continue;
    size_t done = 0;
    while (done < frame.size() && Clock::now() < deadline) {
      ssize_t n = ::send(p->fd, frame.data() + done, frame.size() - done,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        pollfd pfd{p->fd, POLLOUT, 0};
        ::poll(&pfd, 1, 10);
        continue;
      }
      break;  // the peer is gone: nothing to tell it
    }
    if (done > 0 && done < frame.size()) p->midFrame = true;
  }
}

void TcpTransport::Impl::peerLost(Peer& p, const std::string& why) {
  auto error = std::make_exception_ptr(Error(ErrorCode::kPeerLost, why, p.rank));
  if (isolate_ || !needed(p)) {
    dropPeer(p, error);
    throw PeerDropped{};
  }
  breakWith(error);
  std::rethrow_exception(error_);
}

bool TcpTransport::Impl::needed(const Peer& p) const {
  if (!p.sendQueue.empty() || p.request) return true;
  return std::any_of(posted_.begin(), posted_.end(), [&](const Posted& x) {
    return x.request->peer == p.rank || x.request->peer == kAnySource;
  });
}

// Fails what needs `p` (in isolation mode also the receives from any rank
// pending now: the caller's notice of the loss), closes its socket, and
// remembers why for later requests (lostRequest).
void TcpTransport::Impl::dropPeer(Peer& p, std::exception_ptr error) {
  p.lost = error;
  for (auto& item : p.sendQueue) {
    if (item.request) item.request->fail(error);
  }
  sendsPending_ -= p.sendQueue.size();
  p.sendQueue.clear();
  if (p.request) {
    p.request->fail(error);
    p.request.reset();
    --recvsPending_;
  }
  if (p.inPayload && p.toUnexpected) unexpected_.erase(p.unexpected);
  p.inPayload = p.toUnexpected = p.abortFrame = false;
  p.target = nullptr;
  p.stagingBegin = p.stagingEnd = 0;
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->request->peer == p.rank || it->request->peer == kAnySource) {
      it->request->fail(error);
      --recvsPending_;
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  if (p.fd >= 0) ::close(p.fd);
  p.fd = -1;
  std::erase(active_, &p);
  rebuildPollSet();
}

// A request to or from a peer lost earlier: in isolation mode only that
// request fails; otherwise the loss now breaks the transport.
RequestPtr TcpTransport::Impl::lostRequest(Request::Kind kind, Peer& p, Tag tag,
                                           size_t bytes) {
  if (!isolate_) breakWith(p.lost);
  auto r = std::make_shared<Request>(kind, p.rank, tag, bytes);
  r->fail(p.lost);
  return r;
}

std::exception_ptr TcpTransport::Impl::firstLoss() const {
  for (const Peer& p : peers_) {
    if (p.lost) return p.lost;
  }
  return nullptr;
}

void TcpTransport::Impl::breakWith(std::exception_ptr error) {
  if (error_) return;
  error_ = error;
  for (auto& x : posted_) x.request->fail(error_);
  posted_.clear();
  for (Peer& p : peers_) {
    p.midFrame = !p.sendQueue.empty() && p.sendQueue.front().done > 0;
    for (auto& item : p.sendQueue) {
      if (item.request) item.request->fail(error_);
    }
    p.sendQueue.clear();
    if (p.request) p.request->fail(error_);
    p.request.reset();
  }
  recvsPending_ = 0;
  sendsPending_ = 0;
}

}  // namespace kolo::transport
