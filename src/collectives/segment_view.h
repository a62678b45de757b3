// A vector given as consecutive pieces (AllreduceSegment): where a range of
// its elements lies in the pieces' send and recv buffers.
//
// Contract
// - The view covers elements [0, total()) of the concatenation of the
//   segments, in order; ranges passed to its methods must lie inside it.
// - A contiguous vector is one segment: SegmentView(send, recv, count).
// - forEach(begin, end, f) calls f(send, recv, at, n) for each piece of
//   [begin, end): `send` and `recv` point at the piece's first element in
//   its segment, `at` is the piece's offset from `begin` (elements), `n`
//   its length; pieces come in order, empty segments are skipped.
// - gatherSend copies [begin, end) out of the send side into a contiguous
//   buffer; gatherSendStreaming does it with non-temporal
//   stores (stream_copy.h) and one fence at the end; scatterRecv copies a
//   contiguous buffer into the recv side of [begin, end).
// - Holds pointers only: the segments must outlive the view.
#pragma once

#include <kolo/types.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/stream_copy.h"

namespace kolo::collectives {

class SegmentView {
 public:
  SegmentView(const void* send, void* recv, size_t count, size_t elementBytes)
      : one_{send, recv, count}, segments_(&one_), count_(1), es_(elementBytes) {
    total_ = count;
  }
  SegmentView(const AllreduceSegment* segments, size_t count, size_t elementBytes)
      : segments_(segments), count_(count), es_(elementBytes) {
    starts_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      starts_[i] = total_;
      total_ += segments[i].count;
    }
  }
  SegmentView(const SegmentView&) = delete;
  SegmentView& operator=(const SegmentView&) = delete;

  size_t total() const { return total_; }

  template <class F>
  void forEach(size_t begin, size_t end, F f) const {
    if (begin >= end) return;
    size_t i = first(begin);
    size_t start = startOf(i);
    for (size_t at = begin; at < end; ++i) {
      const AllreduceSegment& s = segments_[i];
      const size_t next = start + s.count;
      if (next > at) {
        const size_t skip = at - start;
        const size_t n = std::min(next, end) - at;
        f(static_cast<const uint8_t*>(s.send) + skip * es_,
          static_cast<uint8_t*>(s.recv) + skip * es_, at - begin, n);
        at += n;
      }
      start = next;
    }
  }

  void gatherSend(void* dst, size_t begin, size_t end) const {
    forEach(begin, end, [&](const uint8_t* send, uint8_t*, size_t at, size_t n) {
      std::memcpy(static_cast<uint8_t*>(dst) + at * es_, send, n * es_);
    });
  }
  void gatherSendStreaming(void* dst, size_t begin, size_t end) const {
    forEach(begin, end, [&](const uint8_t* send, uint8_t*, size_t at, size_t n) {
      copyStreaming(static_cast<uint8_t*>(dst) + at * es_, send, n * es_);
    });
    fenceStreaming();
  }
  void scatterRecv(const void* src, size_t begin, size_t end) const {
    forEach(begin, end, [&](const uint8_t*, uint8_t* recv, size_t at, size_t n) {
      std::memcpy(recv, static_cast<const uint8_t*>(src) + at * es_, n * es_);
    });
  }

 private:
  // The segment holding element `at` (the last one starting at or before
  // it; empty segments before it are skipped by forEach).
  size_t first(size_t at) const {
    if (count_ == 1) return 0;
    auto it = std::upper_bound(starts_.begin(), starts_.end(), at);
    return static_cast<size_t>(it - starts_.begin()) - 1;
  }
  size_t startOf(size_t i) const { return count_ == 1 ? 0 : starts_[i]; }

  AllreduceSegment one_{};
  const AllreduceSegment* segments_;
  size_t count_;
  size_t es_;
  size_t total_ = 0;
  std::vector<size_t> starts_;  // element offset of each segment (count_ > 1)
};

}  // namespace kolo::collectives
