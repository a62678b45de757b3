// Which samples each rank reads in each epoch.
//
// Every rank builds the same sampler (same dataset size, seed and mode) and
// gets a disjoint shard of equal length: the epoch's permutation of
// 0..n-1 (Fisher-Yates driven by a 64-bit Mersenne Twister seeded with
// seed and epoch, so it is the same on every rank, every platform and every
// run) is dealt out round-robin: rank r takes positions r, r + N, r + 2N, ...
//
// Equal length, when n does not divide by the world size N:
// - kPad (the default, as PyTorch's DistributedSampler): the permutation is
//   extended with its own first elements up to ceil(n / N) * N, so every
//   sample is seen each epoch and fewer than N samples are seen twice; the
//   shards are disjoint in positions, not always in samples.
// - kDrop: the permutation is cut to floor(n / N) * N; the shards are
//   disjoint and fewer than N samples are skipped this epoch (different
//   ones each epoch when shuffling).
//
// Contract: a plain value; const methods are thread-safe. Bad arguments
// (rank outside 0..N-1, N < 1, n < 0, kPad of an empty dataset) throw
// kolo::Error(kInvalidArgument).
#pragma once

#include <cstdint>
#include <vector>

namespace kolo::data {

class DistributedSampler {
 public:
  enum class Remainder { kPad, kDrop };

  DistributedSampler(int64_t datasetSize, int rank, int worldSize, uint64_t seed,
                     bool shuffle = true, Remainder remainder = Remainder::kPad);

  void setEpoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Samples per rank per epoch (the same on every rank).
  int64_t numSamples() const { return perRank_; }
  // This rank's sample indices for the current epoch, in reading order.
  std::vector<int64_t> indices() const;

  // The whole epoch's order before sharding (n elements; identity when not
  // shuffling).
  std::vector<int64_t> permutation() const;

 private:
  int64_t n_;
  int rank_;
  int size_;
  uint64_t seed_;
  bool shuffle_;
  Remainder remainder_;
  int64_t perRank_;
  int64_t epoch_ = 0;
};

// The contiguous part [begin, end) of 0..n-1 that `rank` evaluates when the
// full set is split among `worldSize` ranks without padding (the first
// n % N ranks get one more), e.g. for validation on the whole test set.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
};
Range evaluationRange(int64_t n, int rank, int worldSize);

}  // namespace kolo::data
