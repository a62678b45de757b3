// Builds a model's tensor list from its layers (model_zoo.cc's helper).
// Layers are added in registration order; tensors() reverses them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "predict/train_spec.h"

namespace kolo::predict::zoo {

// An image activation's channels and size.
struct Act {
  int c = 0;
  int h = 0;
  int w = 0;
};

class Builder {
 public:
  // A 2-D convolution (kernel kh x kw, stride, padding ph x pw), with a
  // bias when `bias`.
  Act conv(const std::string& name, Act in, int out, int kh, int kw, int stride, int ph,
           int pw, bool bias);
  // A batch norm's weight and bias over activation `a`.
  void batchNorm(const std::string& name, Act a);
  // A fully connected layer of `in` x `out` with bias, applied to `rows`
  // vectors (tokens).
  void linear(const std::string& name, int in, int out, int rows = 1);
  void layerNorm(const std::string& name, int width, int rows);
  void embedding(const std::string& name, int rows, int width, int tokens);
  // A parameterless pool: the output size.
  static Act pool(Act in, int k, int stride, int pad = 0);
  void add(const std::string& name, uint64_t elements, double macs);

  std::vector<LayerGrad> backwardOrder() const;

 private:
  std::vector<LayerGrad> forward_;
};

std::vector<LayerGrad> resnet(int depth);
std::vector<LayerGrad> vgg16();
std::vector<LayerGrad> inceptionV3(bool aux);
std::vector<LayerGrad> bertBase();

}  // namespace kolo::predict::zoo
