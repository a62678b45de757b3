// The tensor lists of bench/fusion.sh (issue 4): the gradients a training
// step hands to the runtime.
//
// - resnet50: the 161 parameter tensors of ResNet-50 (torchvision layout:
//   conv1/bn1, layer1..layer4 of 3, 4, 6, 3 bottleneck blocks, each block
//   conv1/bn1/conv2/bn2/conv3/bn3 plus downsample.0/.1 in its first block,
//   then fc), 25,557,032 float32 values in all. Conv weights are
//   [out, in, k, k], batch-norm weight and bias [channels], fc weight
//   [1000, 2048] and bias [1000]; sizes run from 256 B (a 64-channel
//   batch-norm vector) to 9 MiB (layer4's 3x3 convolutions).
// - small: 1,000 tensors of 1,024 float32 values (4 KiB each), a model made
//   of many small layers.
//
// Both lists are in forward (definition) order; a step submits them in
// backward order (last layer first), as backpropagation produces them.
// Pure data; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::bench {

struct TensorSpec {
  std::string name;            // e.g. "layer4.2.conv3.weight"
  std::vector<int64_t> shape;  // e.g. [2048, 512, 1, 1]
  int64_t elements() const;
};

enum class Workload { kResnet50, kSmall };

std::vector<TensorSpec> resnet50Parameters();
std::vector<TensorSpec> smallTensors(int count = 1000, int64_t elements = 1024);

// "resnet50" / "small"; parseWorkload throws std::invalid_argument naming
// the text for anything else.
std::string_view toString(Workload w);
Workload parseWorkload(std::string_view text);
std::vector<TensorSpec> workloadTensors(Workload w);

}  // namespace kolo::bench
