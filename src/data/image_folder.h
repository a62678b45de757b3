// JPEG images in class folders (root/<class name>/*.jpg), decoded with
// libjpeg-turbo and resized, as the image-folder classifier reads them.
//
// Contract
// - decodeJpeg/encodeJpeg/resizeBilinear are thread-safe (no shared state)
//   and throw kolo::Error naming the file: kIo when it cannot be opened or
//   written, kInvalidArgument when libjpeg rejects it (its message is kept).
// - ImageFolder scans once in its constructor (classes sorted by name get
//   labels 0..C-1; files sorted by name within each class; .jpg and .jpeg,
//   any case). After construction every method is const and thread-safe,
//   so a prefetching thread may load samples while the caller trains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::data {

// Interleaved 8-bit pixels, row-major: height x width x channels (1 = gray,
// 3 = RGB).
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<uint8_t> pixels;
};

// Decodes into `channels` (1: grayscale, 3: RGB), converting as libjpeg
// does whatever the file's own color space.
Image decodeJpeg(const std::string& path, int channels);
// Writes `image` (1 or 3 channels) as a baseline JPEG of `quality` 1..100.
void encodeJpeg(const std::string& path, const Image& image, int quality = 95);
// Bilinear resampling with pixel centers aligned (as OpenCV's INTER_LINEAR
// without antialiasing); the same size returns a copy.
Image resizeBilinear(const Image& image, int width, int height);

struct ImageFolderOptions {
  int width = 28;
  int height = 28;
  int channels = 1;  // 1 (grayscale) or 3 (RGB)
};

class ImageFolder {
 public:
  // Throws Error(kIo) when root is missing or holds no images.
  ImageFolder(const std::string& root, ImageFolderOptions options);

  int64_t size() const { return static_cast<int64_t>(files_.size()); }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t i) const { return files_.at(static_cast<size_t>(i)); }
  int label(int64_t i) const { return labels_.at(static_cast<size_t>(i)); }
  const ImageFolderOptions& options() const { return options_; }
  // Values per sample: channels * height * width.
  int64_t sampleSize() const;

  // Decodes and resizes sample i into out[sampleSize()]: planar (channel,
  // row, column), values in [0, 1].
  void load(int64_t i, float* out) const;

 private:
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int> labels_;
};

// A batch of samples ready for a framework: planar float images and labels.
struct ImageBatch {
  int64_t count = 0;
  std::vector<float> images;  // count * sampleSize
  std::vector<int64_t> labels;
};

// Loads the listed samples of `folder` into one batch.
ImageBatch loadBatch(const ImageFolder& folder, const std::vector<int64_t>& indices);

}  // namespace kolo::data
