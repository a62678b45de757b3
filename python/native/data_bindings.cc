// kolo._native's data part: kolo's own framework-neutral data readers
// (src/data/) for Python, as NumPy arrays. kolo.data builds on it
// (docs/python.md, "Data").
//
//   ImageFolder(root, width, height, channels)   root/<class>/*.jpg
//   BatchPrefetcher(folder, batches, depth)       decodes ahead on a thread
//   DistributedSampler(n, rank, size, seed, shuffle, drop_last)
//   evaluation_range(n, rank, size)
//   decode_jpeg, encode_jpeg, resize_bilinear
//
// Like native.cc it never includes a framework's headers: images cross as
// NumPy arrays only.
//
// Contract
// - Decoding never holds the GIL: load_batch releases it for the whole
//   batch, and BatchPrefetcher decodes on its own C++ thread (Prefetcher of
//   src/data/prefetcher.h), so Python trains on batch i while batch i+1 is
//   decoded; next() releases the GIL while it waits.
// - Batches are float32 (N, C, H, W) in [0, 1] and int64 labels (N,); a
//   prefetched batch's memory is handed to NumPy without a copy.
// - kolo::Error from the readers becomes the kolo._native exception of its
//   code (KoloError with .code ERR_IO for a missing or unreadable file,
//   InvalidArgumentError for bad arguments or a file libjpeg rejects), with
//   the reader's message (it names the file). A decoding error inside a
//   prefetched batch surfaces from the next() that would return that batch.
// - An ImageFolder is immutable after construction and may be shared by any
//   number of prefetchers and threads. A BatchPrefetcher is used by one
//   Python thread at a time (pybind11 holds the GIL around its methods);
//   close() (or garbage collection) stops and joins its thread.
//
// Built without kolo_data (zlib or libjpeg missing), the module has only
// HAVE_DATA = False.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if KOLO_NATIVE_DATA
#include <kolo/error.h>

#include "data/distributed_sampler.h"
#include "data/image_folder.h"
#include "data/prefetcher.h"
#endif

namespace py = pybind11;

#if KOLO_NATIVE_DATA
namespace {

namespace kd = kolo::data;

using FloatArray = py::array_t<float, py::array::c_style>;
using LabelArray = py::array_t<int64_t, py::array::c_style>;

// C-order strides of `shape` for elements of T. Every array made here
// passes them explicitly: pybind11 before 2.12 computes default strides from
// the dtype's element size read out of NumPy 1's struct layout, which NumPy 2
// changed, so under NumPy 2 those strides come out wrong (a batch's labels
// all read as the first one). sizeof(T) is right under both.
template <typename T>
std::vector<py::ssize_t> cStrides(const std::vector<py::ssize_t>& shape) {
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t step = sizeof(T);
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    step *= shape[d];
  }
  return strides;
}

// A vector's memory as a NumPy array that owns it (no copy): the vector
// moves into a capsule that is the array's base.
template <typename T>
py::array_t<T> adopt(std::vector<T>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule base(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, cStrides<T>(shape), owned->data(), base);
}

// An uninitialised C-order array.
template <typename Array>
Array emptyArray(const std::vector<py::ssize_t>& shape) {
  using T = typename Array::value_type;
  return Array(shape, cStrides<T>(shape));
}

py::tuple batchToNumpy(kd::ImageBatch&& batch, const kd::ImageFolderOptions& o) {
  const auto n = static_cast<py::ssize_t>(batch.count);
  auto images = adopt(std::move(batch.images), {n, o.channels, o.height, o.width});
  auto labels = adopt(std::move(batch.labels), {n});
  return py::make_tuple(std::move(images), std::move(labels));
}

std::vector<int64_t> checkedIndices(const kd::ImageFolder& folder,
                                    const std::vector<int64_t>& indices) {
  for (int64_t i : indices) {
    if (i < 0 || i >= folder.size()) {
      throw py::index_error("sample index " + std::to_string(i) +
                            " outside the image folder's 0.." +
                            std::to_string(folder.size() - 1));
    }
  }
  return indices;
}

// The Python object behind a BatchPrefetcher: the folder stays alive as
// long as the pipeline that reads it.
class BatchPrefetcher {
 public:
  BatchPrefetcher(std::shared_ptr<const kd::ImageFolder> folder,
                  std::vector<std::vector<int64_t>> batches, size_t depth)
      : folder_(std::move(folder)), batches_(std::move(batches)) {
    for (const auto& b : batches_) checkedIndices(*folder_, b);
    pipeline_ = std::make_unique<kd::Prefetcher<kd::ImageBatch>>(
        static_cast<int64_t>(batches_.size()),
        [this](int64_t i) { return kd::loadBatch(*folder_, batches_[i]); }, depth);
  }

  ~BatchPrefetcher() { close(); }

  // (images, labels), or None after the last batch or after close().
  std::optional<py::tuple> next() {
    if (!pipeline_) return std::nullopt;
    std::optional<kd::ImageBatch> batch;
    try {
      py::gil_scoped_release nogil;
      batch = pipeline_->next();
    } catch (...) {
      close();  // the pipeline ended at the failed batch
      throw;
    }
    if (!batch) {
      close();
      return std::nullopt;
    }
    ++delivered_;
    return batchToNumpy(std::move(*batch), folder_->options());
  }

  // Stops the thread after the batch it is decoding; waits without the GIL
  // when called from Python (the thread never takes it).
  void close() {
    if (!pipeline_) return;
    std::unique_ptr<kd::Prefetcher<kd::ImageBatch>> p = std::move(pipeline_);
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      p.reset();
    } else {
      p.reset();
    }
  }

  size_t size() const { return batches_.size(); }
  size_t delivered() const { return delivered_; }

 private:
  std::shared_ptr<const kd::ImageFolder> folder_;
  const std::vector<std::vector<int64_t>> batches_;  // read by the thread
  std::unique_ptr<kd::Prefetcher<kd::ImageBatch>> pipeline_;
  size_t delivered_ = 0;
};

kd::Image imageFromArray(
    const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>& a) {
  if (a.ndim() != 2 && a.ndim() != 3) {
    throw py::value_error("expected a uint8 array (H, W) or (H, W, C), got " +
                          std::to_string(a.ndim()) + " dimensions");
  }
  kd::Image image;
  image.height = static_cast<int>(a.shape(0));
  image.width = static_cast<int>(a.shape(1));
  image.channels = a.ndim() == 3 ? static_cast<int>(a.shape(2)) : 1;
  image.pixels.assign(a.data(), a.data() + a.size());
  return image;
}

py::array_t<uint8_t> imageToArray(kd::Image&& image) {
  const std::vector<py::ssize_t> shape = {image.height, image.width, image.channels};
  return adopt(std::move(image.pixels), shape);
}

}  // namespace
#endif  // KOLO_NATIVE_DATA

// Called once from native.cc's module initialisation.
void bindData(py::module_& m) {
#if !KOLO_NATIVE_DATA
  m.attr("HAVE_DATA") = false;
#else
  m.attr("HAVE_DATA") = true;

  // kolo::Error -> the module's exception class of its code (the codes are
  // kolo_error's). The classes are borrowed: the module keeps them.
  static PyObject* byCode[9] = {};
  const char* names[9] = {
      "KoloError",     "InvalidArgumentError", "NotInitializedError", "KoloError",
      "MismatchError", "PeerLostError",        "KoloTimeoutError",    "KoloError",
      "KoloError"};
  for (int c = 0; c < 9; ++c) byCode[c] = m.attr(names[c]).ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kolo::Error& e) {
      const int code = static_cast<int>(e.code());
      PyObject* cls = byCode[code >= 0 && code < 9 ? code : 0];
      py::object exc = py::reinterpret_borrow<py::object>(cls)(e.what());
      exc.attr("code") = code;
      exc.attr("code_name") = std::string(kolo::toString(e.code()));
      PyErr_SetObject(cls, exc.ptr());
    }
  });

  py::class_<kd::ImageFolder, std::shared_ptr<kd::ImageFolder>>(
      m, "ImageFolder",
      "JPEG files in class folders, root/<class>/*.jpg (.jpeg, any case): classes "
      "sorted by name are labels 0..C-1, files sorted by name within a class. "
      "Samples are decoded (libjpeg-turbo), resized bilinearly to width x height "
      "and converted to `channels` (1 gray, 3 RGB).")
      .def(py::init([](const std::string& root, int width, int height, int channels) {
             if (width < 1 || height < 1) {
               throw py::value_error("ImageFolder " + root + ": size " +
                                     std::to_string(width) + "x" +
                                     std::to_string(height) + " (expected >= 1)");
             }
             kd::ImageFolderOptions o;
             o.width = width;
             o.height = height;
             o.channels = channels;
             py::gil_scoped_release nogil;  // scanning a large tree takes a while
             return std::make_shared<kd::ImageFolder>(root, o);
           }),
           py::arg("root"), py::arg("width"), py::arg("height"), py::arg("channels"))
      .def("size", &kd::ImageFolder::size, "Number of images.")
      .def("__len__", &kd::ImageFolder::size)
      .def_property_readonly("classes", &kd::ImageFolder::classes,
                             "Class folder names; label i is classes[i].")
      .def_property_readonly("width",
                             [](const kd::ImageFolder& f) { return f.options().width; })
      .def_property_readonly("height",
                             [](const kd::ImageFolder& f) { return f.options().height; })
      .def_property_readonly(
          "channels", [](const kd::ImageFolder& f) { return f.options().channels; })
      .def(
          "label",
          [](const kd::ImageFolder& f, int64_t i) {
            checkedIndices(f, {i});
            return f.label(i);
          },
          py::arg("i"))
      .def(
          "path",
          [](const kd::ImageFolder& f, int64_t i) {
            checkedIndices(f, {i});
            return f.path(i);
          },
          py::arg("i"))
      .def(
          "labels",
          [](const kd::ImageFolder& f) {
            std::vector<int64_t> all(static_cast<size_t>(f.size()));
            for (int64_t i = 0; i < f.size(); ++i)
              all[static_cast<size_t>(i)] = f.label(i);
            return adopt(std::move(all), {static_cast<py::ssize_t>(f.size())});
          },
          "Every sample's label, int64 (size,).")
      .def(
          "load_batch",
          [](const kd::ImageFolder& f, const std::vector<int64_t>& indices) {
            const std::vector<int64_t> idx = checkedIndices(f, indices);
            const auto n = static_cast<py::ssize_t>(idx.size());
            const auto& o = f.options();
            auto images = emptyArray<FloatArray>({n, static_cast<py::ssize_t>(o.channels),
                                                  static_cast<py::ssize_t>(o.height),
                                                  static_cast<py::ssize_t>(o.width)});
            auto labels = emptyArray<LabelArray>({n});
            float* out = images.mutable_data();
            int64_t* lab = labels.mutable_data();
            const int64_t per = f.sampleSize();
            {
              py::gil_scoped_release nogil;
              for (size_t j = 0; j < idx.size(); ++j) {
                f.load(idx[j], out + static_cast<int64_t>(j) * per);
                lab[j] = f.label(idx[j]);
              }
            }
            return py::make_tuple(std::move(images), std::move(labels));
          },
          py::arg("indices"),
          "Decodes the listed samples, without the GIL: (float32 (N, C, H, W) in "
          "[0, 1], int64 labels (N,)).");

  py::class_<BatchPrefetcher>(
      m, "BatchPrefetcher",
      "Decodes the listed batches of an ImageFolder in order on a background C++ "
      "thread, at most `depth` ahead; iterating yields (images, labels) as "
      "load_batch does.")
      .def(py::init<std::shared_ptr<kd::ImageFolder>, std::vector<std::vector<int64_t>>,
                    size_t>(),
           py::arg("folder"), py::arg("batches"), py::arg("depth") = 4)
      .def("next", &BatchPrefetcher::next,
           "The next batch (waits without the GIL), or None after the last.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](BatchPrefetcher& p) {
             auto b = p.next();
             if (!b) throw py::stop_iteration();
             return *b;
           })
      .def("__len__", &BatchPrefetcher::size)
      .def_property_readonly("delivered", &BatchPrefetcher::delivered)
      .def("close", &BatchPrefetcher::close,
           "Stops the background thread (after its current batch); later next() "
           "returns None.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](BatchPrefetcher& p, py::args) { p.close(); });

  py::class_<kd::DistributedSampler>(
      m, "DistributedSampler",
      "kolo's distributed sampler (src/data/distributed_sampler.h): each epoch a "
      "permutation from (seed, epoch), identical on every rank, dealt round-robin "
      "into disjoint shards of equal length (padded with the permutation's first "
      "elements, or cut when drop_last).")
      .def(py::init([](int64_t n, int rank, int size, uint64_t seed, bool shuffle,
                       bool dropLast) {
             return kd::DistributedSampler(n, rank, size, seed, shuffle,
                                           dropLast
                                               ? kd::DistributedSampler::Remainder::kDrop
                                               : kd::DistributedSampler::Remainder::kPad);
           }),
           py::arg("n"), py::arg("rank"), py::arg("size"), py::arg("seed"),
           py::arg("shuffle") = true, py::arg("drop_last") = false)
      .def("set_epoch", &kd::DistributedSampler::setEpoch, py::arg("epoch"))
      .def_property_readonly("epoch", &kd::DistributedSampler::epoch)
      .def_property_readonly("num_samples", &kd::DistributedSampler::numSamples,
                             "Samples per rank per epoch.")
      .def(
          "indices",
          [](const kd::DistributedSampler& s) {
            std::vector<int64_t> v = s.indices();
            const auto n = static_cast<py::ssize_t>(v.size());
            return adopt(std::move(v), {n});
          },
          "This rank's sample indices for the current epoch, int64.")
      .def(
          "permutation",
          [](const kd::DistributedSampler& s) {
            std::vector<int64_t> v = s.permutation();
            const auto n = static_cast<py::ssize_t>(v.size());
            return adopt(std::move(v), {n});
          },
          "The whole epoch's order before sharding.");
  m.def(
      "evaluation_range",
      [](int64_t n, int rank, int size) {
        const kd::Range r = kd::evaluationRange(n, rank, size);
        return py::make_tuple(r.begin, r.end);
      },
      py::arg("n"), py::arg("rank"), py::arg("size"),
      "(begin, end): this rank's contiguous, unpadded part of n validation samples.");

  m.def(
      "decode_jpeg",
      [](const std::string& path, int channels) {
        kd::Image image;
        {
          py::gil_scoped_release nogil;
          image = kd::decodeJpeg(path, channels);
        }
        return imageToArray(std::move(image));
      },
      py::arg("path"), py::arg("channels"),
      "The file's pixels as uint8 (H, W, channels), converted as libjpeg does.");
  m.def(
      "encode_jpeg",
      [](const std::string& path,
         const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>& pixels,
         int quality) {
        kd::Image image = imageFromArray(pixels);
        py::gil_scoped_release nogil;
        kd::encodeJpeg(path, image, quality);
      },
      py::arg("path"), py::arg("pixels"), py::arg("quality") = 95,
      "Writes uint8 (H, W) or (H, W, 1|3) as a baseline JPEG.");
  m.def(
      "resize_bilinear",
      [](const py::array_t<uint8_t, py::array::c_style | py::array::forcecast>& pixels,
         int width, int height) {
        kd::Image image = imageFromArray(pixels);
        {
          py::gil_scoped_release nogil;
          image = kd::resizeBilinear(image, width, height);
        }
        return imageToArray(std::move(image));
      },
      py::arg("pixels"), py::arg("width"), py::arg("height"),
      "Bilinear resampling (pixel centers aligned) of uint8 (H, W[, C]); returns "
      "(height, width, C).");
#endif  // KOLO_NATIVE_DATA
}
