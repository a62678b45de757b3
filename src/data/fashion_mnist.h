// Fashion-MNIST in the IDX format (gzip-compressed), as Debian's
// dataset-fashion-mnist installs it in /usr/share/datasets/fashion-mnist/:
// {train,t10k}-images-idx3-ubyte.gz and {train,t10k}-labels-idx1-ubyte.gz.
//
// IDX: a big-endian header: magic 0x00000800 | type << 8 | dims (0x08 =
// unsigned byte), then one 32-bit big-endian size per dimension, then the
// data in row-major order. Images are 0x00000803 (count x 28 x 28), labels
// 0x00000801 (count).
//
// Contract: functions are thread-safe (no shared state) and block on file
// I/O. Failures throw kolo::Error naming the file: kIo for a missing or
// unreadable file (a missing Fashion-MNIST file says to run
// `apt-get install dataset-fashion-mnist`), kInvalidArgument for a bad
// magic number, a truncated file or images and labels of different counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::data {

// One IDX array of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes
};

// Reads a gzip-compressed (or plain) IDX file of unsigned bytes and checks
// that it has `expectedDims` dimensions.
IdxArray readIdxFile(const std::string& path, int expectedDims);

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;

// "T-shirt/top", "Trouser", ... for labels 0..9.
const char* fashionMnistClassName(int label);

struct FashionMnist {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> images;  // count x rows x cols, 0..255
  std::vector<uint8_t> labels;  // count, 0..9
};

enum class Split { kTrain, kTest };

// Loads one split from `dir` (the "train" or "t10k" files).
FashionMnist loadFashionMnist(const std::string& dir, Split split);

}  // namespace kolo::data
