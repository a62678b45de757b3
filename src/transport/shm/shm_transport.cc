// Shared-memory transport: see shm_transport.h for the layout and contract.
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

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/check.h"
#include "common/logging.h"
#include "common/private_path.h"
#include "common/rank_text.h"
#include "rendezvous/store.h"
#include "transport/shm/futex.h"

namespace kolo::transport {

namespace {

constexpr uint64_t kMagic = 0x6b6f6c6f73686d31ULL;  // "koloshm1"
constexpr uint64_t kHeaderBytes = 16;
constexpr uint64_t kChunk = 64 << 10;    // publish granularity
constexpr uint64_t kBudget = 512 << 10;  // bytes moved per pump call
constexpr size_t kMinRing = 4096;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);
// Unexpected-message buffers of at least kPoolMin bytes are kept for reuse,
// up to kPoolCount buffers and kPoolBytes in all.
constexpr size_t kPoolMin = 64 << 10;
constexpr size_t kPoolCount = 4;
constexpr size_t kPoolBytes = 128 << 20;

uint64_t align16(uint64_t v) {
  return (v + 15) & ~uint64_t(15);
}

struct SegmentHeader {
  uint64_t magic;
  uint64_t count;      // rings in this segment (local ranks)
  uint64_t ringBytes;  // capacity of each ring
  int64_t ownerRank;
  alignas(128) std::atomic<uint32_t> doorbell;  // futex word
  std::atomic<uint32_t> sleeping;               // owner is (about to be) asleep
  // The owner's abort notice (abort()): its error code, then the message,
  // written before `aborted` is set with release order.
  std::atomic<uint32_t> aborted;
  uint32_t abortCode;
  int32_t abortBlamed;  // the rank the error names, -1 when none
  char abortMessage[476];
  // The owner's pulse (shm_liveness.cc): bumped whenever it waits (idle())
  // or its progress() moves data; on its own cache line, written only by
  // the owner, read by the peers waiting on it.
  alignas(128) std::atomic<uint64_t> pulse;
};

constexpr size_t kHeaderArea = 768;
constexpr size_t kCtlBytes = 256;
static_assert(sizeof(SegmentHeader) <= kHeaderArea);

size_t dataOffset(size_t count) {
  return (kHeaderArea + count * kCtlBytes + 4095) & ~size_t(4095);
}
size_t segmentBytes(size_t count, size_t ringBytes) {
  return dataOffset(count) + count * ringBytes;
}

using shm::futexWait;
using shm::futexWake;

// Maps the pages of [offset, offset + bytes) now, in one system call:
// touching fresh pages one fault at a time costs tens of microseconds per
// page in some virtual machines. Best effort (needs Linux 5.14).
void populate(void* base, size_t offset, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  madvise(static_cast<uint8_t*>(base) + offset, bytes, MADV_POPULATE_WRITE);
}

std::string sanitize(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) break;
    out += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')
               ? c
               : '_';
  }
  return out;
}

}  // namespace

struct ShmTransport::RingCtl {
  alignas(128) std::atomic<uint64_t> head;  // written by the producer only
  alignas(128) std::atomic<uint64_t> tail;  // written by the consumer only
};

// One mapped segment. The creator unlinks it when destroyed before the
// set-up barrier unlinked it (error paths).
struct ShmTransport::Segment {
  static_assert(sizeof(RingCtl) <= kCtlBytes);
  std::string name;
  void* base = nullptr;
  size_t bytes = 0;
  bool owner = false;
  bool unlinked = false;

  ~Segment() {
    if (base) munmap(base, bytes);
    if (owner && !unlinked) shm_unlink(name.c_str());
  }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base); }
  RingCtl* ctl(size_t i) const {
    return reinterpret_cast<RingCtl*>(static_cast<uint8_t*>(base) + kHeaderArea +
                                      i * kCtlBytes);
  }
  uint8_t* ring(size_t i) const {
    return static_cast<uint8_t*>(base) + dataOffset(header()->count) +
           i * header()->ringBytes;
  }
  void unlink() {
    if (!unlinked) {
      shm_unlink(name.c_str());  // ENOENT: a peer already did
      unlinked = true;
    }
  }
};

std::unique_ptr<ShmTransport> ShmTransport::create(const Options& options,
                                                   rendezvous::Store& store) {
  std::unique_ptr<ShmTransport> t(new ShmTransport(options));
  t->connect(store);
  return t;
}

ShmTransport::ShmTransport(const Options& options) : options_(options) {
  const auto& local = options_.localRanks;
  if (options_.size < 1 || options_.rank < 0 || options_.rank >= options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "shm transport: rank "
                                                << options_.rank << " is not in [0, "
                                                << options_.size << ")");
  }
  if (local.empty() || !std::is_sorted(local.begin(), local.end()) ||
      std::adjacent_find(local.begin(), local.end()) != local.end() ||
      local.front() < 0 || local.back() >= options_.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport rank "
                   << options_.rank << ": localRanks must be sorted, distinct and in [0, "
                   << options_.size << "), got [" << rankNumbers(local) << "]");
  }
  auto it = std::find(local.begin(), local.end(), options_.rank);
  if (it == local.end()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport: rank " << options_.rank << " is not among its localRanks ["
                                      << rankNumbers(local) << "]");
  }
  me_ = static_cast<int>(it - local.begin());
  ringBytes_ = kMinRing;
  while (ringBytes_ < options_.ringBytes) ringBytes_ <<= 1;
  spin_ = Backoff::spinFor(options_.spin.count(), static_cast<int>(local.size()));
  lastLivenessCheck_ = std::chrono::steady_clock::now();
}

ShmTransport::~ShmTransport() = default;

// Set-up, in named steps: create our segment, publish it, map the peers',
// barrier, unlink every segment, link the rings.
void ShmTransport::connect(rendezvous::Store& store) {
  const size_t n = options_.localRanks.size();
  segments_.resize(n);
  peers_.resize(n);
  segments_[me_] = createOwnSegment();
  try {
    const std::string gen = publishSegment(store);
    for (size_t j = 0; j < n; ++j) {
      peers_[j].rank = options_.localRanks[j];
      if (static_cast<int>(j) == me_) {
        peers_[j].pid = getpid();
        continue;
      }
      segments_[j] = mapPeerSegment(static_cast<int>(j), gen, store);
    }
    waitAllMapped(gen, store);
  } catch (...) {
    unlinkAll();
    unlinkOrphans();
    throw;
  }
  unlinkAll();
  linkRings();
}

void ShmTransport::unlinkAll() {
  for (auto& s : segments_)
    if (s) s->unlink();
}

// A local peer killed between creating its segment and the barrier after
// which every segment is unlinked leaves its segment in /dev/shm, and we
// may never have learnt its name. Segment names carry the job, the prefix,
// the rank and the pid: unlink those of our local peers whose process is
// gone. A living process's segment is never touched.
void ShmTransport::unlinkOrphans() {
  const std::string job =
      sanitize(options_.jobName.empty() ? "job" : options_.jobName, 80);
  const std::string prefix = sanitize(options_.keyPrefix, 40);
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    for (int rank : options_.localRanks) {
      if (rank == options_.rank) continue;
      const std::string start =
          "kolo-" + job + "-" + prefix + "-r" + std::to_string(rank) + "-";
      if (name.rfind(start, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + start.size(), nullptr, 10);
      if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        shm_unlink(("/" + name).c_str());
      }
    }
  }
  closedir(dir);
}

// Step 1: our segment (our inbound rings), created, sized, mapped, touched
// and initialised; the magic is written last.
std::unique_ptr<ShmTransport::Segment> ShmTransport::createOwnSegment() {
  const size_t n = options_.localRanks.size();
  const std::string& prefix = options_.keyPrefix;
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::ostringstream name;
  name << "/kolo-" << sanitize(options_.jobName.empty() ? "job" : options_.jobName, 80)
       << "-" << sanitize(prefix, 40) << "-r" << options_.rank << "-" << getpid() << "-"
       << counter.fetch_add(1) << "-" << std::hex << (rd() & 0xffff);
  auto own = std::make_unique<Segment>();
  own->name = name.str();
  own->bytes = segmentBytes(n, ringBytes_);
  int fd = shm_open(own->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  KOLO_SYSCHECK(
      fd, "shm transport rank " << options_.rank << ": shm_open(" << own->name << ")");
  own->owner = true;
  if (ftruncate(fd, static_cast<off_t>(own->bytes)) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    KOLO_SYSCHECK(-1, "shm transport rank " << options_.rank << ": sizing " << own->name
                                            << " to " << own->bytes << " bytes");
  }
  void* base = mmap(nullptr, own->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    KOLO_SYSCHECK(-1,
                  "shm transport rank " << options_.rank << ": mapping " << own->name);
  }
  own->base = base;
  populate(base, 0, own->bytes);
  auto* hdr = new (base) SegmentHeader;
  hdr->count = n;
  hdr->ringBytes = ringBytes_;
  hdr->ownerRank = options_.rank;
  hdr->doorbell.store(0);
  hdr->sleeping.store(0);
  hdr->pulse.store(0);
  for (size_t i = 0; i < n; ++i) {
    auto* c = new (own->ctl(i)) RingCtl;
    c->head.store(0);
    c->tail.store(0);
  }
  std::atomic_thread_fence(std::memory_order_release);
  hdr->magic = kMagic;
  return own;
}

// Step 2: publish "<pid> <name>" under this transport's generation.
// Keys of the n-th transport a rank creates under this prefix carry
// generation n, so a job may create its transports again (re-init) on a
// store that still holds the previous generation's keys.
std::string ShmTransport::publishSegment(rendezvous::Store& store) {
  const std::string& prefix = options_.keyPrefix;
  const std::string gen =
      prefix + "/g" +
      std::to_string(
          store.add(prefix + "/generation/" + std::to_string(options_.rank), 1));
  store.setString(gen + "/seg/" + std::to_string(options_.rank),
                  std::to_string(getpid()) + " " + segments_[me_]->name);

  return gen;
}

// Step 3: map local peer j's segment and check that it matches ours.
std::unique_ptr<ShmTransport::Segment> ShmTransport::mapPeerSegment(
    int j, const std::string& gen, rendezvous::Store& store) {
  const auto& local = options_.localRanks;
  const size_t n = local.size();
  std::string value =
      store.getString(gen + "/seg/" + std::to_string(local[j]), options_.connectTimeout);
  std::istringstream is(value);
  long pid = 0;
  auto seg = std::make_unique<Segment>();
  if (!(is >> pid >> seg->name)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport rank " << options_.rank << ": bad segment entry '" << value
                                     << "' published by rank " << local[j]);
  }
  peers_[j].pid = static_cast<pid_t>(pid);
  int pfd = shm_open(seg->name.c_str(), O_RDWR, 0);
  KOLO_SYSCHECK(pfd, "shm transport rank " << options_.rank << ": opening segment "
                                           << seg->name << " of rank " << local[j]);
  struct stat st;
  const bool statted = fstat(pfd, &st) == 0;
  try {
    // A segment that a stranger created (or may write) is refused by name:
    // its rings would carry our data to, and its data into, another user.
    if (statted) {
      requirePrivate(st,
                     "shm transport rank " + std::to_string(options_.rank) +
                         ": the shared-memory segment of rank " +
                         std::to_string(local[j]),
                     seg->name,
                     "its name came from the store; set KOLO_JOB_SECRET so that only "
                     "the job's ranks can publish one");
    }
  } catch (...) {
    close(pfd);
    throw;
  }
  if (!statted || static_cast<size_t>(st.st_size) < kHeaderArea) {
    close(pfd);
    KOLO_THROW(ErrorCode::kIo, "shm transport rank " << options_.rank << ": segment "
                                                     << seg->name << " of rank "
                                                     << local[j] << " is too small");
  }
  seg->bytes = static_cast<size_t>(st.st_size);
  void* pbase = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
  close(pfd);
  if (pbase == MAP_FAILED) {
    KOLO_SYSCHECK(-1, "shm transport rank " << options_.rank << ": mapping segment "
                                            << seg->name << " of rank " << local[j]);
  }
  seg->base = pbase;
  auto* ph = seg->header();
  if (ph->magic != kMagic || ph->count != n || ph->ringBytes < kMinRing ||
      (ph->ringBytes & (ph->ringBytes - 1)) != 0 ||
      seg->bytes < segmentBytes(n, ph->ringBytes) || ph->ownerRank != local[j]) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "shm transport rank "
                   << options_.rank << ": segment " << seg->name << " of rank "
                   << local[j] << " does not match: it has " << ph->count
                   << " rings for owner rank " << ph->ownerRank << ", expected " << n
                   << " for rank " << local[j]
                   << " (do all ranks pass the same localRanks?)");
  }
  // Our ring in the peer's segment, the only part we write.
  populate(pbase, 0, dataOffset(n));
  populate(pbase, dataOffset(n) + me_ * ph->ringBytes, ph->ringBytes);
  return seg;
}

// Step 4: barrier. Once every local rank mapped every segment, all can go
// (and the segments can be unlinked).
void ShmTransport::waitAllMapped(const std::string& gen, rendezvous::Store& store) {
  const auto& local = options_.localRanks;
  const size_t n = local.size();
  const std::string counterKey = gen + "/mapped/" + std::to_string(local.front());
  const std::string doneKey = gen + "/mapped-all/" + std::to_string(local.front());
  int64_t arrived = store.add(counterKey, 1);
  if (arrived == static_cast<int64_t>(n)) store.setString(doneKey, "1");
  try {
    store.get(doneKey, options_.connectTimeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    KOLO_THROW(ErrorCode::kTimeout, "shm transport rank "
                                        << options_.rank << ": only "
                                        << store.add(counterKey, 0) << " of " << n
                                        << " local ranks [" << rankNumbers(local)
                                        << "] mapped the shared-memory segments within "
                                        << options_.connectTimeout.count() / 1000.0
                                        << " s (KOLO_CONNECT_TIMEOUT)");
  }
}

// Step 5: our inbound ring from each peer is in our segment; our outbound
// ring to it is in its segment.
void ShmTransport::linkRings() {
  const size_t n = options_.localRanks.size();
  for (size_t j = 0; j < n; ++j) {
    Peer& p = peers_[j];
    p.in = Ring{segments_[me_]->ctl(j), segments_[me_]->ring(j), ringBytes_ - 1};
    Segment& s = *segments_[j];
    p.out = Ring{s.ctl(me_), s.ring(me_), s.header()->ringBytes - 1};
    peerPulses_.push_back(&s.header()->pulse);
  }
  startPulses(&segments_[me_]->header()->pulse);
}

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
