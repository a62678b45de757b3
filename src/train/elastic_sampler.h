// Which samples each rank reads in an elastic job: the C++ counterpart of
// kolo.torch.elastic.ElasticSampler (docs/elastic.md). Framework-neutral.
//
// The epoch's order is a permutation of 0..n-1 (Fisher-Yates driven by a
// 64-bit Mersenne Twister seeded with seed + epoch: the same on every rank
// and platform; identity when not shuffling). Its first processed() indices
// are done; the rest is dealt round-robin: rank r of N takes positions r,
// r + N, r + 2N, ... of the remaining list. After k batches of b samples on
// every rank the ranks together consumed exactly the first k * b * N
// remaining positions, which recordBatch() counts, so a reset (a new N, new
// ranks) deals out exactly what is left: no sample lost or repeated.
//
// Nothing is padded: when the rest is not a multiple of N, the first
// (rest mod N) ranks get one sample more (as the Python sampler).
//
// Contract: a plain value, not thread-safe. Bad arguments (n < 0, a rank
// outside 0..N-1, N < 1, a negative batch, epoch or position, a position
// beyond n) throw kolo::Error(kInvalidArgument) naming the value.
#pragma once

#include <cstdint>
#include <vector>

namespace kolo::train {

class ElasticSampler {
 public:
  // Dealt to rank `rank` of `worldSize` (reset() re-deals).
  ElasticSampler(int64_t datasetSize, int rank, int worldSize, bool shuffle = true,
                 uint64_t seed = 0);

  // Deals the unprocessed indices to rank `rank` of `worldSize`.
  void reset(int rank, int worldSize);
  // Starts `epoch`: a new order, nothing processed yet.
  void setEpoch(int64_t epoch);
  // Counts one batch of `batchSize` samples on every rank.
  void recordBatch(int64_t batchSize);
  // Puts the sampler at (epoch, processed) and re-deals (a restore or a
  // checkpoint's load).
  void setPosition(int64_t epoch, int64_t processed);

  int64_t epoch() const { return epoch_; }
  int64_t processed() const { return processed_; }
  int64_t datasetSize() const { return n_; }
  int rank() const { return rank_; }
  int worldSize() const { return size_; }
  // This rank's indices for the rest of the epoch, in reading order.
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  void deal();

  int64_t n_;
  bool shuffle_;
  uint64_t seed_;
  int rank_ = 0;
  int size_ = 1;
  int64_t epoch_ = 0;
  int64_t processed_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace kolo::train
