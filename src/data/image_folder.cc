#include "data/image_folder.h"

// libjpeg's header needs FILE and size_t declared first.
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/check.h"

namespace kolo::data {
namespace {

// libjpeg reports fatal errors through error_exit, which must not return.
// It longjmps back to the function that set the jump point; C++ objects
// with destructors are never live between setjmp and longjmp in the code
// below (the FILE and libjpeg's own structs are cleaned up by hand).
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void onJpegError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void onJpegWarning(j_common_ptr, int) {}  // corrupt-data warnings: keep going

struct FileCloser {
  void operator()(FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

// Decodes with setjmp in a frame that holds no C++ objects; returns false
// with `message` set when libjpeg failed.
bool decodeInto(FILE* f, int channels, Image* out, std::vector<uint8_t>* pixels,
                char* message) {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = onJpegError;
  err.base.emit_message = onJpegWarning;
  if (setjmp(err.jump)) {
    std::memcpy(message, err.message, JMSG_LENGTH_MAX);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, f);
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->width = static_cast<int>(cinfo.output_width);
  out->height = static_cast<int>(cinfo.output_height);
  out->channels = cinfo.output_components;
  const size_t stride = static_cast<size_t>(out->width) * out->channels;
  pixels->resize(stride * out->height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels->data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

bool encodeFrom(FILE* f, const Image& image, int quality, char* message) {
  jpeg_compress_struct cinfo;
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = onJpegError;
  err.base.emit_message = onJpegWarning;
  if (setjmp(err.jump)) {
    std::memcpy(message, err.message, JMSG_LENGTH_MAX);
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = image.channels;
  cinfo.in_color_space = image.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(image.width) * image.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    // libjpeg's API takes non-const rows; it only reads them.
    JSAMPROW row =
        const_cast<uint8_t*>(image.pixels.data()) + stride * cinfo.next_scanline;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

bool isJpegName(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg";
}

}  // namespace

Image decodeJpeg(const std::string& path, int channels) {
  if (channels != 1 && channels != 3) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "decodeJpeg " << path << ": channels "
                                                          << channels
                                                          << " (expected 1 or 3)");
  }
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    KOLO_THROW(ErrorCode::kIo, "cannot open " << path << ": " << std::strerror(errno));
  }
  Image image;
  char message[JMSG_LENGTH_MAX] = {};
  std::vector<uint8_t> pixels;
  if (!decodeInto(f.get(), channels, &image, &pixels, message)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "cannot decode JPEG " << path << ": " << message);
  }
  image.pixels = std::move(pixels);
  return image;
}

void encodeJpeg(const std::string& path, const Image& image, int quality) {
  if ((image.channels != 1 && image.channels != 3) || image.width <= 0 ||
      image.height <= 0 ||
      image.pixels.size() !=
          static_cast<size_t>(image.width) * image.height * image.channels) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "encodeJpeg " << path << ": bad image " << image.width << "x"
                             << image.height << "x" << image.channels << " with "
                             << image.pixels.size() << " bytes");
  }
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    KOLO_THROW(ErrorCode::kIo, "cannot create " << path << ": " << std::strerror(errno));
  }
  char message[JMSG_LENGTH_MAX] = {};
  if (!encodeFrom(f.get(), image, std::clamp(quality, 1, 100), message)) {
    KOLO_THROW(ErrorCode::kIo, "cannot encode JPEG " << path << ": " << message);
  }
  if (std::fflush(f.get()) != 0) {
    KOLO_THROW(ErrorCode::kIo, "cannot write " << path << ": " << std::strerror(errno));
  }
}

// Each output pixel center (x + 0.5) maps to the source coordinate
// (x + 0.5) * srcW / dstW - 0.5, clamped to the image; the value is the
// bilinear mix of the four surrounding source pixels.
Image resizeBilinear(const Image& src, int width, int height) {
  if (width <= 0 || height <= 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "resizeBilinear: target size " << width << "x" << height);
  }
  if (width == src.width && height == src.height) return src;
  Image dst;
  dst.width = width;
  dst.height = height;
  dst.channels = src.channels;
  dst.pixels.resize(static_cast<size_t>(width) * height * src.channels);
  const double sx = static_cast<double>(src.width) / width;
  const double sy = static_cast<double>(src.height) / height;
  const int c = src.channels;
  for (int y = 0; y < height; ++y) {
    const double fy = std::clamp((y + 0.5) * sy - 0.5, 0.0, src.height - 1.0);
    const int y0 = static_cast<int>(fy);
    const int y1 = std::min(y0 + 1, src.height - 1);
    const double wy = fy - y0;
    for (int x = 0; x < width; ++x) {
      const double fx = std::clamp((x + 0.5) * sx - 0.5, 0.0, src.width - 1.0);
      const int x0 = static_cast<int>(fx);
      const int x1 = std::min(x0 + 1, src.width - 1);
      const double wx = fx - x0;
      for (int k = 0; k < c; ++k) {
        auto at = [&](int yy, int xx) {
          return static_cast<double>(
              src.pixels[(static_cast<size_t>(yy) * src.width + xx) * c + k]);
        };
        const double v = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) +
                         wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1));
        dst.pixels[(static_cast<size_t>(y) * width + x) * c + k] =
            static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  return dst;
}

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options)
    : options_(options) {
  namespace fs = std::filesystem;
  if (options.channels != 1 && options.channels != 3) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "ImageFolder " << root << ": channels "
                                                           << options.channels
                                                           << " (expected 1 or 3)");
  }
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    KOLO_THROW(ErrorCode::kIo, "image folder " << root << " is not a directory");
  }
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / classes_[label])) {
      if (entry.is_regular_file() && isJpegName(entry.path())) {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int>(label));
    }
  }
  if (files_.empty()) {
    KOLO_THROW(ErrorCode::kIo,
               "image folder " << root << " holds no root/<class>/*.jpg files");
  }
}

int64_t ImageFolder::sampleSize() const {
  return int64_t{options_.channels} * options_.height * options_.width;
}

void ImageFolder::load(int64_t i, float* out) const {
  const Image image = resizeBilinear(decodeJpeg(path(i), options_.channels),
                                     options_.width, options_.height);
  const int c = image.channels;
  const size_t plane = static_cast<size_t>(image.width) * image.height;
  for (size_t p = 0; p < plane; ++p) {
    for (int k = 0; k < c; ++k) {
      out[k * plane + p] = image.pixels[p * c + k] * (1.0f / 255.0f);
    }
  }
}

ImageBatch loadBatch(const ImageFolder& folder, const std::vector<int64_t>& indices) {
  ImageBatch b;
  b.count = static_cast<int64_t>(indices.size());
  const int64_t n = folder.sampleSize();
  b.images.resize(static_cast<size_t>(b.count * n));
  b.labels.reserve(indices.size());
  for (size_t j = 0; j < indices.size(); ++j) {
    folder.load(indices[j], b.images.data() + j * n);
    b.labels.push_back(folder.label(indices[j]));
  }
  return b;
}

}  // namespace kolo::data
