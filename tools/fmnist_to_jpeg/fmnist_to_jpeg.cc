// fmnist-to-jpeg: writes Fashion-MNIST (the IDX files of Debian's
// dataset-fashion-mnist) as an image folder of grayscale JPEG files, the
// layout the image-folder reader and examples/fashion_mnist --data read:
//
//   OUT/train/<class>/<index>.jpg   (60,000 files)
//   OUT/test/<class>/<index>.jpg    (10,000 files)
//
// Class folders are named 0_T-shirt_top, 1_Trouser, ... so that sorting
// by name gives the dataset's label order.
//
//   fmnist-to-jpeg OUT [--data DIR] [--limit N] [--quality Q]
//
// --limit N writes only the first N images of each split (quick tests).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "data/fashion_mnist.h"
#include "data/image_folder.h"

namespace {

void makeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  }
}

std::string classFolder(int label) {
  std::string name =
      std::to_string(label) + "_" + kolo::data::fashionMnistClassName(label);
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return name;
}

int usage() {
  std::fprintf(stderr,
               "usage: fmnist-to-jpeg OUT [--data DIR] [--limit N] [--quality Q]\n"
               "  writes OUT/{train,test}/<class>/<index>.jpg from the Fashion-MNIST\n"
               "  IDX files in DIR (default %s)\n",
               kolo::data::kFashionMnistDir);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  std::string dir = kolo::data::kFashionMnistDir;
  long limit = -1;
  int quality = 95;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--data" || a == "--limit" || a == "--quality") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--data") dir = v;
      if (a == "--limit") limit = std::strtol(v.c_str(), nullptr, 10);
      if (a == "--quality") quality = std::atoi(v.c_str());
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (out.empty() && !a.empty() && a[0] != '-') {
      out = a;
    } else {
      return usage();
    }
  }
  if (out.empty()) return usage();
  try {
    makeDir(out);
    for (auto split : {kolo::data::Split::kTrain, kolo::data::Split::kTest}) {
      const auto d = kolo::data::loadFashionMnist(dir, split);
      const std::string base =
          out + (split == kolo::data::Split::kTrain ? "/train" : "/test");
      makeDir(base);
      for (int c = 0; c < kolo::data::kFashionMnistClasses; ++c) {
        makeDir(base + "/" + classFolder(c));
      }
      const int64_t n = limit >= 0 ? std::min<int64_t>(limit, d.count) : d.count;
      kolo::data::Image image;
      image.width = static_cast<int>(d.cols);
      image.height = static_cast<int>(d.rows);
      image.channels = 1;
      const int64_t pixels = d.rows * d.cols;
      for (int64_t i = 0; i < n; ++i) {
        image.pixels.assign(d.images.begin() + i * pixels,
                            d.images.begin() + (i + 1) * pixels);
        char name[32];
        std::snprintf(name, sizeof name, "/%05lld.jpg", static_cast<long long>(i));
        kolo::data::encodeJpeg(base + "/" + classFolder(d.labels[i]) + name, image,
                               quality);
      }
      std::printf("%s: %lld images\n", base.c_str(), static_cast<long long>(n));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fmnist-to-jpeg: %s\n", e.what());
    return 1;
  }
  return 0;
}
