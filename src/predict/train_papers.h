// The published scaling figures the training model reproduces (docs/scale.md,
// "The papers' figures"): each case's published inputs (GPUs, GPUs per
// server, link rate, one GPU's images per second at the batch it used) and
// its published efficiency, and the model's prediction of it with the
// allreduce of that era: NCCL 2's ring, with NCCL's own latency table.
//
// Contract: pure functions; the inputs and their sources are listed in
// train_papers.cc, one comment per number.
#pragma once

#include <string>
#include <vector>

#include "predict/train_allreduce.h"
#include "predict/train_request.h"

namespace kolo::predict {

// NCCL 2's ring allreduce on p ranks, k to a host (h = p / k hosts), from
// NCCL's tuning model (src/graph/tuning.cc of NCCL 2.4, the first with a
// model; Ring, Simple protocol):
//   time = base + (2 (p - 1) - 2 (h - 1)) intraStep + 2 (h - 1) netStep
//          + 2 (p - 1) / p * bytes / (linkEfficiency * link rate)
// Each host's link carries one ring edge each way, so a host link moves
// 2 (p - 1) / p of the bytes; the reduction runs on the GPU inside the
// pipeline and costs no time of its own.
struct NcclRing {
  double baseSeconds = 8.4e-6;        // baseLat, Ring/Simple
  double intraStepSeconds = 5.7e-6;   // hwLat PCI, Ring/Simple (PCIe P100 servers)
  double netStepSeconds = 9.6e-6;     // hwLat NET, Ring/Simple
  double linkEfficiency = 0.9;        // bus bandwidth / line rate
  double intraBytesPerSecond = 10e9;  // the ring inside a host (PCIe 3 x16)
};

AllreduceModelFn ncclRingModel(double linkBitsPerSecond, const NcclRing& ring);

struct PaperCase {
  std::string paper;  // "Horovod 2018", "DDL 2017"
  std::string model;  // a zoo name
  int gpus = 0;
  int gpusPerHost = 0;
  double linkBitsPerSecond = 0;
  double imagesPerSecond = 0;  // one GPU, at `batch`
  int batch = 0;
  double publishedEfficiency = 0;
  NcclRing ring;
  RuntimeKnobs runtime;  // the framework's fusion and cycle
};

std::vector<PaperCase> paperCases();

struct PaperResult {
  PaperCase input;
  StepPrediction step;
};

PaperResult predictPaperCase(const PaperCase& c);

}  // namespace kolo::predict
