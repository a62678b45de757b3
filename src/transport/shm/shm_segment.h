// The layout of one rank's shared-memory segment (ShmTransport,
// shm_transport.h): a header (the owner's doorbell, abort notice and
// pulse), one ring control block (head, tail) per local rank, then the
// rings, page-aligned. Internal to shm_transport_setup.cc, which creates
// and maps the segments, and shm_transport.cc, which moves messages
// through their rings.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm/shm_transport.h"

namespace kolo::transport {
namespace shm_layout {

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

inline size_t dataOffset(size_t count) {
  return (kHeaderArea + count * kCtlBytes + 4095) & ~size_t(4095);
}
inline size_t segmentBytes(size_t count, size_t ringBytes) {
  return dataOffset(count) + count * ringBytes;
}

}  // namespace shm_layout

struct ShmTransport::RingCtl {
  alignas(128) std::atomic<uint64_t> head;  // written by the producer only
  alignas(128) std::atomic<uint64_t> tail;  // written by the consumer only
};

// One mapped segment. The creator unlinks it when destroyed before the
// set-up barrier unlinked it (error paths).
struct ShmTransport::Segment {
  static_assert(sizeof(RingCtl) <= shm_layout::kCtlBytes);
  std::string name;
  void* base = nullptr;
  size_t bytes = 0;
  bool owner = false;
  bool unlinked = false;

  ~Segment() {
    if (base) munmap(base, bytes);
    if (owner && !unlinked) shm_unlink(name.c_str());
  }
  shm_layout::SegmentHeader* header() const {
    return static_cast<shm_layout::SegmentHeader*>(base);
  }
  RingCtl* ctl(size_t i) const {
    return reinterpret_cast<RingCtl*>(static_cast<uint8_t*>(base) +
                                      shm_layout::kHeaderArea +
                                      i * shm_layout::kCtlBytes);
  }
  uint8_t* ring(size_t i) const {
    return static_cast<uint8_t*>(base) + shm_layout::dataOffset(header()->count) +
           i * header()->ringBytes;
  }
  void unlink() {
    if (!unlinked) {
      shm_unlink(name.c_str());  // ENOENT: a peer already did
      unlinked = true;
    }
  }
};

}  // namespace kolo::transport
