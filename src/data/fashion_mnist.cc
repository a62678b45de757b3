#include "data/fashion_mnist.h"

#include <zlib.h>

#include <sys/stat.h>

#include <cstring>

#include "common/byte_codec.h"
#include "common/check.h"

namespace kolo::data {
namespace {

// Reads the whole file through zlib, which reads gzip and plain files alike.
std::vector<uint8_t> readGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    KOLO_THROW(ErrorCode::kIo, "cannot open " << path << ": " << std::strerror(errno));
  }
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(f, &code);
      gzclose(f);
      KOLO_THROW(ErrorCode::kIo, "cannot read " << path << ": " << message);
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  gzclose(f);
  return out;
}

// IDX headers are big endian; the caller checked the 4 bytes are there.
uint32_t bigEndian32(const uint8_t* p) {
  return loadBytes<uint32_t>(p, ByteOrder::kBig);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

IdxArray readIdxFile(const std::string& path, int expectedDims) {
  const std::vector<uint8_t> bytes = readGzip(path);
  if (bytes.size() < 4) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               path << ": " << bytes.size() << " bytes, too short for an IDX header");
  }
  const uint32_t magic = bigEndian32(bytes.data());
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(expectedDims);
  if (magic != expected) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               path << ": bad IDX magic number 0x" << std::hex << magic << ", expected 0x"
                    << expected << " (unsigned bytes, " << std::dec << expectedDims
                    << " dimensions)");
  }
  const size_t header = 4 + 4 * static_cast<size_t>(expectedDims);
  if (bytes.size() < header) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               path << ": truncated IDX header (" << bytes.size() << " bytes)");
  }
  IdxArray a;
  size_t total = 1;
  for (int d = 0; d < expectedDims; ++d) {
    a.dims.push_back(bigEndian32(bytes.data() + 4 + 4 * d));
    total *= static_cast<size_t>(a.dims.back());
  }
  if (bytes.size() != header + total) {
    KOLO_THROW(ErrorCode::kInvalidArgument, path << ": " << bytes.size() - header
                                                 << " data bytes, the header says "
                                                 << total);
  }
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

const char* fashionMnistClassName(int label) {
  static const char* const kNames[kFashionMnistClasses] = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return label >= 0 && label < kFashionMnistClasses ? kNames[label] : "?";
}

FashionMnist loadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = dir + "/" + (split == Split::kTrain ? "train" : "t10k");
  const std::string imagesPath = prefix + "-images-idx3-ubyte.gz";
  const std::string labelsPath = prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& p : {imagesPath, labelsPath}) {
    if (!exists(p)) {
      KOLO_THROW(ErrorCode::kIo, "Fashion-MNIST file "
                                     << p
                                     << " not found; install the data "
                                        "with `apt-get install "
                                        "dataset-fashion-mnist` or pass "
                                        "the directory that holds it");
    }
  }
  IdxArray images = readIdxFile(imagesPath, 3);
  IdxArray labels = readIdxFile(labelsPath, 1);
  if (images.dims[0] != labels.dims[0]) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               imagesPath << " holds " << images.dims[0] << " images but " << labelsPath
                          << " holds " << labels.dims[0] << " labels");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kFashionMnistClasses) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 labelsPath << ": label " << int{labels.data[i]} << " at index " << i
                            << " is not in 0..9");
    }
  }
  FashionMnist d;
  d.count = images.dims[0];
  d.rows = images.dims[1];
  d.cols = images.dims[2];
  d.images = std::move(images.data);
  d.labels = std::move(labels.data);
  return d;
}

}  // namespace kolo::data
