// The inputs and the answer of the training-step model (docs/scale.md,
// "The training-step model").
//
// Contract
// - A model is its parameter tensors in the order the backward pass
//   produces their gradients (the last layer's first), each with its bytes
//   and its share of the backward compute; shares are relative weights
//   (normalised by the model), bytes are the gradient's bytes (float32:
//   4 per parameter).
// - Times are seconds. A StepPrediction's single-rank reference is the
//   step's compute alone (one rank communicates nothing), so efficiency =
//   computeSeconds / stepSeconds, 1.0 at one rank.
// - checkTrainSpec throws std::invalid_argument naming the field, the
//   tensor and the value that is wrong.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kolo::predict {

// One gradient as backward produces it.
struct LayerGrad {
  std::string name;
  size_t bytes = 0;
  double computeShare = 0.0;  // relative share of backward compute (>= 0)
};

struct TrainSpec {
  std::vector<LayerGrad> layers;  // backward order
  double stepComputeSeconds = 0;  // forward + backward of one rank
  // The part of stepComputeSeconds that is backward: 2/3 by default
  // (backward does about twice forward's FLOPs: the gradients of the
  // inputs and of the weights).
  double backwardFraction = 2.0 / 3.0;
  int ranks = 1;         // training ranks (workers)
  int ranksPerHost = 1;  // ranks that share one host link
};

struct StepPrediction {
  double stepSeconds = 0;     // one training step on every rank
  double computeSeconds = 0;  // forward + backward (the single-rank step)
  double efficiency = 1;      // computeSeconds / stepSeconds
  // Seconds the communication is busy in a step (negotiation and
  // collectives; for the parameter-server modes push, server and pull).
  double commSeconds = 0;
  // The busy time that lies inside the compute (hidden behind backward) and
  // what the step adds to the compute (communication not hidden, plus any
  // wait for a cycle to start after backward ended).
  double overlappedSeconds = 0;
  double exposedSeconds = 0;
  int collectives = 0;  // allreduce buckets per step (allreduce mode)
  int cycles = 0;       // negotiation cycles per step (allreduce mode)
};

// Total gradient bytes of a model.
size_t totalBytes(const std::vector<LayerGrad>& layers);

// Throws std::invalid_argument on an empty layer list, a layer of zero
// bytes or a negative or non-finite share, shares that sum to zero, a
// non-positive or non-finite compute time, a backward fraction outside
// (0, 1], ranks < 1, ranksPerHost < 1.
void checkTrainSpec(const TrainSpec& spec);

// The times at which each gradient is ready, from the start of the step:
// forward takes (1 - backwardFraction) of the compute, then gradient i is
// ready when backward has done the shares of layers 0..i.
std::vector<double> gradientReadyTimes(const TrainSpec& spec);

}  // namespace kolo::predict
