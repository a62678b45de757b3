// copyStreaming: the bytes before dst's first 16-byte boundary and the tail
// go through memcpy; the body is 16-byte unaligned loads and non-temporal
// 16-byte stores (SSE2, which every x86-64 has; the write-combining buffers
// merge four of them into one whole-line write), four per iteration. No
// fence per call: a fence waits for the write-combining buffers to drain,
// which costs more than copying a 4 KiB piece, so the caller fences once.
// Other architectures use memcpy and need no fence.
#include "collectives/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#define KOLO_STREAM_COPY_SSE2 1
#else
#define KOLO_STREAM_COPY_SSE2 0
#endif

namespace kolo::collectives {

void copyStreaming(void* dst, const void* src, size_t bytes) {
#if KOLO_STREAM_COPY_SSE2
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t head =
      std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & size_t{15});
  std::memcpy(d, s, head);
  size_t i = head;
  auto put = [&](size_t at) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + at),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + at)));
  };
  for (; i + 64 <= bytes; i += 64) {
    put(i);
    put(i + 16);
    put(i + 32);
    put(i + 48);
  }
  for (; i + 16 <= bytes; i += 16) put(i);
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void fenceStreaming() {
#if KOLO_STREAM_COPY_SSE2
  _mm_sfence();
#endif
}

}  // namespace kolo::collectives
