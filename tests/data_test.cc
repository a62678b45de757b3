// Data loading (src/data): the Fashion-MNIST IDX reader on the real files
// of Debian's dataset-fashion-mnist, its errors, the distributed sampler's
// properties, JPEG round trips, the image-folder reader and the
// prefetching pipeline's order, bound and termination.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include <kolo/error.h>

#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "data/prefetcher.h"

namespace kolo::data {
namespace {

namespace fs = std::filesystem;

// A fresh temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kolo_data_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()),
          static_cast<std::streamsize>(bytes.size()));
}

std::string errorText(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- Fashion-MNIST -----------------------------------------------------------

TEST(FashionMnist, ReadsTheRealTrainAndTestFiles) {
  const FashionMnist train = loadFashionMnist(kFashionMnistDir, Split::kTrain);
  const FashionMnist test = loadFashionMnist(kFashionMnistDir, Split::kTest);
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
  for (const FashionMnist* d : {&train, &test}) {
    EXPECT_EQ(d->rows, 28);
    EXPECT_EQ(d->cols, 28);
    ASSERT_EQ(d->images.size(), static_cast<size_t>(d->count * 28 * 28));
    ASSERT_EQ(d->labels.size(), static_cast<size_t>(d->count));
    // The dataset is balanced: count / 10 images of each class.
    std::vector<int64_t> perClass(10, 0);
    for (uint8_t l : d->labels) ++perClass[l];
    for (int c = 0; c < 10; ++c) EXPECT_EQ(perClass[c], d->count / 10) << "class " << c;
    // Mean pixel of Fashion-MNIST is about 0.286 * 255 (images, not noise).
    const double mean = std::accumulate(d->images.begin(), d->images.end(), 0.0) /
                        static_cast<double>(d->images.size());
    EXPECT_NEAR(mean / 255.0, 0.286, 0.01);
  }
  EXPECT_STREQ(fashionMnistClassName(0), "T-shirt/top");
  EXPECT_STREQ(fashionMnistClassName(9), "Ankle boot");
}

TEST(FashionMnist, MissingFilesSayHowToInstallThem) {
  TempDir dir;
  const std::string text =
      errorText([&] { loadFashionMnist(dir.path(), Split::kTrain); });
  EXPECT_NE(text.find("apt-get install dataset-fashion-mnist"), std::string::npos)
      << text;
  EXPECT_NE(text.find(dir.path() + "/train-images-idx3-ubyte.gz"), std::string::npos)
      << text;
}

TEST(FashionMnist, BadMagicAndTruncatedFilesNameTheFile) {
  TempDir dir;
  // zlib reads plain files too, so uncompressed IDX files stand in.
  const std::string images = dir.path() + "/t10k-images-idx3-ubyte.gz";
  const std::string labels = dir.path() + "/t10k-labels-idx1-ubyte.gz";
  writeBytes(images, {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1, 7, 9});
  writeBytes(labels, {0, 0, 8, 3, 0, 0, 0, 2, 1, 2});  // an images magic
  std::string text = errorText([&] { loadFashionMnist(dir.path(), Split::kTest); });
  EXPECT_NE(text.find(labels), std::string::npos) << text;
  EXPECT_NE(text.find("magic"), std::string::npos) << text;
  EXPECT_NE(text.find("0x803"), std::string::npos) << text;

  writeBytes(labels, {0, 0, 8, 1, 0, 0, 0, 3, 1, 2});  // says 3, holds 2
  text = errorText([&] { loadFashionMnist(dir.path(), Split::kTest); });
  EXPECT_NE(text.find(labels), std::string::npos) << text;
  EXPECT_NE(text.find("2 data bytes, the header says 3"), std::string::npos) << text;

  writeBytes(labels, {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3});  // 3 labels, 2 images
  text = errorText([&] { loadFashionMnist(dir.path(), Split::kTest); });
  EXPECT_NE(text.find("2 images"), std::string::npos) << text;

  writeBytes(labels, {0, 0, 8, 1, 0, 0, 0, 2, 4, 6});
  const FashionMnist d = loadFashionMnist(dir.path(), Split::kTest);
  EXPECT_EQ(d.count, 2);
  EXPECT_EQ(d.images, (std::vector<uint8_t>{7, 9}));
  EXPECT_EQ(d.labels, (std::vector<uint8_t>{4, 6}));
}

// ---- DistributedSampler ----------------------------------------------------------

std::vector<std::vector<int64_t>> shards(int64_t n, int size, uint64_t seed,
                                         int64_t epoch,
                                         DistributedSampler::Remainder rem) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < size; ++r) {
    DistributedSampler s(n, r, size, seed, true, rem);
    s.setEpoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(DistributedSampler, DisjointEqualShardsCoverTheDataset) {
  const auto all = shards(1000, 4, 7, 0, DistributedSampler::Remainder::kPad);
  std::set<int64_t> seen;
  for (const auto& s : all) {
    EXPECT_EQ(s.size(), 250u);
    for (int64_t i : s) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 999);
}

TEST(DistributedSampler, PadAndDropGiveEqualLengths) {
  // 10 samples on 3 ranks: pad to 4 each (2 repeated), drop to 3 each.
  const auto pad = shards(10, 3, 1, 2, DistributedSampler::Remainder::kPad);
  std::multiset<int64_t> padded;
  for (const auto& s : pad) {
    EXPECT_EQ(s.size(), 4u);
    padded.insert(s.begin(), s.end());
  }
  EXPECT_EQ(std::set<int64_t>(padded.begin(), padded.end()).size(), 10u);  // all seen
  const auto drop = shards(10, 3, 1, 2, DistributedSampler::Remainder::kDrop);
  std::set<int64_t> dropped;
  for (const auto& s : drop) {
    EXPECT_EQ(s.size(), 3u);
    for (int64_t i : s) EXPECT_TRUE(dropped.insert(i).second);
  }
  EXPECT_EQ(dropped.size(), 9u);
  DistributedSampler one(10, 0, 3, 1, true, DistributedSampler::Remainder::kDrop);
  EXPECT_EQ(one.numSamples(), 3);
}

TEST(DistributedSampler, SameOnEveryRankReshuffledEachEpoch) {
  DistributedSampler a(500, 0, 2, 42), b(500, 1, 2, 42);
  for (int64_t e = 0; e < 3; ++e) {
    a.setEpoch(e);
    b.setEpoch(e);
    EXPECT_EQ(a.permutation(), b.permutation()) << "epoch " << e;
  }
  a.setEpoch(0);
  const auto e0 = a.indices();
  a.setEpoch(1);
  const auto e1 = a.indices();
  EXPECT_NE(e0, e1);
  a.setEpoch(0);
  EXPECT_EQ(a.indices(), e0);  // a function of (seed, epoch)
  DistributedSampler other(500, 0, 2, 43);
  EXPECT_NE(other.indices(), e0);
  // A permutation, not just any sequence.
  auto p = a.permutation();
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 500; ++i) ASSERT_EQ(p[i], i);
  // Not shuffled: rank r reads r, r + N, ...
  DistributedSampler plain(7, 1, 2, 42, false);
  EXPECT_EQ(plain.indices(), (std::vector<int64_t>{1, 3, 5, 0}));
}

TEST(DistributedSampler, BadArguments) {
  EXPECT_THROW(DistributedSampler(10, 2, 2, 0), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(0, 0, 1, 0), Error);
}

TEST(EvaluationRange, SplitsTheWholeSetWithoutPadding) {
  int64_t next = 0;
  for (int r = 0; r < 3; ++r) {
    const Range range = evaluationRange(10, r, 3);
    EXPECT_EQ(range.begin, next);
    EXPECT_EQ(range.end - range.begin, r == 0 ? 4 : 3);
    next = range.end;
  }
  EXPECT_EQ(next, 10);
}

// ---- JPEG and the image folder -------------------------------------------------

// A smooth image (no sharp edges, which JPEG blurs), values 0..255.
Image gradient(int w, int h, int c) {
  Image im;
  im.width = w;
  im.height = h;
  im.channels = c;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < c; ++k) {
        im.pixels.push_back(
            static_cast<uint8_t>(x * 180 / (w - 1) + k * 25 + y * 20 / h));
      }
    }
  }
  return im;
}

int maxDifference(const Image& a, const Image& b) {
  int worst = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(int{a.pixels[i]} - int{b.pixels[i]}));
  }
  return worst;
}

TEST(Jpeg, RoundTripGrayAndRgb) {
  TempDir dir;
  for (int c : {1, 3}) {
    const Image in = gradient(40, 24, c);
    const std::string path = dir.path() + "/g" + std::to_string(c) + ".jpg";
    encodeJpeg(path, in, 100);
    const Image out = decodeJpeg(path, c);
    ASSERT_EQ(out.width, 40);
    ASSERT_EQ(out.height, 24);
    ASSERT_EQ(out.channels, c);
    ASSERT_EQ(out.pixels.size(), in.pixels.size());
    EXPECT_LE(maxDifference(in, out), c == 1 ? 4 : 12) << "channels " << c;
  }
  // A gray file decoded as RGB has three equal channels.
  const Image rgb = decodeJpeg(dir.path() + "/g1.jpg", 3);
  ASSERT_EQ(rgb.channels, 3);
  for (size_t p = 0; p < rgb.pixels.size(); p += 3) {
    ASSERT_EQ(rgb.pixels[p], rgb.pixels[p + 1]);
    ASSERT_EQ(rgb.pixels[p], rgb.pixels[p + 2]);
  }
}

TEST(Jpeg, ErrorsNameTheFile) {
  TempDir dir;
  const std::string bad = dir.path() + "/not.jpg";
  writeBytes(bad, {'h', 'e', 'l', 'l', 'o'});
  std::string text = errorText([&] { decodeJpeg(bad, 1); });
  EXPECT_NE(text.find(bad), std::string::npos) << text;
  text = errorText([&] { decodeJpeg(dir.path() + "/missing.jpg", 1); });
  EXPECT_NE(text.find("missing.jpg"), std::string::npos) << text;
}

TEST(Resize, BilinearValues) {
  Image flat;
  flat.width = 5;
  flat.height = 3;
  flat.channels = 1;
  flat.pixels.assign(15, 77);
  const Image r = resizeBilinear(flat, 9, 7);
  for (uint8_t v : r.pixels) ASSERT_EQ(v, 77);
  // 2 pixels wide -> 4: centers map to -0.25 (clamped), 0.25, 0.75, 1.25.
  Image two;
  two.width = 2;
  two.height = 1;
  two.channels = 1;
  two.pixels = {0, 200};
  const Image four = resizeBilinear(two, 4, 1);
  EXPECT_EQ(four.pixels, (std::vector<uint8_t>{0, 50, 150, 200}));
  // Halving averages pairs of pixels.
  Image row;
  row.width = 4;
  row.height = 1;
  row.channels = 1;
  row.pixels = {10, 20, 100, 200};
  EXPECT_EQ(resizeBilinear(row, 2, 1).pixels, (std::vector<uint8_t>{15, 150}));
}

TEST(ImageFolder, ClassesLabelsAndResizedSamples) {
  TempDir dir;
  fs::create_directories(dir.path() + "/cat");
  fs::create_directories(dir.path() + "/ant");
  encodeJpeg(dir.path() + "/cat/b.jpg", gradient(56, 56, 3));
  encodeJpeg(dir.path() + "/cat/a.JPEG", gradient(30, 20, 1));
  encodeJpeg(dir.path() + "/ant/x.jpg", gradient(28, 28, 1));
  writeBytes(dir.path() + "/cat/readme.txt", {'x'});
  ImageFolderOptions o;
  o.width = 14;
  o.height = 14;
  o.channels = 1;
  ImageFolder f(dir.path(), o);
  EXPECT_EQ(f.classes(), (std::vector<std::string>{"ant", "cat"}));
  ASSERT_EQ(f.size(), 3);
  EXPECT_EQ(f.label(0), 0);
  EXPECT_EQ(f.label(1), 1);
  EXPECT_EQ(f.label(2), 1);
  EXPECT_NE(f.path(1).find("a.JPEG"), std::string::npos);
  const ImageBatch b = loadBatch(f, {2, 0});
  EXPECT_EQ(b.count, 2);
  EXPECT_EQ(b.labels, (std::vector<int64_t>{1, 0}));
  ASSERT_EQ(b.images.size(), 2u * 14 * 14);
  float lo = 1, hi = 0;
  for (float v : b.images) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, 0.0f);
  EXPECT_LE(hi, 1.0f);
  EXPECT_GT(hi - lo, 0.3f);  // a gradient, not a flat image

  o.channels = 3;
  ImageFolder rgb(dir.path(), o);
  std::vector<float> sample(static_cast<size_t>(rgb.sampleSize()));
  rgb.load(2, sample.data());
  EXPECT_EQ(rgb.sampleSize(), 3 * 14 * 14);

  EXPECT_THROW(ImageFolder(dir.path() + "/ant/none", o), Error);
  TempDir empty;
  EXPECT_THROW(ImageFolder(empty.path(), o), Error);
}

// ---- Prefetcher ------------------------------------------------------------------

TEST(Prefetcher, DeliversInOrderThenEnds) {
  std::atomic<int64_t> started{0};
  std::atomic<int64_t> consumed{0};
  std::atomic<bool> overran{false};
  const size_t depth = 3;
  {
    Prefetcher<int64_t> p(
        200,
        [&](int64_t i) {
          // At most depth ready + this one in production ahead of the consumer.
          if (started.fetch_add(1) + 1 >
              consumed.load() + static_cast<int64_t>(depth) + 1) {
            overran = true;
          }
          return i * 10;
        },
        depth);
    for (int64_t i = 0; i < 200; ++i) {
      auto v = p.next();
      ASSERT_TRUE(v.has_value());
      ASSERT_EQ(*v, i * 10);
      consumed.fetch_add(1);
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_FALSE(p.next().has_value());
    EXPECT_FALSE(p.next().has_value());
  }
  EXPECT_FALSE(overran.load());
  EXPECT_EQ(started.load(), 200);
}

TEST(Prefetcher, ProducerErrorArrivesInPlace) {
  Prefetcher<int> p(10, [](int64_t i) {
    if (i == 4) throw std::runtime_error("batch 4 is broken");
    return static_cast<int>(i);
  });
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p.next().value(), i);
  try {
    p.next();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "batch 4 is broken");
  }
  EXPECT_FALSE(p.next().has_value());
}

TEST(Prefetcher, StopsWhenDestroyedEarly) {
  std::atomic<int64_t> made{0};
  {
    Prefetcher<std::vector<float>> p(
        100000,
        [&](int64_t) {
          made.fetch_add(1);
          return std::vector<float>(16);
        },
        2);
    ASSERT_TRUE(p.next().has_value());
  }  // must not wait for the remaining batches
  EXPECT_LT(made.load(), 10);
}

TEST(Prefetcher, EmptyPipeline) {
  Prefetcher<int> p(0, [](int64_t) { return 1; });
  EXPECT_FALSE(p.next().has_value());
}

}  // namespace
}  // namespace kolo::data
