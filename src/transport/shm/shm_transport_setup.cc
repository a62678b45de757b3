// ShmTransport's set-up (shm_transport.h): the options' checks, then the
// named steps of connect(): create this rank's segment (its pages mapped at
// once, MADV_POPULATE_WRITE: a first touch of a page costs a page fault,
// tens of microseconds in some virtual machines), publish it, map the
// peers', wait until all are mapped, unlink every segment (and the orphans
// of dead jobs), link the rings. Moving messages is in shm_transport.cc.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "common/check.h"
#include "common/logging.h"
#include "common/private_path.h"
#include "common/rank_text.h"
#include "rendezvous/store.h"
#include "transport/shm/shm_segment.h"
#include "transport/shm/shm_transport.h"

namespace kolo::transport {

namespace {

constexpr uint64_t kMagic = 0x6b6f6c6f73686d31ULL;  // "koloshm1"
constexpr size_t kMinRing = 4096;

using shm_layout::dataOffset;
using shm_layout::kHeaderArea;
using shm_layout::segmentBytes;
using shm_layout::SegmentHeader;

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

}  // namespace kolo::transport
