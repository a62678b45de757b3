// The allreduce step, simulated cycle by cycle as kolo's runtime runs it.
//
// Backward hands gradient i to the runtime at ready[i] (train_spec.h). The
// runtime's background loop (src/runtime/runtime_loop.cc) repeats:
//   wait for a cycle to start -> negotiation (one small exchange among the
//   ranks) -> plan the ready gradients into buckets (fusion_planner.cc's
//   rules) -> run the buckets one after another, each one allreduce of its
//   bytes -> wait again.
// When a cycle starts:
//   kolo: the loop sleeps until a gradient is submitted (or finds the queue
//   non-empty when its cycle ends) and then gathers until no submission
//   came for gatherQuiet, at most one cycle time after it began waiting;
//   periodic (Horovod's loop): cycles start every cycle time, or when the
//   previous one ends if it ran longer, and a cycle with nothing ready is
//   skipped at no cost.
// Since every rank computes alike, a gradient is ready on all ranks at
// once and the negotiation never waits on a peer.
//
// Accounting: the busy intervals (negotiations and collectives) inside
// [0, compute] are the overlapped communication; what the step adds to the
// compute, max(compute, last collective's end) - compute, is the exposed
// part (it includes the wait for the last cycle to start).
#include "predict/train_allreduce.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <stdexcept>

namespace kolo::predict {

namespace {

struct Bucket {
  size_t first = 0;  // ready-order index of its first member
  size_t bytes = 0;
};

// fusion_planner.cc's rules for one fusion key (float32 sums): in ready
// order, a gradient joins the open bucket while its bytes stay within the
// threshold; one above `alone` or at or above the threshold gets a bucket
// of its own and leaves the open bucket open. Buckets run in the order of
// their first member.
std::vector<Bucket> planBuckets(const std::vector<LayerGrad>& layers, size_t first,
                                size_t last, size_t threshold, size_t alone) {
  std::vector<Bucket> buckets;
  long open = -1;
  for (size_t i = first; i < last; ++i) {
    const size_t b = layers[i].bytes;
    if (b > alone) {
      buckets.push_back({i, b});
      continue;
    }
    if (threshold > 0 && open >= 0 && buckets[open].bytes + b <= threshold) {
      buckets[open].bytes += b;
      continue;
    }
    buckets.push_back({i, b});
    if (threshold > 0 && b < threshold) open = static_cast<long>(buckets.size()) - 1;
  }
  // Already in the order of their first member: buckets are appended as
  // their first member comes.
  return buckets;
}

double timed(const AllreduceTimeFn& allreduce, size_t bytes) {
  const double t = allreduce(bytes);
  if (!std::isfinite(t) || t < 0) {
    std::ostringstream m;
    m << "the allreduce time of " << bytes << " bytes is " << t
      << " s; expected a finite value >= 0";
    throw std::invalid_argument(m.str());
  }
  return t;
}

// When the cycle after one that ended at `free` (started at `prevStart`)
// starts, with gradient `next` the first not yet sent.
double cycleStart(const std::vector<double>& ready, size_t next, double free,
                  double prevStart, const RuntimeKnobs& k) {
  if (k.periodic) {
    const double s0 = std::max(prevStart + k.cycleSeconds, free);
    if (ready[next] <= s0 || k.cycleSeconds <= 0) return std::max(s0, ready[next]);
    return s0 + std::ceil((ready[next] - s0) / k.cycleSeconds) * k.cycleSeconds;
  }
  const double t0 = std::max(free, ready[next]);
  if (k.cycleSeconds <= 0) return t0;
  const double quiet = std::min(k.gatherQuietSeconds, k.cycleSeconds);
  double last = t0;
  for (size_t i = next; i < ready.size(); ++i) {
    if (ready[i] <= last) continue;
    if (ready[i] - last <= quiet && ready[i] < t0 + k.cycleSeconds) {
      last = ready[i];
    } else {
      break;
    }
  }
  return std::min(last + quiet, t0 + k.cycleSeconds);
}

}  // namespace

StepPrediction predictAllreduceStep(const TrainSpec& spec, const RuntimeKnobs& knobs,
                                    const AllreduceTimeFn& allreduce) {
  checkTrainSpec(spec);
  if (!(knobs.cycleSeconds >= 0) || !std::isfinite(knobs.cycleSeconds)) {
    std::ostringstream m;
    m << "cycle time is " << knobs.cycleSeconds * 1e3
      << " ms; expected a finite value >= 0";
    throw std::invalid_argument(m.str());
  }
  StepPrediction p;
  p.computeSeconds = spec.stepComputeSeconds;
  p.stepSeconds = p.computeSeconds;
  if (spec.ranks == 1) return p;  // one rank: nothing to exchange

  const double negotiation =
      knobs.negotiationSeconds >= 0 ? knobs.negotiationSeconds : timed(allreduce, 64);
  // Across hosts the runtime fuses every size (fusion_planner.h).
  const size_t alone = spec.ranks > spec.ranksPerHost ? SIZE_MAX : knobs.aloneBytes;
  const std::vector<double> ready = gradientReadyTimes(spec);
  const double compute = spec.stepComputeSeconds;

  size_t next = 0;
  double free = 0;
  double prevStart = -knobs.cycleSeconds;  // the periodic loop's phase: 0
  auto busy = [&](double from, double to) {
    p.commSeconds += to - from;
    p.overlappedSeconds += std::max(0.0, std::min(to, compute) - from);
  };
  while (next < ready.size()) {
    const double s = cycleStart(ready, next, free, prevStart, knobs);
    size_t last = next;
    while (last < ready.size() && ready[last] <= s) ++last;
    double e = s + negotiation;
    busy(s, e);
    for (const Bucket& b :
         planBuckets(spec.layers, next, last, knobs.fusionThresholdBytes, alone)) {
      const double t = timed(allreduce, b.bytes);
      busy(e, e + t);
      e += t;
      ++p.collectives;
    }
    ++p.cycles;
    next = last;
    prevStart = s;
    free = e;
  }
  p.stepSeconds = std::max(compute, free);
  p.exposedSeconds = p.stepSeconds - compute;
  p.efficiency = compute / p.stepSeconds;
  return p;
}

std::vector<size_t> fusionCandidates() {
  std::vector<size_t> c{0};
  for (size_t b = size_t{64} << 10; b <= (size_t{1} << 30); b *= 2) c.push_back(b);
  return c;
}

FusionSuggestion suggestFusionThreshold(const TrainSpec& spec, const RuntimeKnobs& knobs,
                                        const AllreduceTimeFn& allreduce) {
  FusionSuggestion best;
  bool first = true;
  for (size_t threshold : fusionCandidates()) {
    RuntimeKnobs k = knobs;
    k.fusionThresholdBytes = threshold;
    const StepPrediction p = predictAllreduceStep(spec, k, allreduce);
    // Strictly shorter by more than rounding: the smaller threshold wins a tie.
    if (first || p.stepSeconds < best.step.stepSeconds * (1 - 1e-12)) {
      best.thresholdBytes = threshold;
      best.step = p;
      first = false;
    }
  }
  return best;
}

}  // namespace kolo::predict
