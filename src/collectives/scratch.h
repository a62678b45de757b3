// Scratch memory for algorithms, kept across calls.
//
// On this class of machine touching fresh pages is expensive (a page fault
// costs ~10 us, so a fresh 64 MiB buffer costs more than moving it), and
// large allocations come back from the system as fresh pages every time.
// An algorithm asks for scratch by purpose; the buffer lives as long as the
// calling thread and only grows. Thread safety: one buffer per thread and
// purpose; the caller must not use two at once for the same purpose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kolo::collectives {

enum class ScratchUse { kRingSlots, kHalvingDoubling, kTree, kCount };

// At least `bytes` bytes, valid until the next call with the same use on
// this thread.
inline uint8_t* scratch(ScratchUse use, size_t bytes) {
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
  };
  thread_local Buffer buffers[static_cast<int>(ScratchUse::kCount)];
  Buffer& b = buffers[static_cast<int>(use)];
  if (b.size < bytes) {
    b.data.reset(new uint8_t[bytes]);
    b.size = bytes;
  }
  return b.data.get();
}

}  // namespace kolo::collectives
