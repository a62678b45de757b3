#include "transport/shm/shm_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "common/backoff.h"
#include "common/check.h"
#include "common/private_path.h"
#include "common/rank_text.h"
#include "rendezvous/store.h"
#include "transport/shm/futex.h"

namespace kolo::shm {
namespace {

constexpr uint64_t kMagic = 0x6b6f6c6f73686d31ull;  // "koloshm1"
constexpr size_t kLine = 64;
constexpr size_t kHeaderBytes = 4096;

// Control area of one rank: kCounters counters, each alone on a cache line
// (written only by its owner), then at byte 512 the two inline lines.
constexpr size_t kControlBytes = 4096;

struct Header {
  uint64_t magic;
  uint64_t localSize;
  uint64_t slotBytes;
  // pids[localSize] follow, one per local rank, written by each rank.
};

static_assert(ShmGroup::kCounters * kLine <= 512, "counters overlap the inline lines");
static_assert(512 + 2 * kLine <= kControlBytes, "inline lines outside the control area");

// At byte 768 of the control area: the rank's bell, which it sleeps on
// once a wait has spun long enough. `sleeping` is written by the owner
// only; `doorbell` is bumped by any publisher that finds it set.
constexpr size_t kBellOffset = 768;
struct Bell {
  std::atomic<uint32_t> doorbell;  // futex word
  std::atomic<uint32_t> sleeping;  // the owner is (about to be) asleep
};
static_assert(kBellOffset >= 512 + 2 * kLine && kBellOffset + kLine <= kControlBytes);

// A sleeping waiter still wakes this often to check its peers' processes
// and the timeout.
constexpr std::chrono::milliseconds kSleepSlice{50};

size_t roundUp(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

size_t rankAreaBytes(size_t slotBytes) {
  return kControlBytes + 2 * roundUp(slotBytes, 4096);
}

// True when the process is gone or a zombie (dead but not yet reaped).
bool processDead(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // Format: pid (comm) S ...; comm may hold spaces or parens: take the last ')'.
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

std::unique_ptr<ShmGroup> ShmGroup::create(const Options& options,
                                           rendezvous::Store& store) {
  KOLO_CHECK_GE(options.localSize, 1);
  KOLO_CHECK_EQ(static_cast<int>(options.globalRanks.size()), options.localSize);
  KOLO_CHECK_LE(sizeof(Header) + sizeof(int64_t) * options.localSize, kHeaderBytes);
  const size_t slotBytes = roundUp(options.slotBytes, kLine);
  const size_t bytes = kHeaderBytes + options.localSize * rankAreaBytes(slotBytes);
  // The n-th group that a rank creates under this name uses generation n:
  // a later kolo_init on the same store never reads the name or the
  // attach count of an earlier world's (already unlinked) segment.
  const std::string prefix = "shmgroup/" + options.name;
  const std::string key =
      prefix + "/g" +
      std::to_string(
          store.add(prefix + "/generation/" + std::to_string(options.localRank), 1));

  std::string segment;
  int fd = -1;
  if (options.localRank == 0) {
    std::random_device rd;
    segment = "/kolo-" + std::to_string(getpid()) + "-" + std::to_string(rd());
    fd = shm_open(segment.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    KOLO_SYSCHECK(fd, "shm_open(" << segment << ")");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int e = errno;
      close(fd);
      shm_unlink(segment.c_str());
      errno = e;
      KOLO_SYSCHECK(-1, "ftruncate of shared memory "
                            << segment << " to " << bytes
                            << " bytes (is /dev/shm large enough?)");
    }
  } else {
    segment = store.getString(key + "/name", options.timeout);
    fd = shm_open(segment.c_str(), O_RDWR, 0600);
    KOLO_SYSCHECK(fd, "shm_open(" << segment << ") of local rank 0's segment");
    struct stat st {};
    if (fstat(fd, &st) == 0) {
      try {
        requirePrivate(st, "local rank 0's shared-memory segment", segment,
                       "its name came from the store; set KOLO_JOB_SECRET so that only "
                       "the job's ranks can publish one");
      } catch (...) {
        close(fd);
        throw;
      }
    }
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    if (options.localRank == 0) shm_unlink(segment.c_str());
    KOLO_SYSCHECK(-1, "mmap of shared memory " << segment << " (" << bytes << " bytes)");
  }
  Options effective = options;
  effective.slotBytes = slotBytes;
  std::unique_ptr<ShmGroup> group(new ShmGroup(effective, base, bytes));
  auto* header = static_cast<Header*>(base);
  auto* pids = reinterpret_cast<std::atomic<int64_t>*>(header + 1);
  if (options.localRank == 0) {
    header->magic = kMagic;
    header->localSize = options.localSize;
    header->slotBytes = slotBytes;
    store.setString(key + "/name", segment);
  } else if (header->magic != kMagic ||
             header->localSize != static_cast<uint64_t>(options.localSize)) {
    KOLO_THROW(ErrorCode::kMismatch, "shared memory segment "
                                         << segment << " has local size "
                                         << header->localSize << ", this rank expects "
                                         << options.localSize);
  } else if (header->slotBytes != slotBytes) {
    KOLO_THROW(ErrorCode::kMismatch, "shared memory segment "
                                         << segment << " has staging slots of "
                                         << header->slotBytes << " bytes (local rank 0's "
                                         << "KOLO_SHM_CHUNK_BYTES), local rank "
                                         << options.localRank << " expects " << slotBytes
                                         << ": set the same value on every rank");
  }
  pids[options.localRank].store(getpid(), std::memory_order_release);

  // Everyone mapped it: unlink so nothing outlives the job, even on SIGKILL.
  int64_t mapped = store.add(key + "/mapped", 1);
  if (options.localRank == 0) {
    Backoff backoff(std::chrono::microseconds(0));
    while (mapped < options.localSize) {
      if (backoff.idleFor() > options.timeout) {
        shm_unlink(segment.c_str());
        KOLO_THROW(ErrorCode::kTimeout, "only " << mapped << " of " << options.localSize
                                                << " local ranks attached to shared "
                                                   "memory within the timeout");
      }
      if (backoff.idle()) std::this_thread::sleep_for(backoff.sleepHint());
      mapped = store.add(key + "/mapped", 0);
    }
    shm_unlink(segment.c_str());
  }
  return group;
}

ShmGroup::ShmGroup(const Options& options, void* base, size_t bytes)
    : options_(options), base_(base), bytes_(bytes) {}

ShmGroup::~ShmGroup() {
  munmap(base_, bytes_);
}

uint8_t* ShmGroup::staging(int r, int slot) const {
  auto* area = static_cast<uint8_t*>(base_) + kHeaderBytes +
               static_cast<size_t>(r) * rankAreaBytes(options_.slotBytes);
  return area + kControlBytes +
         static_cast<size_t>(slot) * roundUp(options_.slotBytes, 4096);
}

static std::atomic<uint64_t>* counterAt(void* base, size_t slotBytes, int r, int which) {
  auto* area = static_cast<uint8_t*>(base) + kHeaderBytes +
               static_cast<size_t>(r) * rankAreaBytes(slotBytes);
  return reinterpret_cast<std::atomic<uint64_t>*>(area + which * kLine);
}

static Bell* bellAt(void* base, size_t slotBytes, int r) {
  auto* area = static_cast<uint8_t*>(base) + kHeaderBytes +
               static_cast<size_t>(r) * rankAreaBytes(slotBytes);
  return reinterpret_cast<Bell*>(area + kBellOffset);
}

void ShmGroup::publish(int which, uint64_t value) {
  counterAt(base_, options_.slotBytes, options_.localRank, which)
      ->store(value, std::memory_order_release);
  ringSleepers();
}

// The publisher's half of the sleep handshake (waitOn has the other): store
// the value, full fence, then read each peer's `sleeping`. A waiter sets
// `sleeping`, fences, then re-reads the value before it sleeps. With both
// fences, either the waiter sees the new value and does not sleep, or the
// publisher sees `sleeping` and bumps the bell (which also makes a
// futexWait that has not started yet return at once).
void ShmGroup::ringSleepers() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int r = 0; r < options_.localSize; ++r) {
    if (r == options_.localRank) continue;
    Bell* bell = bellAt(base_, options_.slotBytes, r);
    if (bell->sleeping.load(std::memory_order_relaxed) == 0) continue;
    bell->doorbell.fetch_add(1, std::memory_order_release);
    futexWake(&bell->doorbell);
  }
}

uint64_t ShmGroup::counter(int r, int which) const {
  return counterAt(base_, options_.slotBytes, r, which)->load(std::memory_order_acquire);
}

void ShmGroup::waitFor(int r, int which, uint64_t value) {
  waitOn(counterAt(base_, options_.slotBytes, r, which), r, value);
}

// Inline lines start at byte 512 of the control area, after the counters.
static std::atomic<uint64_t>* inlineLine(void* base, size_t slotBytes, int r,
                                         int parity) {
  auto* area = static_cast<uint8_t*>(base) + kHeaderBytes +
               static_cast<size_t>(r) * rankAreaBytes(slotBytes);
  return reinterpret_cast<std::atomic<uint64_t>*>(area + 512 + parity * kLine);
}

uint8_t* ShmGroup::inlinePayload(int r, int parity) const {
  return reinterpret_cast<uint8_t*>(inlineLine(base_, options_.slotBytes, r, parity) + 1);
}

void ShmGroup::publishInline(int parity, uint64_t step) {
  inlineLine(base_, options_.slotBytes, options_.localRank, parity)
      ->store(step, std::memory_order_release);
  ringSleepers();
}

void ShmGroup::waitInline(int r, int parity, uint64_t step) {
  waitOn(inlineLine(base_, options_.slotBytes, r, parity), r, step);
}

void ShmGroup::waitOn(const std::atomic<uint64_t>* c, int r, uint64_t value) {
  if (c->load(std::memory_order_acquire) >= value) return;
  Backoff backoff(options_.spin);
  auto lastCheck = Backoff::Clock::now();
  Bell* mine = bellAt(base_, options_.slotBytes, options_.localRank);
  while (c->load(std::memory_order_acquire) < value) {
    if (backoff.idle()) {
      // Past spinning and yielding: sleep on this rank's bell until a
      // publisher rings it (ringSleepers), at most one slice.
      const uint32_t seq = mine->doorbell.load(std::memory_order_acquire);
      mine->sleeping.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (c->load(std::memory_order_acquire) < value) {
        futexWait(&mine->doorbell, seq,
                  std::chrono::duration_cast<std::chrono::microseconds>(kSleepSlice));
      }
      mine->sleeping.store(0, std::memory_order_relaxed);
    }
    auto now = Backoff::Clock::now();
    if (now - lastCheck > std::chrono::milliseconds(100)) {
      lastCheck = now;
      checkPeer(r, c, value, "shared-memory step");
      if (backoff.idleFor() > options_.timeout) {
        int peer = options_.globalRanks[r];
        KOLO_THROW_PEER(
            ErrorCode::kTimeout, peer,
            "rank " << options_.globalRanks[options_.localRank] << " timed out after "
                    << options_.timeout.count() / 1000.0 << " s waiting for rank " << peer
                    << " in a shared-memory collective; the peer is alive but "
                       "not answering (KOLO_TIMEOUT)");
      }
    }
  }
}

void ShmGroup::waitForAll(int which, uint64_t value) {
  for (int r = 0; r < options_.localSize; ++r) {
    if (r != options_.localRank) waitFor(r, which, value);
  }
}

// A peer that published `value` and then exited (it finished the step and
// went on to end its process, as after the closing barrier) is not lost:
// its death is checked first and the counter read again after, so a
// publish that came before the exit is always seen (the waiter may have
// slept through both). Only a peer that died short of the value is.
void ShmGroup::checkPeer(int r, const std::atomic<uint64_t>* c, uint64_t value,
                         const char* what) const {
  auto* header = static_cast<const Header*>(base_);
  auto* pids = reinterpret_cast<const std::atomic<int64_t>*>(header + 1);
  pid_t pid = static_cast<pid_t>(pids[r].load(std::memory_order_acquire));
  if (processDead(pid) && c->load(std::memory_order_acquire) < value) {
    int peer = options_.globalRanks[r];
    KOLO_THROW_PEER(ErrorCode::kPeerLost, peer,
                    rankText(peer, {}, pid) << " died during a " << what << " with rank "
                                            << options_.globalRanks[options_.localRank]);
  }
}

}  // namespace kolo::shm
