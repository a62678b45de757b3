// The model zoo: the builder, BERT-base, and the name table. The image
// networks are in model_zoo_cnn.cc.
#include "predict/model_zoo.h"

#include <algorithm>

#include <stdexcept>

#include "predict/model_zoo_builder.h"

namespace kolo::predict {

namespace zoo {

Act Builder::conv(const std::string& name, Act in, int out, int kh, int kw, int stride,
                  int ph, int pw, bool bias) {
  const Act o{out, (in.h + 2 * ph - kh) / stride + 1, (in.w + 2 * pw - kw) / stride + 1};
  const double outputs = static_cast<double>(o.c) * o.h * o.w;
  add(name + ".weight", static_cast<uint64_t>(in.c) * out * kh * kw,
      outputs * in.c * kh * kw);
  if (bias) add(name + ".bias", out, outputs);
  return o;
}

void Builder::batchNorm(const std::string& name, Act a) {
  const double outputs = static_cast<double>(a.c) * a.h * a.w;
  add(name + ".weight", a.c, outputs);
  add(name + ".bias", a.c, outputs);
}

void Builder::linear(const std::string& name, int in, int out, int rows) {
  add(name + ".weight", static_cast<uint64_t>(in) * out,
      static_cast<double>(rows) * in * out);
  add(name + ".bias", out, static_cast<double>(rows) * out);
}

void Builder::layerNorm(const std::string& name, int width, int rows) {
  add(name + ".weight", width, static_cast<double>(rows) * width);
  add(name + ".bias", width, static_cast<double>(rows) * width);
}

void Builder::embedding(const std::string& name, int rows, int width, int tokens) {
  add(name + ".weight", static_cast<uint64_t>(rows) * width,
      static_cast<double>(tokens) * width);
}

Act Builder::pool(Act in, int k, int stride, int pad) {
  return {in.c, (in.h + 2 * pad - k) / stride + 1, (in.w + 2 * pad - k) / stride + 1};
}

void Builder::add(const std::string& name, uint64_t elements, double macs) {
  forward_.push_back({name, static_cast<size_t>(elements) * 4, macs});
}

std::vector<LayerGrad> Builder::backwardOrder() const {
  return {forward_.rbegin(), forward_.rend()};
}

// BERT-base (Devlin et al. 2019; Hugging Face's BertModel with its
// pooler): vocabulary 30522, 512 positions, 2 token types, 12 layers of
// width 768, 12 heads, feed-forward 3072. Shares at 128 tokens; the
// attention's own products (Q K^T and the weighted sum of V, 2 x 128^2 x
// 768 multiply-adds a layer) are given to the attention's output dense.
std::vector<LayerGrad> bertBase() {
  constexpr int kWidth = 768, kFf = 3072, kTokens = 128, kLayers = 12;
  Builder b;
  b.embedding("embeddings.word_embeddings", 30522, kWidth, kTokens);
  b.embedding("embeddings.position_embeddings", 512, kWidth, kTokens);
  b.embedding("embeddings.token_type_embeddings", 2, kWidth, kTokens);
  b.layerNorm("embeddings.LayerNorm", kWidth, kTokens);
  for (int i = 0; i < kLayers; ++i) {
    const std::string l = "encoder.layer." + std::to_string(i);
    b.linear(l + ".attention.self.query", kWidth, kWidth, kTokens);
    b.linear(l + ".attention.self.key", kWidth, kWidth, kTokens);
    b.linear(l + ".attention.self.value", kWidth, kWidth, kTokens);
    b.add(l + ".attention.output.dense.weight", uint64_t{kWidth} * kWidth,
          double{kTokens} * kWidth * kWidth + 2.0 * kTokens * kTokens * kWidth);
    b.add(l + ".attention.output.dense.bias", kWidth, double{kTokens} * kWidth);
    b.layerNorm(l + ".attention.output.LayerNorm", kWidth, kTokens);
    b.linear(l + ".intermediate.dense", kWidth, kFf, kTokens);
    b.linear(l + ".output.dense", kFf, kWidth, kTokens);
    b.layerNorm(l + ".output.LayerNorm", kWidth, kTokens);
  }
  b.linear("pooler.dense", kWidth, kWidth);
  return b.backwardOrder();
}

}  // namespace zoo

std::vector<std::string> zooNames() {
  return {"resnet18",     "resnet50",         "resnet101", "vgg16",
          "inception_v3", "inception_v3_aux", "bert-base"};
}

ZooModel zooModel(const std::string& name) {
  ZooModel m;
  m.name = name;
  if (name == "resnet18") {
    m.layers = zoo::resnet(18);
  } else if (name == "resnet50") {
    m.layers = zoo::resnet(50);
  } else if (name == "resnet101") {
    m.layers = zoo::resnet(101);
  } else if (name == "vgg16") {
    m.layers = zoo::vgg16();
  } else if (name == "inception_v3") {
    m.layers = zoo::inceptionV3(false);
  } else if (name == "inception_v3_aux") {
    m.layers = zoo::inceptionV3(true);
  } else if (name == "bert-base") {
    m.layers = zoo::bertBase();
  } else {
    std::string known;
    for (const auto& n : zooNames()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model '" + name + "'; known models: " + known);
  }
  for (const auto& l : m.layers) m.parameters += l.bytes / 4;
  return m;
}

}  // namespace kolo::predict
