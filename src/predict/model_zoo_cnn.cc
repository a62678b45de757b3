// The image networks of the model zoo, layer by layer as torchvision 0.14
// registers their parameters (torchvision/models/{resnet,vgg,inception}.py).
#include <string>

#include "predict/model_zoo_builder.h"

namespace kolo::predict::zoo {

namespace {

std::string at(const std::string& prefix, int i) {
  return prefix + "." + std::to_string(i);
}

// ResNet's blocks (He et al. 2016; torchvision's v1.5: a bottleneck's
// stride is on its 3x3 conv). Every conv is bias-free and followed by a BN.
Act basicBlock(Builder& b, const std::string& p, Act in, int width, int stride) {
  Act x = b.conv(p + ".conv1", in, width, 3, 3, stride, 1, 1, false);
  b.batchNorm(p + ".bn1", x);
  x = b.conv(p + ".conv2", x, width, 3, 3, 1, 1, 1, false);
  b.batchNorm(p + ".bn2", x);
  if (stride != 1 || in.c != width) {
    const Act d = b.conv(p + ".downsample.0", in, width, 1, 1, stride, 0, 0, false);
    b.batchNorm(p + ".downsample.1", d);
  }
  return x;
}

Act bottleneck(Builder& b, const std::string& p, Act in, int width, int stride) {
  Act x = b.conv(p + ".conv1", in, width, 1, 1, 1, 0, 0, false);
  b.batchNorm(p + ".bn1", x);
  x = b.conv(p + ".conv2", x, width, 3, 3, stride, 1, 1, false);
  b.batchNorm(p + ".bn2", x);
  x = b.conv(p + ".conv3", x, width * 4, 1, 1, 1, 0, 0, false);
  b.batchNorm(p + ".bn3", x);
  if (stride != 1 || in.c != width * 4) {
    const Act d = b.conv(p + ".downsample.0", in, width * 4, 1, 1, stride, 0, 0, false);
    b.batchNorm(p + ".downsample.1", d);
  }
  return x;
}

// Inception V3's conv: bias-free conv and its BN (BasicConv2d).
Act basic(Builder& b, const std::string& p, Act in, int out, int kh, int kw,
          int stride = 1, int ph = 0, int pw = 0) {
  const Act x = b.conv(p + ".conv", in, out, kh, kw, stride, ph, pw, false);
  b.batchNorm(p + ".bn", x);
  return x;
}

Act concat(std::initializer_list<Act> parts) {
  Act o = *parts.begin();
  o.c = 0;
  for (const Act& a : parts) o.c += a.c;
  return o;
}

Act inceptionA(Builder& b, const std::string& p, Act in, int poolFeatures) {
  const Act a = basic(b, p + ".branch1x1", in, 64, 1, 1);
  Act c = basic(b, p + ".branch5x5_1", in, 48, 1, 1);
  c = basic(b, p + ".branch5x5_2", c, 64, 5, 5, 1, 2, 2);
  Act d = basic(b, p + ".branch3x3dbl_1", in, 64, 1, 1);
  d = basic(b, p + ".branch3x3dbl_2", d, 96, 3, 3, 1, 1, 1);
  d = basic(b, p + ".branch3x3dbl_3", d, 96, 3, 3, 1, 1, 1);
  const Act e = basic(b, p + ".branch_pool", in, poolFeatures, 1, 1);
  return concat({a, c, d, e});
}

Act inceptionB(Builder& b, const std::string& p, Act in) {
  const Act a = basic(b, p + ".branch3x3", in, 384, 3, 3, 2);
  Act d = basic(b, p + ".branch3x3dbl_1", in, 64, 1, 1);
  d = basic(b, p + ".branch3x3dbl_2", d, 96, 3, 3, 1, 1, 1);
  d = basic(b, p + ".branch3x3dbl_3", d, 96, 3, 3, 2);
  return concat({a, d, Builder::pool(in, 3, 2)});
}

Act inceptionC(Builder& b, const std::string& p, Act in, int c7) {
  const Act a = basic(b, p + ".branch1x1", in, 192, 1, 1);
  Act s = basic(b, p + ".branch7x7_1", in, c7, 1, 1);
  s = basic(b, p + ".branch7x7_2", s, c7, 1, 7, 1, 0, 3);
  s = basic(b, p + ".branch7x7_3", s, 192, 7, 1, 1, 3, 0);
  Act d = basic(b, p + ".branch7x7dbl_1", in, c7, 1, 1);
  d = basic(b, p + ".branch7x7dbl_2", d, c7, 7, 1, 1, 3, 0);
  d = basic(b, p + ".branch7x7dbl_3", d, c7, 1, 7, 1, 0, 3);
  d = basic(b, p + ".branch7x7dbl_4", d, c7, 7, 1, 1, 3, 0);
  d = basic(b, p + ".branch7x7dbl_5", d, 192, 1, 7, 1, 0, 3);
  const Act e = basic(b, p + ".branch_pool", in, 192, 1, 1);
  return concat({a, s, d, e});
}

Act inceptionD(Builder& b, const std::string& p, Act in) {
  Act a = basic(b, p + ".branch3x3_1", in, 192, 1, 1);
  a = basic(b, p + ".branch3x3_2", a, 320, 3, 3, 2);
  Act s = basic(b, p + ".branch7x7x3_1", in, 192, 1, 1);
  s = basic(b, p + ".branch7x7x3_2", s, 192, 1, 7, 1, 0, 3);
  s = basic(b, p + ".branch7x7x3_3", s, 192, 7, 1, 1, 3, 0);
  s = basic(b, p + ".branch7x7x3_4", s, 192, 3, 3, 2);
  return concat({a, s, Builder::pool(in, 3, 2)});
}

Act inceptionE(Builder& b, const std::string& p, Act in) {
  const Act a = basic(b, p + ".branch1x1", in, 320, 1, 1);
  const Act t = basic(b, p + ".branch3x3_1", in, 384, 1, 1);
  const Act t1 = basic(b, p + ".branch3x3_2a", t, 384, 1, 3, 1, 0, 1);
  const Act t2 = basic(b, p + ".branch3x3_2b", t, 384, 3, 1, 1, 1, 0);
  Act d = basic(b, p + ".branch3x3dbl_1", in, 448, 1, 1);
  d = basic(b, p + ".branch3x3dbl_2", d, 384, 3, 3, 1, 1, 1);
  const Act d1 = basic(b, p + ".branch3x3dbl_3a", d, 384, 1, 3, 1, 0, 1);
  const Act d2 = basic(b, p + ".branch3x3dbl_3b", d, 384, 3, 1, 1, 1, 0);
  const Act e = basic(b, p + ".branch_pool", in, 192, 1, 1);
  return concat({a, t1, t2, d1, d2, e});
}

}  // namespace

std::vector<LayerGrad> resnet(int depth) {
  const bool basicBlocks = depth < 50;
  const int* blocks = nullptr;
  static const int k18[] = {2, 2, 2, 2}, k50[] = {3, 4, 6, 3}, k101[] = {3, 4, 23, 3};
  blocks = depth == 18 ? k18 : depth == 50 ? k50 : k101;
  Builder b;
  Act x = b.conv("conv1", {3, 224, 224}, 64, 7, 7, 2, 3, 3, false);
  b.batchNorm("bn1", x);
  x = Builder::pool(x, 3, 2, 1);
  const int widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int i = 0; i < blocks[stage]; ++i) {
      const std::string p = at("layer" + std::to_string(stage + 1), i);
      const int stride = stage > 0 && i == 0 ? 2 : 1;
      x = basicBlocks ? basicBlock(b, p, x, widths[stage], stride)
                      : bottleneck(b, p, x, widths[stage], stride);
    }
  }
  b.linear("fc", x.c, 1000);
  return b.backwardOrder();
}

// VGG-16 (Simonyan and Zisserman 2015, configuration D), without batch
// norm: thirteen 3x3 convs with biases, three fully connected layers.
std::vector<LayerGrad> vgg16() {
  Builder b;
  Act x{3, 224, 224};
  const int cfg[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                     0,  512, 512, 512, 0,   512, 512, 512, 0};
  int index = 0;
  for (int c : cfg) {
    if (c == 0) {
      x = Builder::pool(x, 2, 2);
    } else {
      x = b.conv(at("features", index), x, c, 3, 3, 1, 1, 1, true);
      ++index;  // the ReLU after it
    }
    ++index;
  }
  b.linear("classifier.0", 512 * 7 * 7, 4096);
  b.linear("classifier.3", 4096, 4096);
  b.linear("classifier.6", 4096, 1000);
  return b.backwardOrder();
}

// Inception V3 (Szegedy et al. 2016) at 299x299; `aux`: with the auxiliary
// classifier, registered after Mixed_6e.
std::vector<LayerGrad> inceptionV3(bool aux) {
  Builder b;
  Act x = basic(b, "Conv2d_1a_3x3", {3, 299, 299}, 32, 3, 3, 2);
  x = basic(b, "Conv2d_2a_3x3", x, 32, 3, 3);
  x = basic(b, "Conv2d_2b_3x3", x, 64, 3, 3, 1, 1, 1);
  x = Builder::pool(x, 3, 2);
  x = basic(b, "Conv2d_3b_1x1", x, 80, 1, 1);
  x = basic(b, "Conv2d_4a_3x3", x, 192, 3, 3);
  x = Builder::pool(x, 3, 2);
  x = inceptionA(b, "Mixed_5b", x, 32);
  x = inceptionA(b, "Mixed_5c", x, 64);
  x = inceptionA(b, "Mixed_5d", x, 64);
  x = inceptionB(b, "Mixed_6a", x);
  x = inceptionC(b, "Mixed_6b", x, 128);
  x = inceptionC(b, "Mixed_6c", x, 160);
  x = inceptionC(b, "Mixed_6d", x, 160);
  x = inceptionC(b, "Mixed_6e", x, 192);
  if (aux) {
    const Act a = basic(b, "AuxLogits.conv0", Builder::pool(x, 5, 3), 128, 1, 1);
    basic(b, "AuxLogits.conv1", a, 768, 5, 5);
    b.linear("AuxLogits.fc", 768, 1000);
  }
  x = inceptionD(b, "Mixed_7a", x);
  x = inceptionE(b, "Mixed_7b", x);
  x = inceptionE(b, "Mixed_7c", x);
  b.linear("fc", x.c, 1000);
  return b.backwardOrder();
}

}  // namespace kolo::predict::zoo
