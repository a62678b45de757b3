#include "data/distributed_sampler.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>

#include "common/check.h"

namespace kolo::data {

DistributedSampler::DistributedSampler(int64_t datasetSize, int rank, int worldSize,
                                       uint64_t seed, bool shuffle, Remainder remainder)
    : n_(datasetSize),
      rank_(rank),
      size_(worldSize),
      seed_(seed),
      shuffle_(shuffle),
      remainder_(remainder) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "DistributedSampler: rank "
                                                << rank << " outside a world of "
                                                << worldSize);
  }
  if (datasetSize < 0 || (datasetSize == 0 && remainder == Remainder::kPad)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "DistributedSampler: dataset size "
                   << datasetSize << (datasetSize == 0 ? " cannot be padded" : ""));
  }
  perRank_ = remainder == Remainder::kPad ? (n_ + size_ - 1) / size_ : n_ / size_;
}

// Fisher-Yates from the back. The bounded draw uses rejection sampling on
// the generator's raw 64-bit output (not std::uniform_int_distribution,
// whose algorithm the standard leaves to the library), so the order is the
// same wherever it is computed.
std::vector<int64_t> DistributedSampler::permutation() const {
  std::vector<int64_t> perm(static_cast<size_t>(n_));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (!shuffle_) return perm;
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_));
  for (int64_t i = n_ - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = rng();
    } while (x >= limit);
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(x % bound)]);
  }
  return perm;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const std::vector<int64_t> perm = permutation();
  const int64_t total = perRank_ * size_;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(perRank_));
  for (int64_t pos = rank_; pos < total; pos += size_) {
    mine.push_back(perm[static_cast<size_t>(pos % n_)]);  // pos >= n: padding
  }
  return mine;
}

Range evaluationRange(int64_t n, int rank, int worldSize) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize || n < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "evaluationRange: rank " << rank << " of " << worldSize << ", n " << n);
  }
  const int64_t base = n / worldSize;
  const int64_t extra = n % worldSize;
  Range r;
  r.begin = rank * base + std::min<int64_t>(rank, extra);
  r.end = r.begin + base + (rank < extra ? 1 : 0);
  return r;
}

}  // namespace kolo::data
