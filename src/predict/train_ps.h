// The training step with parameter servers, sync and downpour
// (docs/parameter_server.md; docs/scale.md, "Parameter servers").
//
// Contract
// - The W = spec.ranks workers sit ranksPerHost to a host and share that
//   host's link; the S servers sit on hosts of their own, one link each.
//   Each link carries `linkBytesPerSecond` each way; a message costs
//   `latencySeconds` once.
// - The gradients are sharded over the servers as kolo's ShardMap does
//   (src/ps/shard_map.h: tensors above the fair share cut, pieces placed
//   largest first on the least loaded server); the largest shard sets the
//   servers' time.
// - Pure functions; bad inputs throw std::invalid_argument naming the
//   value (servers < 1, a non-positive link rate, a negative latency or
//   server cost, periods < 1).
#pragma once

#include <cstdint>
#include <vector>

#include "predict/train_spec.h"

namespace kolo::predict {

struct PsKnobs {
  int servers = 1;
  double linkBytesPerSecond = 0;
  double latencySeconds = 0;
  // A server's cost per gradient byte it receives (the sum of the pushes),
  // and per byte of its shard for applying the update rule once.
  double reduceSecondsPerByte = 0;
  double updateSecondsPerByte = 0;
  int pushPeriod = 1;  // downpour: steps between pushes
  int pullPeriod = 1;  // downpour: steps between pulls
};

// Elements of each server's shard (ShardMap::build's loads), for tensors of
// `elements` each.
std::vector<uint64_t> shardLoads(const std::vector<uint64_t>& elements, int servers);

// sync: every worker pushes its whole gradient after backward, the servers
// wait for all W pushes, apply once, and every worker pulls. The push
// ends when the busiest link has carried its bytes: a server's link W x
// its shard, a worker host's link ranksPerHost x the gradient.
StepPrediction predictSyncPsStep(const TrainSpec& spec, const PsKnobs& knobs);

// downpour: workers do not wait for each other; a worker's step is its
// compute plus its own push and pull, unless a link is saturated: the
// server links carry W pushes and pulls of their shard per step (divided
// by the periods), a worker host's link ranksPerHost of each, and the step
// can be no shorter than the busiest link's bytes per step over its rate.
// (Throughput only: the staleness this buys is not in the figure.)
StepPrediction predictDownpourStep(const TrainSpec& spec, const PsKnobs& knobs);

}  // namespace kolo::predict
