// Parameter-server steps: link contention as bytes over the busiest link.
//
// With W workers, S servers, gradient G bytes and largest shard L bytes
// (L >= G/S), one exchange (push or pull) moves, per step:
//   each server's link:       W * L bytes (every worker's piece of its shard)
//   each worker host's link:  k * G bytes (its k workers' whole gradients)
// Links run at B bytes/s each way and a transfer costs the latency alpha
// once (every piece is posted at once; docs/parameter_server.md, "The
// server loop"). A server sums the pushes at gamma_r per byte received and
// applies the update once at gamma_u per shard byte.
//   sync:     push = alpha + max(W L / B, k G / B, W L gamma_r)
//             step = compute + push + L gamma_u + alpha + max(W L, k G) / B
//   downpour: own  = compute + (alpha + G/B)/push_period + (alpha + G/B)/pull_period
//                    + L gamma_u / push_period
//             step = max(own, W L (1/push_period + 1/pull_period) / B,
//                    k G (1/push_period + 1/pull_period) / B)
// Neither mode overlaps backward: kolo's client pushes in step(), after
// the gradients are complete (src/ps/client.h).
#include "predict/train_ps.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <stdexcept>

namespace kolo::predict {

namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument(what);
}

void checkKnobs(const PsKnobs& k) {
  if (k.servers < 1) {
    invalid("--servers is " + std::to_string(k.servers) + "; expected >= 1");
  }
  if (!(k.linkBytesPerSecond > 0) || !std::isfinite(k.linkBytesPerSecond)) {
    invalid("the link rate is " + std::to_string(k.linkBytesPerSecond * 8) +
            " bit/s; expected a finite value > 0");
  }
  if (!(k.latencySeconds >= 0) || !(k.reduceSecondsPerByte >= 0) ||
      !(k.updateSecondsPerByte >= 0)) {
    invalid("latency and server costs must be >= 0 (latency " +
            std::to_string(k.latencySeconds) + " s)");
  }
  if (k.pushPeriod < 1 || k.pullPeriod < 1) {
    invalid("push and pull periods must be >= 1 (got " + std::to_string(k.pushPeriod) +
            " and " + std::to_string(k.pullPeriod) + ")");
  }
}

struct Loads {
  double gradient = 0;      // G, bytes
  double largestShard = 0;  // L, bytes
};

Loads loadsOf(const TrainSpec& spec, int servers) {
  std::vector<uint64_t> elements;
  elements.reserve(spec.layers.size());
  for (const auto& l : spec.layers) elements.push_back((l.bytes + 3) / 4);
  const auto loads = shardLoads(elements, servers);
  Loads r;
  r.gradient = static_cast<double>(totalBytes(spec.layers));
  r.largestShard =
      4.0 * static_cast<double>(*std::max_element(loads.begin(), loads.end()));
  return r;
}

StepPrediction finish(StepPrediction p) {
  p.exposedSeconds = p.stepSeconds - p.computeSeconds;
  p.efficiency = p.computeSeconds / p.stepSeconds;
  return p;
}

}  // namespace

std::vector<uint64_t> shardLoads(const std::vector<uint64_t>& elements, int servers) {
  if (servers < 1) invalid("servers is " + std::to_string(servers) + "; expected >= 1");
  uint64_t total = 0;
  for (uint64_t e : elements) total += e;
  const uint64_t fair = std::max<uint64_t>(1, (total + servers - 1) / servers);
  struct Piece {
    uint64_t count;
    size_t tensor;
  };
  std::vector<Piece> pieces;
  for (size_t t = 0; t < elements.size(); ++t) {
    const uint64_t n = elements[t];
    if (n <= fair) {
      pieces.push_back({n, t});
      continue;
    }
    const uint64_t k = (n + fair - 1) / fair;  // nearly equal pieces
    for (uint64_t j = 0; j < k; ++j) pieces.push_back({n / k + (j < n % k ? 1 : 0), t});
  }
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.count != b.count ? a.count > b.count : a.tensor < b.tensor;
  });
  std::vector<uint64_t> loads(servers, 0);
  for (const Piece& p : pieces) {
    *std::min_element(loads.begin(), loads.end()) += p.count;  // first of the least
  }
  return loads;
}

StepPrediction predictSyncPsStep(const TrainSpec& spec, const PsKnobs& k) {
  checkTrainSpec(spec);
  checkKnobs(k);
  const Loads l = loadsOf(spec, k.servers);
  const double w = spec.ranks;
  const double b = k.linkBytesPerSecond;
  const double link = std::max(w * l.largestShard, spec.ranksPerHost * l.gradient) / b;
  const double push =
      k.latencySeconds + std::max(link, w * l.largestShard * k.reduceSecondsPerByte);
  const double apply = l.largestShard * k.updateSecondsPerByte;
  const double pull = k.latencySeconds + link;
  StepPrediction p;
  p.computeSeconds = spec.stepComputeSeconds;
  p.commSeconds = push + apply + pull;
  p.stepSeconds = p.computeSeconds + p.commSeconds;
  return finish(p);
}

StepPrediction predictDownpourStep(const TrainSpec& spec, const PsKnobs& k) {
  checkTrainSpec(spec);
  checkKnobs(k);
  const Loads l = loadsOf(spec, k.servers);
  const double b = k.linkBytesPerSecond;
  const double perStep = 1.0 / k.pushPeriod + 1.0 / k.pullPeriod;  // exchanges a step
  const double own = perStep * (k.latencySeconds + l.gradient / b) +
                     l.largestShard * k.updateSecondsPerByte / k.pushPeriod;
  const double serverLink = spec.ranks * l.largestShard * perStep / b;
  const double hostLink = spec.ranksPerHost * l.gradient * perStep / b;
  StepPrediction p;
  p.computeSeconds = spec.stepComputeSeconds;
  p.commSeconds = own;
  p.stepSeconds = std::max({p.computeSeconds + own, serverLink, hostLink});
  return finish(p);
}

}  // namespace kolo::predict
