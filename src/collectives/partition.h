// Small helpers shared by the message-passing algorithms: how a vector is
// split into blocks, and the fold that lets power-of-two algorithms run on
// any number of ranks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace kolo::collectives {

// Elements [offset, offset + count) of a vector.
struct Block {
  size_t offset = 0;
  size_t count = 0;
};

// Block i of `count` elements split into `parts` nearly equal blocks: the
// first count % parts blocks hold one element more. Blocks may be empty
// (count < parts).
inline Block blockOf(size_t count, int parts, int i) {
  const size_t p = static_cast<size_t>(parts);
  const size_t ui = static_cast<size_t>(i);
  const size_t base = count / p, extra = count % p;
  return {ui * base + (ui < extra ? ui : extra), base + (ui < extra ? 1 : 0)};
}

// Blocks [first, last) as one range of elements.
inline Block blockRange(size_t count, int parts, int first, int last) {
  if (first >= last) return {blockOf(count, parts, first).offset, 0};
  const Block a = blockOf(count, parts, first);
  const Block b = blockOf(count, parts, last - 1);
  return {a.offset, b.offset + b.count - a.offset};
}

inline int mod(int a, int n) {
  return ((a % n) + n) % n;
}

inline uint8_t* bytesAt(void* base, size_t elements, size_t elementBytes) {
  return static_cast<uint8_t*>(base) + elements * elementBytes;
}
inline const uint8_t* bytesAt(const void* base, size_t elements, size_t elementBytes) {
  return static_cast<const uint8_t*>(base) + elements * elementBytes;
}

// The non-power-of-two fold (as in MPICH's recursive doubling and
// Rabenseifner's allreduce). With n ranks, p = the largest power of two
// <= n and extra = n - p: among the first 2*extra ranks, each even rank
// hands its vector to the odd rank above it and sits out; the remaining p
// ranks ("new ranks" 0..p-1) run the power-of-two algorithm; afterwards each
// odd rank hands the result back to its even partner.
struct Fold {
  int p = 1;
  int extra = 0;
  int newRank = -1;  // -1: this rank sits out (an even rank < 2*extra)

  // Rank (in the original numbering) of new rank nr.
  int realRank(int nr) const { return nr < extra ? 2 * nr + 1 : nr + extra; }
  // The even partner this rank folds with: >= 0 only for ranks < 2*extra.
  int partner(int rank) const {
    if (rank >= 2 * extra) return -1;
    return rank % 2 == 0 ? rank + 1 : rank - 1;
  }
};

inline Fold makeFold(int rank, int n) {
  Fold f;
  while (f.p * 2 <= n) f.p *= 2;
  f.extra = n - f.p;
  if (rank < 2 * f.extra) {
    f.newRank = rank % 2 == 0 ? -1 : rank / 2;
  } else {
    f.newRank = rank - f.extra;
  }
  return f;
}

// Tags of the fold inside an operation's block: fold-in, hand-back, then
// the power-of-two steps from kFoldStepTag on.
inline constexpr transport::Tag kFoldInTag = 0;
inline constexpr transport::Tag kFoldBackTag = 1;
inline constexpr transport::Tag kFoldStepTag = 2;

// The whole part of a rank that sits out of the fold: hands its vector
// (`bytes` at buf) to its partner and receives the result into buf.
// Returns true when this rank sat out (and is done).
inline bool sitOut(transport::Transport& t, const Fold& fold, transport::Tag base,
                   uint8_t* buf, size_t bytes) {
  if (fold.newRank >= 0) return false;
  const int partner = fold.partner(t.rank());
  t.send(partner, base + kFoldInTag, buf, bytes);
  t.recv(partner, base + kFoldBackTag, buf, bytes);
  return true;
}

inline int log2Exact(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

// Sends to and receives from `peer` at once; a side with zero bytes sends
// no message (both partners always agree on which sides are empty).
inline void exchange(transport::Transport& t, int peer, const void* sendData,
                     size_t sendBytes, void* recvData, size_t recvBytes,
                     transport::Tag tag) {
  transport::RequestPtr r, s;
  if (recvBytes > 0) r = t.irecv(peer, tag, recvData, recvBytes);
  if (sendBytes > 0) s = t.isend(peer, tag, sendData, sendBytes);
  if (r) t.wait(r);
  if (s) t.wait(s);
}

}  // namespace kolo::collectives
