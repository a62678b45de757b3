#include "train/elastic_sampler.h"

#include <kolo/error.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

namespace kolo::train {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorCode::kInvalidArgument, "ElasticSampler: " + message);
}

}  // namespace

ElasticSampler::ElasticSampler(int64_t datasetSize, int rank, int worldSize, bool shuffle,
                               uint64_t seed)
    : n_(datasetSize), shuffle_(shuffle), seed_(seed) {
  require(datasetSize >= 0,
          "dataset size must be >= 0, got " + std::to_string(datasetSize));
  reset(rank, worldSize);
}

void ElasticSampler::reset(int rank, int worldSize) {
  require(worldSize >= 1, "world size must be >= 1, got " + std::to_string(worldSize));
  require(rank >= 0 && rank < worldSize, "rank " + std::to_string(rank) +
                                             " is not in a world of " +
                                             std::to_string(worldSize));
  rank_ = rank;
  size_ = worldSize;
  deal();
}

void ElasticSampler::setEpoch(int64_t epoch) {
  setPosition(epoch, 0);
}

void ElasticSampler::recordBatch(int64_t batchSize) {
  require(batchSize >= 0, "batch size must be >= 0, got " + std::to_string(batchSize));
  // Clamped: the last, partial batch of a rank counts at most what is left.
  processed_ = std::min(processed_ + batchSize * size_, n_);
}

void ElasticSampler::setPosition(int64_t epoch, int64_t processed) {
  require(epoch >= 0, "epoch must be >= 0, got " + std::to_string(epoch));
  require(processed >= 0 && processed <= n_, "position " + std::to_string(processed) +
                                                 " is outside a dataset of " +
                                                 std::to_string(n_));
  epoch_ = epoch;
  processed_ = processed;
  deal();
}

// The epoch's permutation (Fisher-Yates; the draw j = gen() mod (i + 1) is
// written out rather than left to std::uniform_int_distribution, whose
// algorithm differs between standard libraries), then the rest after the
// processed prefix, dealt round-robin.
void ElasticSampler::deal() {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_) {
    std::mt19937_64 gen(seed_ + static_cast<uint64_t>(epoch_));
    for (int64_t i = n_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(gen() % static_cast<uint64_t>(i + 1));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  indices_.clear();
  for (int64_t p = processed_ + rank_; p < n_; p += size_) {
    indices_.push_back(order[static_cast<size_t>(p)]);
  }
}

}  // namespace kolo::train
