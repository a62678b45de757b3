#include "predict/train_papers.h"

#include <algorithm>
#include <cmath>

#include "predict/model_zoo.h"

namespace kolo::predict {

AllreduceModelFn ncclRingModel(double linkBitsPerSecond, const NcclRing& ring) {
  return [=](int ranks, int ranksPerHost, size_t bytes) {
    if (ranks <= 1) return 0.0;
    const double p = ranks;
    const int hosts = (ranks + ranksPerHost - 1) / ranksPerHost;
    const double netSteps = 2.0 * (hosts - 1);
    const double steps = 2 * (p - 1);
    const double rate = hosts > 1 ? ring.linkEfficiency * linkBitsPerSecond / 8
                                  : ring.intraBytesPerSecond;
    return ring.baseSeconds + (steps - netSteps) * ring.intraStepSeconds +
           netSteps * ring.netStepSeconds + steps / p * static_cast<double>(bytes) / rate;
  };
}

namespace {

// Horovod 0.11-0.12 (the paper's): a background cycle every 5 ms
// (HOROVOD_CYCLE_TIME's default then), Tensor Fusion up to 64 MiB, and a
// negotiation through rank 0 (MPI gather and broadcast of the ready names:
// 2 log2(p) hops of about 10 us on the TCP control path).
RuntimeKnobs horovodRuntime(int gpus) {
  RuntimeKnobs k;
  k.periodic = true;
  k.cycleSeconds = 5e-3;
  k.fusionThresholdBytes = size_t{64} << 20;
  k.negotiationSeconds = 2 * std::ceil(std::log2(gpus)) * 10e-6;
  return k;
}

}  // namespace

std::vector<PaperCase> paperCases() {
  std::vector<PaperCase> cases;
  // Sergeev and Del Balso 2018 (arXiv:1802.05799) and Horovod's README:
  // 128 servers with 4 Pascal GPUs each, RoCE-capable 25 Gbit/s network,
  // tf_cnn_benchmarks with batch 64 per GPU (Horovod's docs/benchmarks:
  // --batch_size 64); 90% for Inception V3 and ResNet-101, 68% for VGG-16.
  // One P100's images/s at batch 64: TensorFlow's published benchmarks
  // (tensorflow.org/performance/benchmarks, DGX-1 P100, synthetic data, May
  // 2017): Inception V3 142, VGG16 154, ResNet-50 219, ResNet-152 91.8.
  // ResNet-101 is not in that table: 125 images/s, the rate at which a P100
  // does ResNet-50's and ResNet-152's multiply-adds (0.90 and 1.06 T/s)
  // averaged, applied to ResNet-101's 7.8 G per image.
  const struct {
    const char* model;
    double imagesPerSecond;
    double published;
  } horovod[] = {
      {"inception_v3", 142, 0.90}, {"resnet101", 125, 0.90}, {"vgg16", 154, 0.68}};
  for (const auto& h : horovod) {
    PaperCase c;
    c.paper = "Horovod 2018";
    c.model = h.model;
    c.gpus = 512;
    c.gpusPerHost = 4;
    c.linkBitsPerSecond = 25e9;
    c.imagesPerSecond = h.imagesPerSecond;
    c.batch = 64;
    c.publishedEfficiency = h.published;
    c.runtime = horovodRuntime(c.gpus);
    cases.push_back(c);
  }
  // Cho et al. 2017 (PowerAI DDL, arXiv:1708.02188): 64 IBM S822LC
  // ("Minsky") servers with 4 P100 each (NVLink inside a server), 256 GPUs,
  // 100 Gbit/s InfiniBand; 95% scaling efficiency for ResNet-50 (Caffe).
  // Batch 32 per GPU; a P100's ResNet-50 rate at batch 32 from the same
  // TensorFlow table: 195 images/s. DDL's multi-ring is modelled as NCCL's
  // ring with NVLink inside a server (hwLat NVLINK 3.4 us, 20 GB/s) and
  // DDL's own fusion of the gradients into large buffers (64 MiB).
  PaperCase d;
  d.paper = "DDL 2017";
  d.model = "resnet50";
  d.gpus = 256;
  d.gpusPerHost = 4;
  d.linkBitsPerSecond = 100e9;
  d.imagesPerSecond = 195;
  d.batch = 32;
  d.publishedEfficiency = 0.95;
  d.ring.intraStepSeconds = 3.4e-6;
  d.ring.intraBytesPerSecond = 20e9;
  d.runtime = horovodRuntime(d.gpus);
  cases.push_back(d);
  return cases;
}

PaperResult predictPaperCase(const PaperCase& c) {
  TrainSpec spec;
  spec.layers = zooModel(c.model).layers;
  spec.stepComputeSeconds = c.batch / c.imagesPerSecond;
  spec.ranks = c.gpus;
  spec.ranksPerHost = c.gpusPerHost;
  const AllreduceModelFn ring = ncclRingModel(c.linkBitsPerSecond, c.ring);
  const int k = c.gpusPerHost;
  const int n = c.gpus;
  PaperResult r;
  r.input = c;
  r.step = predictAllreduceStep(spec, c.runtime,
                                [&](size_t bytes) { return ring(n, k, bytes); });
  return r;
}

}  // namespace kolo::predict
