// Shared-memory transport, its messages (isend, irecv, progress, idle,
// abort): see shm_transport.h for the layout and contract. Its set-up is in
// shm_transport_setup.cc, the segment's layout in shm_segment.h.
//
// Wire format of a ring
//   Each message is a 16-byte header {tag, bytes} followed by the payload.
//   Headers start at 16-byte aligned ring positions (both sides round the
//   position up before a header), so a header never wraps around the ring
//   end; payloads may wrap and are copied in two pieces then.
//
// Producer (pumpSend): for the oldest pending send to a peer, writes the
//   header, then the payload in chunks of at most kChunk bytes as ring space
//   allows, publishing `head` (release) after each chunk so the consumer can
//   copy the first chunk while the second is written. A send completes once
//   its last byte is in the ring. Sends to one peer leave in posting order.
//
// Consumer (pumpRecv): reads a header (acquire load of `head`), matches it
//   against the posted receives (first posted wins; kAnySource matches any
//   sender) and copies the payload straight into the user's buffer; with no
//   matching receive the payload goes into an unexpected-message buffer, so
//   a message with another tag never blocks the ring. After each chunk it
//   publishes `tail` (release) to give the space back.
//
// irecv first looks among the unexpected messages (arrival order); a
//   message still streaming in is claimed: the prefix is copied and the rest
//   flows straight into the user's buffer.
//
// Waiting: Transport::wait spins/yields via Backoff, then calls idle(), which
//   sleeps on this rank's doorbell futex. A rank that publishes data or space
//   for a sleeping peer bumps that peer's doorbell and wakes it (the
//   sleeping-flag/ring-index handshake is fenced on both sides, and futex
//   waits are bounded, so a lost wake-up costs at most `max`).
//
// Memory: the ring pages are mapped at set-up (MADV_POPULATE_WRITE), and
//   large unexpected-message buffers are recycled, because a first touch of
//   a page costs a page fault (tens of microseconds in some virtual
//   machines) and the same sizes recur in collectives.
//
// Liveness: while something is pending, at most every kLivenessPeriod the
//   pids of the awaited peers are checked (kill(pid, 0) == ESRCH, or state Z
//   or X in /proc/<pid>/stat: a killed process that nobody reaped yet), and
//   their abort notices: a rank that fails (abort()) writes its error into
//   its own segment's header and rings every peer's doorbell, so a peer
//   waiting on it fails with the same diagnosis instead of waiting for
//   KOLO_TIMEOUT (the failing rank is alive, then gone for good). Each rank
//   also keeps a pulse in its segment's header (shm_liveness.cc), so a wait
//   times out only on a peer that is really silent.
#include "transport/shm/shm_transport.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/check.h"
#include "common/logging.h"
#include "common/rank_text.h"
#include "transport/shm/futex.h"
#include "transport/shm/shm_segment.h"

namespace kolo::transport {

namespace {

constexpr uint64_t kHeaderBytes = 16;
constexpr uint64_t kChunk = 64 << 10;    // publish granularity
constexpr uint64_t kBudget = 512 << 10;  // bytes moved per pump call
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
// Unexpected-message buffers of at least kPoolMin bytes are kept for reuse,
// up to kPoolCount buffers and kPoolBytes in all.
constexpr size_t kPoolMin = 64 << 10;
constexpr size_t kPoolCount = 4;
constexpr size_t kPoolBytes = 128 << 20;

uint64_t align16(uint64_t v) {
  return (v + 15) & ~uint64_t(15);
}

using shm_layout::SegmentHeader;

using shm::futexWait;
using shm::futexWake;

}  // namespace

int ShmTransport::localIndex(int rank, const char* what) const {
  const auto& local = options_.localRanks;
  if (rank < 0 || rank >= options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport rank " << options_.rank << ": " << what << " rank " << rank
                                     << " is out of range [0, " << options_.size << ")");
  }
  auto it = std::lower_bound(local.begin(), local.end(), rank);
  if (it == local.end() || *it != rank) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport rank " << options_.rank << ": " << what << " rank " << rank
                                     << " is not on this host (local ranks ["
                                     << rankNumbers(local) << "])");
  }
  return static_cast<int>(it - local.begin());
}

RequestPtr ShmTransport::failedRequest(Request::Kind kind, int peer, Tag tag,
                                       size_t bytes) {
  auto r = std::make_shared<Request>(kind, peer, tag, bytes);
  r->fail(broken_);
  return r;
}

RequestPtr ShmTransport::isend(int dst, Tag tag, const void* data, size_t bytes) {
  int j = localIndex(dst, "send to");
  if (data == nullptr && bytes > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "shm transport rank "
                                                << options_.rank << ": send of " << bytes
                                                << " bytes to rank " << dst << " (tag "
                                                << tag << ") from a null buffer");
  }
  if (broken_) return failedRequest(Request::Kind::kSend, dst, tag, bytes);
  Peer& peer = peers_[j];
  if (peer.lost) return lostRequest(Request::Kind::kSend, peer, tag, bytes);
  auto r = std::make_shared<Request>(Request::Kind::kSend, dst, tag, bytes);
  peer.sends.push_back(PendingSend{r, static_cast<const uint8_t*>(data), 0});
  ++pendingSends_;
  if (peer.sends.size() == 1) pumpSend(peer, j);  // eager: small sends finish here
  return r;
}

RequestPtr ShmTransport::irecv(int src, Tag tag, void* data, size_t bytes) {
  int j = src == kAnySource ? kAnySource : localIndex(src, "receive from");
  if (data == nullptr && bytes > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport rank " << options_.rank << ": receive of " << bytes
                                     << " bytes (tag " << tag << ") into a null buffer");
  }
  if (broken_) return failedRequest(Request::Kind::kRecv, src, tag, bytes);
  auto r = std::make_shared<Request>(Request::Kind::kRecv, src, tag, bytes);
  auto* out = static_cast<uint8_t*>(data);

  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (it->tag != tag || (j != kAnySource && it->src != j)) continue;
    Peer& peer = peers_[it->src];
    r->peer = peer.rank;
    const bool complete = it->received == it->bytes;
    if (it->bytes != bytes) {
      std::ostringstream os;
      os << "rank " << options_.rank << " received a message of " << it->bytes
         << " bytes from rank " << peer.rank << " (tag " << tag
         << ") but the receive expects " << bytes << " bytes";
      r->fail(std::make_exception_ptr(Error(ErrorCode::kMismatch, os.str(), peer.rank)));
      if (!complete) {  // discard the rest as it arrives
        peer.dst = nullptr;
        peer.unexpected = nullptr;
      }
    } else {
      if (it->received > 0) std::memcpy(out, it->buffer.data.get(), it->received);
      if (complete) {
        r->complete();
      } else {  // the rest flows straight into the user's buffer
        peer.dst = out;
        peer.request = r;
        peer.unexpected = nullptr;
      }
    }
    giveBuffer(std::move(it->buffer));
    unexpected_.erase(it);
    return r;
  }
  if (j != kAnySource && peers_[j].lost) {
    return lostRequest(Request::Kind::kRecv, peers_[j], tag, bytes);
  }
  posted_.push_back(PostedRecv{r, j, out});
  return r;
}

void ShmTransport::ringDoorbell(Segment& segment) {
  SegmentHeader* h = segment.header();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->sleeping.load(std::memory_order_relaxed)) {
    h->doorbell.fetch_add(1, std::memory_order_release);
    futexWake(&h->doorbell);
  }
}

// Writes pending sends of one peer into its ring, up to kBudget bytes.
bool ShmTransport::pumpSend(Peer& peer, int index) {
  if (peer.sends.empty()) return false;
  Ring& ring = peer.out;
  const uint64_t capacity = ring.mask + 1;
  uint64_t tail = ring.ctl->tail.load(std::memory_order_acquire);
  uint64_t head = peer.outHead;
  uint64_t published = head;
  uint64_t moved = 0;
  auto copyIn = [&](const uint8_t* src, uint64_t n) {
    uint64_t pos = head & ring.mask;
    uint64_t first = std::min(n, capacity - pos);
    std::memcpy(ring.data + pos, src, first);
    if (n > first) std::memcpy(ring.data, src + first, n - first);
    head += n;
  };
  auto publish = [&] {
    ring.ctl->head.store(head, std::memory_order_release);
    published = head;
    tail = ring.ctl->tail.load(std::memory_order_acquire);
  };

  while (!peer.sends.empty() && moved < kBudget) {
    PendingSend& s = peer.sends.front();
    const uint64_t bytes = s.request->bytes;
    if (s.offset == 0) {
      uint64_t start = align16(head);
      if (start + kHeaderBytes - tail > capacity) {
        if (head != published) publish();
        if (start + kHeaderBytes - tail > capacity) break;
      }
      head = start;
      uint64_t h[2] = {s.request->tag, bytes};
      copyIn(reinterpret_cast<const uint8_t*>(h), kHeaderBytes);
      s.offset = kHeaderBytes;
    }
    while (s.offset < kHeaderBytes + bytes && moved < kBudget) {
      uint64_t space = capacity - (head - tail);
      if (space == 0) {
        if (head != published) publish();
        space = capacity - (head - tail);
        if (space == 0) break;
      }
      uint64_t n = std::min({space, kHeaderBytes + bytes - s.offset, kChunk});
      copyIn(s.data + (s.offset - kHeaderBytes), n);
      s.offset += n;
      moved += n;
      if (head - published >= kChunk) publish();
    }
    if (s.offset < kHeaderBytes + bytes) break;
    s.request->complete();
    peer.sends.pop_front();
    --pendingSends_;
  }
  peer.outTailSeen = tail;
  if (head == peer.outHead) return false;
  if (head != published) ring.ctl->head.store(head, std::memory_order_release);
  peer.outHead = head;
  ringDoorbell(*segments_[index]);
  return true;
}

void ShmTransport::startMessage(Peer& peer, int index, Tag tag, size_t bytes) {
  peer.reading = true;
  peer.tag = tag;
  peer.bytes = bytes;
  peer.received = 0;
  peer.dst = nullptr;
  peer.request = nullptr;
  peer.unexpected = nullptr;
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (it->request->tag != tag || (it->src != kAnySource && it->src != index)) continue;
    RequestPtr r = std::move(it->request);
    uint8_t* data = it->data;
    posted_.erase(it);
    r->peer = peer.rank;
    if (r->bytes != bytes) {
      std::ostringstream os;
      os << "rank " << options_.rank << " received a message of " << bytes
         << " bytes from rank " << peer.rank << " (tag " << tag
         << ") but the receive expects " << r->bytes << " bytes";
      r->fail(std::make_exception_ptr(Error(ErrorCode::kMismatch, os.str(), peer.rank)));
      // dst stays null: the payload is discarded.
    } else {
      peer.dst = data;
      peer.request = std::move(r);
    }
    return;
  }
  auto& u = unexpected_.emplace_back();
  u.src = index;
  u.tag = tag;
  u.bytes = bytes;
  u.buffer = takeBuffer(bytes);
  peer.dst = u.buffer.data.get();
  peer.unexpected = &u;
}

ShmTransport::Buffer ShmTransport::takeBuffer(size_t bytes) {
  if (bytes >= kPoolMin) {
    for (auto it = spareBuffers_.begin(); it != spareBuffers_.end(); ++it) {
      if (it->capacity >= bytes && it->capacity / 2 <= bytes) {
        Buffer b = std::move(*it);
        spareBuffers_.erase(it);
        spareBytes_ -= b.capacity;
        return b;
      }
    }
  }
  Buffer b;
  b.capacity = std::max<size_t>(bytes, 1);
  b.data.reset(new uint8_t[b.capacity]);
  return b;
}

void ShmTransport::giveBuffer(Buffer buffer) {
  if (buffer.capacity < kPoolMin || buffer.capacity > kPoolBytes) return;
  // Make room by dropping the oldest spares.
  while (!spareBuffers_.empty() && (spareBuffers_.size() >= kPoolCount ||
                                    spareBytes_ + buffer.capacity > kPoolBytes)) {
    spareBytes_ -= spareBuffers_.front().capacity;
    spareBuffers_.erase(spareBuffers_.begin());
  }
  spareBytes_ += buffer.capacity;
  spareBuffers_.push_back(std::move(buffer));
}

void ShmTransport::finishMessage(Peer& peer) {
  if (peer.request) peer.request->complete();
  if (peer.unexpected) peer.unexpected->received = peer.received;
  peer.reading = false;
  peer.request = nullptr;
  peer.unexpected = nullptr;
  peer.dst = nullptr;
}

// Reads what a peer put into our inbound ring, up to kBudget bytes.
bool ShmTransport::pumpRecv(Peer& peer, int index) {
  Ring& ring = peer.in;
  const uint64_t capacity = ring.mask + 1;
  uint64_t head = ring.ctl->head.load(std::memory_order_acquire);
  uint64_t tail = peer.inTail;
  if (head == tail) return false;
  uint64_t published = tail;
  uint64_t moved = 0;
  auto copyOut = [&](uint8_t* dst, uint64_t n) {
    uint64_t pos = tail & ring.mask;
    uint64_t first = std::min(n, capacity - pos);
    if (dst) {
      std::memcpy(dst, ring.data + pos, first);
      if (n > first) std::memcpy(dst + first, ring.data, n - first);
    }
    tail += n;
  };

  while (moved < kBudget) {
    if (!peer.reading) {
      uint64_t start = align16(tail);
      if (head < start + kHeaderBytes) {
        head = ring.ctl->head.load(std::memory_order_acquire);
        if (head < start + kHeaderBytes) break;
      }
      tail = start;
      uint64_t h[2];
      copyOut(reinterpret_cast<uint8_t*>(h), kHeaderBytes);
      startMessage(peer, index, h[0], h[1]);
      if (h[1] == 0) {
        finishMessage(peer);
        continue;
      }
    }
    if (head == tail) {
      head = ring.ctl->head.load(std::memory_order_acquire);
      if (head == tail) break;
    }
    uint64_t n = std::min({head - tail, uint64_t(peer.bytes - peer.received), kChunk});
    copyOut(peer.dst ? peer.dst + peer.received : nullptr, n);
    peer.received += n;
    if (peer.unexpected) peer.unexpected->received = peer.received;
    moved += n;
    if (tail - published >= kChunk) {
      ring.ctl->tail.store(tail, std::memory_order_release);
      published = tail;
    }
    if (peer.received == peer.bytes) finishMessage(peer);
  }
  if (tail == peer.inTail) return false;
  peer.inTail = tail;
  if (tail != published) ring.ctl->tail.store(tail, std::memory_order_release);
  ringDoorbell(*segments_[index]);
  return true;
}

bool ShmTransport::progress() {
  if (broken_) std::rethrow_exception(broken_);
  bool moved = false;
  const int n = static_cast<int>(peers_.size());
  for (int j = 0; j < n; ++j) {
    Peer& p = peers_[j];
    if (p.lost) continue;
    moved |= pumpRecv(p, j);
    if (!p.sends.empty()) moved |= pumpSend(p, j);
  }
  // Liveness: when nothing moved, or now and then while other peers keep
  // us busy, so a dead peer is noticed even then.
  if ((!moved || (++progressCalls_ & 1023) == 0) &&
      (pendingSends_ > 0 || !posted_.empty() ||
       std::any_of(peers_.begin(), peers_.end(),
                   [](const Peer& p) { return p.request != nullptr; }))) {
    auto now = std::chrono::steady_clock::now();
    if (now - lastLivenessCheck_ >= kLivenessPeriod) {
      lastLivenessCheck_ = now;
      checkPeers();
    }
  }
  if (moved) beat();
  return moved;
}

bool ShmTransport::anythingReady() {
  for (const Peer& p : peers_) {
    if (p.in.ctl->head.load(std::memory_order_acquire) != p.inTail) return true;
    if (!p.sends.empty() &&
        p.out.ctl->tail.load(std::memory_order_acquire) != p.outTailSeen)
      return true;
  }
  return false;
}

void ShmTransport::idle(std::chrono::microseconds max) {
  beat();
  SegmentHeader* h = segments_[me_]->header();
  uint32_t seq = h->doorbell.load(std::memory_order_acquire);
  h->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!anythingReady()) futexWait(&h->doorbell, seq, max);
  h->sleeping.store(0, std::memory_order_relaxed);
}

void ShmTransport::abort(const Error& cause) {
  if (segments_.empty() || !segments_[me_]) return;
  SegmentHeader* h = segments_[me_]->header();
  if (h->aborted.load(std::memory_order_relaxed) != 0) return;
  h->abortCode = static_cast<uint32_t>(cause.code());
  h->abortBlamed = cause.peer();
  const std::string_view what(cause.what());
  const size_t n = std::min(what.size(), sizeof h->abortMessage - 1);
  std::memcpy(h->abortMessage, what.data(), n);
  h->abortMessage[n] = '\0';
  h->aborted.store(1, std::memory_order_release);
  for (size_t j = 0; j < segments_.size(); ++j) {
    if (static_cast<int>(j) != me_ && segments_[j]) ringDoorbell(*segments_[j]);
  }
}

std::exception_ptr ShmTransport::abortNoticeOf(int j) const {
  const SegmentHeader* h = segments_[j]->header();
  if (h->aborted.load(std::memory_order_acquire) == 0) return nullptr;
  const std::string message(h->abortMessage,
                            strnlen(h->abortMessage, sizeof h->abortMessage));
  auto code = static_cast<ErrorCode>(h->abortCode);
  if (code != ErrorCode::kTimeout && code != ErrorCode::kPeerLost) {
    code = ErrorCode::kPeerLost;
  }
  const int rank = peers_[j].rank;
  const int blamed = h->abortBlamed >= 0 ? h->abortBlamed : rank;
  return std::make_exception_ptr(
      Error(code, message + " (reported by rank " + std::to_string(rank) + ")", blamed));
}

}  // namespace kolo::transport
