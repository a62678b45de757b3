// TcpTransport's frames on one connection: the writer (flushPeer) and the
// reader (readPeer), and what each received frame does (onHeader).
//
// Receive path (readPeer): bytes come from the socket into a per-peer
// staging buffer, which lets one recv() pick up many small frames (each
// such read asks for the rest of the current small payload plus
// kLookaheadBytes); headers are parsed from it and matched at once against the
// posted receives (first match wins, so receives from one source with one
// tag complete in order). A payload with at least kDirectReadBytes left is
// read by recv() straight into its target: large messages are never
// copied by us. An irecv that matches an unexpected message still in
// flight takes over: what arrived so far is copied once and the rest lands
// in the caller's buffer.
//
// Send path (flushPeer): each peer has a FIFO of frames; isend writes at
// once when the FIFO is empty (usually completing small sends inside
// isend), and progress() writes queued frames with one sendmsg() of up to
// kMaxIov slices (header and payload of several frames).
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

bool TcpTransport::Impl::flushPeer(Peer& p) {
  bool moved = false;
  iovec iov[kMaxIov];
  while (!p.sendQueue.empty()) {
    int n = 0;
    size_t attempted = 0;
    for (auto it = p.sendQueue.begin(); it != p.sendQueue.end() && n + 2 <= kMaxIov;
         ++it) {
      size_t done = it->done;
      if (done < sizeof(Header)) {
        iov[n++] = {reinterpret_cast<uint8_t*>(&it->header) + done,
                    sizeof(Header) - done};
        attempted += sizeof(Header) - done;
        done = sizeof(Header);
      }
      size_t payloadDone = done - sizeof(Header);
      size_t payloadLeft = it->total - done;
      if (payloadLeft > 0) {
        iov[n++] = {const_cast<uint8_t*>(it->data) + payloadDone, payloadLeft};
        attempted += payloadLeft;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t sent = ::sendmsg(p.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      int e = errno;
      if (e == EPIPE || e == ECONNRESET) {
        // It may have said why before it went (an abort notice naming the
        // rank really lost, which arrived before its close): read what it
        // sent first, so that this rank reports what the others report.
        readPeer(p);
        peerLost(p, "rank " + std::to_string(p.rank) + " closed its connection to rank " +
                        std::to_string(rank_) + " (process exited?)");
      }
      peerLost(p, "rank " + std::to_string(p.rank) +
                      " is unreachable: send to it from "
                      "rank " +
                      std::to_string(rank_) + " failed with " + errnoText(e));
    }
    moved = true;
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {
      SendItem& item = p.sendQueue.front();
      size_t take = std::min(left, item.total - item.done);
      item.done += take;
      left -= take;
      if (item.done == item.total) {
        if (item.request) item.request->complete();
        p.sendQueue.pop_front();
        --sendsPending_;
      }
    }
    if (static_cast<size_t>(sent) < attempted) break;  // the socket is full
  }
  return moved;
}

// Parses the frames (and payload bytes) that the staging buffer holds;
// keeps a partial header at the front for the next read.
bool TcpTransport::Impl::consumeStaging(Peer& p) {
  bool moved = false;
  // Consume what the staging buffer holds.
  while (p.stagingBegin < p.stagingEnd) {
    size_t avail = p.stagingEnd - p.stagingBegin;
    const uint8_t* at = p.staging.get() + p.stagingBegin;
    if (!p.inPayload) {
      if (avail < sizeof(Header)) break;
      p.header = readHeader(at);
      p.stagingBegin += sizeof(Header);
      onHeader(p);
    } else {
      size_t n = std::min(avail, p.remaining);
      deliver(p, at, n);
      p.stagingBegin += n;
    }
    moved = true;
  }
  if (p.stagingBegin == p.stagingEnd) {
    p.stagingBegin = p.stagingEnd = 0;
  } else if (p.stagingBegin > 0) {  // a partial header: move it to the front
    size_t avail = p.stagingEnd - p.stagingBegin;
    std::memmove(p.staging.get(), p.staging.get() + p.stagingBegin, avail);
    p.stagingBegin = 0;
    p.stagingEnd = avail;
  }
  return moved;
}

bool TcpTransport::Impl::readPeer(Peer& p) {
  if (p.closed || p.fd < 0) return false;
  bool moved = false;
  bool drained = false;
  for (;;) {
    moved |= consumeStaging(p);
    if (drained) break;

    // Read more: straight into the target for a large payload, else into
    // the staging buffer.
    uint8_t* into;
    size_t want;
    const bool direct =
        p.inPayload && p.target != nullptr && p.remaining >= kDirectReadBytes;
    if (direct) {
      into = p.target + p.offset;
      want = p.remaining;
    } else {
      // The rest of a small payload plus a look-ahead for the next frames;
      // no more, or the start of a large payload would be copied twice.
      into = p.staging.get() + p.stagingEnd;
      want = std::min(kStagingBytes - p.stagingEnd,
                      (p.inPayload ? p.remaining : 0) + kLookaheadBytes);
    }
    ssize_t n = ::recv(p.fd, into, want, MSG_DONTWAIT);
    if (n > 0) {
      moved = true;
      heartbeat_.heard(p.rank, Clock::now());
      if (direct) {
        deliver(p, nullptr, static_cast<size_t>(n));
      } else {
        p.stagingEnd += n;
      }
      // A short read means the socket is (probably) drained: consume what
      // came and stop without another recv() that would only say EAGAIN.
      drained = static_cast<size_t>(n) < want;
      continue;
    }
    if (n == 0) {
      onEof(p);
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    int e = errno;
    if (e == ECONNRESET && p.goodbye) {
      // It said goodbye and closed with our data unread: orderly too.
      onEof(p);
      return true;
    }
    if (e == ECONNRESET) {
      peerLost(p, "rank " + std::to_string(p.rank) + " closed its connection to rank " +
                      std::to_string(rank_) + " (process exited?)");
    }
    peerLost(p, "rank " + std::to_string(p.rank) +
                    " is unreachable: receive from it on "
                    "rank " +
                    std::to_string(rank_) + " failed with " + errnoText(e));
  }
  return moved;
}

void TcpTransport::Impl::onHeader(Peer& p) {
  const Header& h = p.header;
  const FrameInfo frame = classifyHeader(h);
  switch (frame.kind) {
    case FrameKind::kData: break;
    case FrameKind::kGoodbye: p.goodbye = true; return;
    case FrameKind::kHeartbeat: return;
    case FrameKind::kAbort:
      p.inPayload = true;
      p.offset = 0;
      p.remaining = frame.payloadBytes;
      p.request.reset();
      p.toUnexpected = false;
      p.abortFrame = true;
      p.abortPayload.assign(frame.payloadBytes, 0);
      p.target = p.abortPayload.data();
      return;
    case FrameKind::kMalformed:
      peerLost(p, "rank " + std::to_string(p.rank) + " sent a malformed frame to rank " +
                      std::to_string(rank_) + " (corrupt stream)");
  }
  p.inPayload = true;
  p.offset = 0;
  p.remaining = h.bytes;
  p.request.reset();
  p.toUnexpected = false;
  p.target = nullptr;
  auto it = std::find_if(posted_.begin(), posted_.end(), [&](const Posted& x) {
    return x.request->tag == h.tag &&
           (x.request->peer == p.rank || x.request->peer == kAnySource);
  });
  if (it != posted_.end()) {
    RequestPtr r = std::move(it->request);
    uint8_t* data = it->data;
    posted_.erase(it);
    r->peer = p.rank;
    if (r->bytes != h.bytes) {
      r->fail(mismatch(p.rank, h.tag, h.bytes, r->bytes));
      --recvsPending_;
    } else {
      p.request = std::move(r);
      p.target = data;
    }
  } else {
    Buffer buffer = takeBuffer(h.bytes);
    p.target = buffer.data.get();
    unexpected_.push_back(Unexpected{p.rank, h.tag, h.bytes, 0, std::move(buffer)});
    p.unexpected = std::prev(unexpected_.end());
    p.toUnexpected = true;
  }
  if (p.remaining == 0) finishPayload(p);
}

// Accounts n payload bytes; copies them from `src` unless they were read
// in place (src == nullptr).
void TcpTransport::Impl::deliver(Peer& p, const uint8_t* src, size_t n) {
  if (src != nullptr && p.target != nullptr) std::memcpy(p.target + p.offset, src, n);
  p.offset += n;
  p.remaining -= n;
  if (p.toUnexpected) p.unexpected->received = p.offset;
  if (p.remaining == 0) finishPayload(p);
}

void TcpTransport::Impl::finishPayload(Peer& p) {
  if (p.abortFrame) {
    onAbortNotice(p);
    return;
  }
  if (p.request) {
    p.request->complete();
    p.request.reset();
    --recvsPending_;
  }
  p.toUnexpected = false;
  p.target = nullptr;
  p.inPayload = false;
}

void TcpTransport::Impl::onEof(Peer& p) {
  if (!p.goodbye) {
    peerLost(p, "rank " + std::to_string(p.rank) + " closed its connection to rank " +
                    std::to_string(rank_) + " (process exited?)");
  }
  // An orderly close. Requests that still need this peer cannot finish.
  bool needed = p.inPayload || !p.sendQueue.empty() ||
                std::any_of(posted_.begin(), posted_.end(),
                            [&](const Posted& x) { return x.request->peer == p.rank; });
  if (needed) {
    peerLost(p, "rank " + std::to_string(p.rank) +
                    " shut down its transport while rank " + std::to_string(rank_) +
                    " still exchanged messages with it");
  }
  p.closed = true;
  ::close(p.fd);
  p.fd = -1;
  std::erase(active_, &p);
  rebuildPollSet();
}

void TcpTransport::Impl::onAbortNotice(Peer& p) {
  p.abortFrame = false;
  p.inPayload = false;
  p.target = nullptr;
  AbortInfo notice =
      decodeAbortNotice(p.abortPayload.data(), p.abortPayload.size(), p.rank, size_);
  const std::string& message = notice.message;
  if (isolate_) {
    // Its transport broke: for this rank that is the loss of that peer.
    dropPeer(p, std::make_exception_ptr(Error(
                    ErrorCode::kPeerLost,
                    "rank " + std::to_string(p.rank) + " failed: " + message, p.rank)));
    throw PeerDropped{};
  }
  breakWith(std::make_exception_ptr(
      Error(notice.code, message + " (reported by rank " + std::to_string(p.rank) + ")",
            notice.blamed)));
  std::rethrow_exception(error_);
}

}  // namespace kolo::transport
