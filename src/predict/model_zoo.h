// Known models' parameter tensors, in backward order, with their share of
// the backward compute (docs/scale.md, "The model zoo").
//
// Contract
// - zooModel(name) builds the model from its architecture: every parameter
//   tensor as PyTorch registers it (torchvision's resnet18, resnet50,
//   resnet101, vgg16 and inception_v3; Hugging Face's BertModel for
//   bert-base), listed in reverse registration order (the order DDP and
//   Horovod expect gradients in), 4 bytes per parameter.
// - computeShare is proportional to the layer's forward multiply-adds at
//   the model's usual input (224x224 images, 299x299 for Inception V3,
//   128 tokens for BERT), given to its weight tensor; biases and
//   normalisation parameters get one multiply-add per output element. Only
//   the shares' ratios matter.
// - Unknown names throw std::invalid_argument listing the known ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "predict/train_spec.h"

namespace kolo::predict {

struct ZooModel {
  std::string name;
  std::vector<LayerGrad> layers;  // backward order
  uint64_t parameters = 0;
};

// The names zooModel knows: resnet18, resnet50, resnet101, vgg16,
// inception_v3 (without the auxiliary classifier), inception_v3_aux (with
// it, as torchvision trains it), bert-base.
std::vector<std::string> zooNames();

ZooModel zooModel(const std::string& name);

}  // namespace kolo::predict
