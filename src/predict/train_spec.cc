#include "predict/train_spec.h"

#include <cmath>
#include <sstream>

#include <stdexcept>

namespace kolo::predict {

namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument(what);
}

}  // namespace

size_t totalBytes(const std::vector<LayerGrad>& layers) {
  size_t total = 0;
  for (const auto& l : layers) total += l.bytes;
  return total;
}

void checkTrainSpec(const TrainSpec& spec) {
  if (spec.layers.empty()) invalid("the model has no parameter tensors");
  double shares = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerGrad& l = spec.layers[i];
    std::ostringstream who;
    who << "tensor " << i << " ('" << l.name << "')";
    if (l.bytes == 0)
      invalid(who.str() + " has 0 bytes; every tensor needs at least one");
    if (!std::isfinite(l.computeShare) || l.computeShare < 0) {
      std::ostringstream m;
      m << who.str() << " has compute share " << l.computeShare
        << "; expected a finite value >= 0";
      invalid(m.str());
    }
    shares += l.computeShare;
  }
  if (!(shares > 0)) invalid("the compute shares of the tensors sum to 0; expected > 0");
  if (!std::isfinite(spec.stepComputeSeconds) || spec.stepComputeSeconds <= 0) {
    std::ostringstream m;
    m << "step compute time is " << spec.stepComputeSeconds * 1e3
      << " ms; expected a finite value > 0";
    invalid(m.str());
  }
  if (!(spec.backwardFraction > 0 && spec.backwardFraction <= 1)) {
    std::ostringstream m;
    m << "backward fraction is " << spec.backwardFraction << "; expected in (0, 1]";
    invalid(m.str());
  }
  if (spec.ranks < 1)
    invalid("ranks is " + std::to_string(spec.ranks) + "; expected >= 1");
  if (spec.ranksPerHost < 1) {
    invalid("ranks per host is " + std::to_string(spec.ranksPerHost) + "; expected >= 1");
  }
}

std::vector<double> gradientReadyTimes(const TrainSpec& spec) {
  double shares = 0;
  for (const auto& l : spec.layers) shares += l.computeShare;
  const double backward = spec.stepComputeSeconds * spec.backwardFraction;
  double t = spec.stepComputeSeconds - backward;  // forward's end
  std::vector<double> ready;
  ready.reserve(spec.layers.size());
  double done = 0;
  for (const auto& l : spec.layers) {
    done += l.computeShare;
    // The last one exactly at the compute's end, whatever the rounding.
    t = spec.stepComputeSeconds - backward + backward * (done / shares);
    ready.push_back(t);
  }
  ready.back() = spec.stepComputeSeconds;
  return ready;
}

}  // namespace kolo::predict
