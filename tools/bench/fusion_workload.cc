// The ResNet-50 parameter list is built the way the model is defined: a
// stem, four stages of bottleneck blocks (1x1 reduce, 3x3, 1x1 expand by 4,
// each followed by batch norm; the first block of a stage also projects the
// shortcut with a 1x1 convolution and a batch norm), and the classifier.
#include "fusion_workload.h"

#include <cstdio>
#include <stdexcept>

namespace kolo::bench {

int64_t TensorSpec::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<TensorSpec> resnet50Parameters() {
  std::vector<TensorSpec> list;
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    list.push_back({name + ".weight", {out, in, k, k}});
  };
  auto norm = [&](const std::string& name, int64_t channels) {
    list.push_back({name + ".weight", {channels}});
    list.push_back({name + ".bias", {channels}});
  };
  conv("conv1", 64, 3, 7);
  norm("bn1", 64);
  const int blocks[4] = {3, 4, 6, 3};
  int64_t inplanes = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    const int64_t expanded = planes * 4;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::string p =
          "layer" + std::to_string(stage + 1) + "." + std::to_string(b) + ".";
      conv(p + "conv1", planes, inplanes, 1);
      norm(p + "bn1", planes);
      conv(p + "conv2", planes, planes, 3);
      norm(p + "bn2", planes);
      conv(p + "conv3", expanded, planes, 1);
      norm(p + "bn3", expanded);
      if (b == 0) {
        conv(p + "downsample.0", expanded, inplanes, 1);
        norm(p + "downsample.1", expanded);
      }
      inplanes = expanded;
    }
  }
  list.push_back({"fc.weight", {1000, 2048}});
  list.push_back({"fc.bias", {1000}});
  return list;
}

std::vector<TensorSpec> smallTensors(int count, int64_t elements) {
  std::vector<TensorSpec> list;
  list.reserve(count);
  char name[32];
  for (int i = 0; i < count; ++i) {
    std::snprintf(name, sizeof name, "small%04d.weight", i);
    list.push_back({name, {elements}});
  }
  return list;
}

std::string_view toString(Workload w) {
  return w == Workload::kResnet50 ? "resnet50" : "small";
}

Workload parseWorkload(std::string_view text) {
  if (text == "resnet50") return Workload::kResnet50;
  if (text == "small") return Workload::kSmall;
  throw std::invalid_argument("'" + std::string(text) +
                              "': unknown workload (expected resnet50 or small)");
}

std::vector<TensorSpec> workloadTensors(Workload w) {
  return w == Workload::kResnet50 ? resnet50Parameters() : smallTensors();
}

}  // namespace kolo::bench
