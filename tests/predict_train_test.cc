// The training-step model (src/predict/train_*.h) and the model zoo
// (src/predict/model_zoo.h).
#include <gtest/gtest.h>

#include <random>

#include <stdexcept>

#include "predict/model_zoo.h"
#include "predict/train_allreduce.h"
#include "predict/train_papers.h"
#include "predict/train_ps.h"
#include "ps/shard_map.h"

namespace kolo::predict {
namespace {

// Three tensors of 100, 200 and 300 bytes, shares 1:1:2, a 4 s step whose
// second half is backward: the gradients are ready at 2.5, 3.0 and 4.0 s.
TrainSpec threeLayers(int ranks = 2) {
  TrainSpec s;
  s.layers = {{"c", 100, 1.0}, {"b", 200, 1.0}, {"a", 300, 2.0}};
  s.stepComputeSeconds = 4.0;
  s.backwardFraction = 0.5;
  s.ranks = ranks;
  s.ranksPerHost = 1;
  return s;
}

RuntimeKnobs knobs(size_t threshold = 0) {
  RuntimeKnobs k;
  k.fusionThresholdBytes = threshold;
  k.cycleSeconds = 0.01;
  k.gatherQuietSeconds = 0.001;
  k.negotiationSeconds = 0.05;
  return k;
}

TEST(PredictTrain, ReadyTimesFollowTheShares) {
  const auto ready = gradientReadyTimes(threeLayers());
  ASSERT_EQ(ready.size(), 3u);
  EXPECT_DOUBLE_EQ(ready[0], 2.5);
  EXPECT_DOUBLE_EQ(ready[1], 3.0);
  EXPECT_DOUBLE_EQ(ready[2], 4.0);
}

// By hand: each gradient comes alone; a cycle starts 1 ms (the quiet time)
// after it, negotiates 50 ms and allreduces b bytes in b ms:
//   [2.501, 2.651], [3.001, 3.251] inside the compute (0.40 s overlapped),
//   [4.001, 4.351] after it: step 4.351 s, exposed 0.351 s, busy 0.75 s.
TEST(PredictTrain, OverlapOfThreeLayersByHand) {
  const auto p = predictAllreduceStep(threeLayers(), knobs(),
                                      [](size_t b) { return 1e-3 * double(b); });
  EXPECT_NEAR(p.stepSeconds, 4.351, 1e-9);
  EXPECT_NEAR(p.commSeconds, 0.75, 1e-9);
  EXPECT_NEAR(p.overlappedSeconds, 0.40, 1e-9);
  EXPECT_NEAR(p.exposedSeconds, 0.351, 1e-9);
  EXPECT_NEAR(p.efficiency, 4.0 / 4.351, 1e-12);
  EXPECT_EQ(p.cycles, 3);
  EXPECT_EQ(p.collectives, 3);
}

// A slow first allreduce (1 s + 1 ms/byte) holds the loop until 3.651 s:
// the second gradient (ready at 3.0) waits in the queue and its cycle
// starts 1 ms after the first ends; with fusion the third (4.0) still comes
// after that cycle started, so fusion changes nothing here, and
//   cycle 1: [2.501, 2.551 + 1.1 = 3.651]
//   cycle 2: [3.652, 3.702 + 1.2 = 4.902]
//   cycle 3: [4.903, 4.953 + 1.3 = 6.253].
TEST(PredictTrain, AQueuedGradientStartsTheNextCycleAtOnce) {
  const auto fn = [](size_t b) { return 1.0 + 1e-3 * double(b); };
  const auto p = predictAllreduceStep(threeLayers(), knobs(), fn);
  EXPECT_NEAR(p.stepSeconds, 6.253, 1e-9);
  EXPECT_NEAR(p.overlappedSeconds, (3.651 - 2.501) + (4.0 - 3.652), 1e-9);
  EXPECT_NEAR(p.exposedSeconds, 2.253, 1e-9);
}

// Two gradients waiting together are fused into one collective when the
// threshold allows: the second and third wait behind a 2.5 s first one.
TEST(PredictTrain, FusionPacksWhatWaitsTogether) {
  const auto fn = [](size_t b) { return b == 100 ? 2.5 : 1.0 + 1e-3 * double(b); };
  const auto alone = predictAllreduceStep(threeLayers(), knobs(0), fn);
  const auto fused = predictAllreduceStep(threeLayers(), knobs(1000), fn);
  // Alone: [2.501, 5.051], then one cycle at 5.052 runs 1.2 s and 1.3 s.
  EXPECT_NEAR(alone.stepSeconds, 5.052 + 0.05 + 1.2 + 1.3, 1e-9);
  EXPECT_EQ(alone.collectives, 3);
  EXPECT_EQ(alone.cycles, 2);
  // Fused: one cycle at 5.052 runs 500 bytes: 5.052 + 0.05 + 1.5.
  EXPECT_NEAR(fused.stepSeconds, 5.052 + 0.05 + 1.5, 1e-9);
  EXPECT_EQ(fused.collectives, 2);
  EXPECT_EQ(fused.cycles, 2);
}

// Horovod's loop: cycles on multiples of the cycle time (0.5 s here).
TEST(PredictTrain, PeriodicCyclesStartOnTheGrid) {
  RuntimeKnobs k = knobs();
  k.periodic = true;
  k.cycleSeconds = 0.5;
  const auto p =
      predictAllreduceStep(threeLayers(), k, [](size_t b) { return 1e-3 * double(b); });
  EXPECT_NEAR(p.stepSeconds, 4.35, 1e-9);
  EXPECT_NEAR(p.overlappedSeconds, 0.15 + 0.25, 1e-9);
}

TEST(PredictTrain, OneRankIsEfficiencyOne) {
  for (const auto& name : zooNames()) {
    TrainSpec s;
    s.layers = zooModel(name).layers;
    s.stepComputeSeconds = 0.1;
    s.ranks = 1;
    const auto p = predictAllreduceStep(s, RuntimeKnobs{}, [](size_t) { return 1.0; });
    EXPECT_EQ(p.efficiency, 1.0) << name;
    EXPECT_EQ(p.stepSeconds, 0.1) << name;
    EXPECT_EQ(p.commSeconds, 0.0) << name;
  }
}

// A single host runs tensors above 256 KiB alone; across hosts all fuse.
TEST(PredictTrain, SingleHostRunsLargeTensorsAlone) {
  TrainSpec s;
  s.layers = {{"x", 1 << 20, 0.0}, {"y", 1 << 20, 0.0}, {"z", 1 << 20, 1.0}};
  s.stepComputeSeconds = 1.0;
  s.ranks = 4;
  s.ranksPerHost = 4;
  // x and y are ready at the backward's start, together.
  const auto fn = [](size_t b) { return 1e-9 * double(b); };
  EXPECT_EQ(predictAllreduceStep(s, knobs(64 << 20), fn).collectives, 3);
  s.ranksPerHost = 2;
  EXPECT_EQ(predictAllreduceStep(s, knobs(64 << 20), fn).collectives, 2);
}

// ResNet-50 with a latency-bound allreduce: the suggestion is the argmin
// of the candidates and beats no fusion.
TEST(PredictTrain, FusionSuggestionIsTheBestCandidate) {
  TrainSpec s;
  s.layers = zooModel("resnet50").layers;
  s.stepComputeSeconds = 0.2;
  s.ranks = 64;
  s.ranksPerHost = 4;
  RuntimeKnobs k;
  k.fusionThresholdBytes = 0;
  const auto fn = [](size_t b) { return 2e-3 + double(b) / 1e9; };
  const auto best = suggestFusionThreshold(s, k, fn);
  double bestSeen = 1e300;
  for (size_t c : fusionCandidates()) {
    k.fusionThresholdBytes = c;
    bestSeen = std::min(bestSeen, predictAllreduceStep(s, k, fn).stepSeconds);
  }
  EXPECT_DOUBLE_EQ(best.step.stepSeconds, bestSeen);
  EXPECT_GT(best.thresholdBytes, 0u);
  k.fusionThresholdBytes = 0;
  EXPECT_LT(best.step.stepSeconds, predictAllreduceStep(s, k, fn).stepSeconds);
}

TEST(PredictTrain, BadInputsNameTheValue) {
  TrainSpec s = threeLayers();
  const auto fn = [](size_t b) { return 1e-3 * double(b); };
  s.layers[1].bytes = 0;
  try {
    predictAllreduceStep(s, knobs(), fn);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 ('b')"), std::string::npos)
        << e.what();
  }
  s = threeLayers();
  s.stepComputeSeconds = -1;
  EXPECT_THROW(predictAllreduceStep(s, knobs(), fn), std::invalid_argument);
  try {
    predictAllreduceStep(threeLayers(), knobs(), [](size_t) { return -1.0; });
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("100 bytes"), std::string::npos) << e.what();
  }
  PsKnobs ps;
  ps.linkBytesPerSecond = 1e6;
  ps.servers = 0;
  EXPECT_THROW(predictSyncPsStep(threeLayers(), ps), std::invalid_argument);
}

// --- parameter servers ---

TEST(PredictPs, ShardLoadsAreKolosShardMap) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint64_t> sizes(1 + rng() % 20);
    for (auto& s : sizes) s = 1 + rng() % 5000;
    const int servers = 1 + static_cast<int>(rng() % 6);
    const auto map = ps::ShardMap::build(sizes, servers);
    EXPECT_EQ(shardLoads(sizes, servers), map.shardElements) << "trial " << trial;
  }
}

// 8 workers, one to a host, 2 servers, two tensors of 1M floats (4 MB):
// each server takes one; a push puts 8 x 4 MB on each server's link and
// 8 MB on a worker's: 32 s at 1 MB/s; the pull as much. Four servers
// split each tensor in two: 16 s each way.
TEST(PredictPs, SyncIsBoundByTheServerLinks) {
  TrainSpec s;
  s.layers = {{"a", 4'000'000, 1.0}, {"b", 4'000'000, 1.0}};
  s.stepComputeSeconds = 1.0;
  s.ranks = 8;
  PsKnobs k;
  k.servers = 2;
  k.linkBytesPerSecond = 1e6;
  auto p = predictSyncPsStep(s, k);
  EXPECT_NEAR(p.stepSeconds, 1.0 + 64.0, 1e-9);
  EXPECT_NEAR(p.efficiency, 1.0 / 65.0, 1e-12);
  EXPECT_EQ(p.overlappedSeconds, 0.0);
  k.servers = 4;
  EXPECT_NEAR(predictSyncPsStep(s, k).stepSeconds, 1.0 + 32.0, 1e-9);
  // Eight workers on one host: their shared link (8 x 8 MB) binds first.
  s.ranksPerHost = 8;
  k.servers = 8;
  EXPECT_NEAR(predictSyncPsStep(s, k).stepSeconds, 1.0 + 128.0, 1e-9);
}

// Downpour: a worker's own exchange while the server links have room;
// the server link's load once W workers saturate it.
TEST(PredictPs, DownpourSaturatesTheServerLink) {
  TrainSpec s;
  s.layers = {{"a", 1'000'000, 1.0}};
  s.stepComputeSeconds = 10.0;
  PsKnobs k;
  k.servers = 1;
  k.linkBytesPerSecond = 1e6;
  s.ranks = 2;  // 2 x 2 MB = 4 s of server link a step < 10 + 2
  EXPECT_NEAR(predictDownpourStep(s, k).stepSeconds, 12.0, 1e-9);
  s.ranks = 20;  // 20 x 2 MB = 40 s of server link a step
  EXPECT_NEAR(predictDownpourStep(s, k).stepSeconds, 40.0, 1e-9);
  k.pushPeriod = 4;
  k.pullPeriod = 4;  // a quarter of the traffic
  EXPECT_NEAR(predictDownpourStep(s, k).stepSeconds, 10.5, 1e-9);
}

// --- the zoo ---

TEST(PredictZoo, ParameterCountsAreThePublishedOnes) {
  // torchvision 0.14's models and Hugging Face's BertModel (with pooler).
  EXPECT_EQ(zooModel("resnet18").parameters, 11'689'512u);
  EXPECT_EQ(zooModel("resnet50").parameters, 25'557'032u);
  EXPECT_EQ(zooModel("resnet101").parameters, 44'549'160u);
  EXPECT_EQ(zooModel("vgg16").parameters, 138'357'544u);
  EXPECT_EQ(zooModel("inception_v3").parameters, 23'834'568u);
  EXPECT_EQ(zooModel("inception_v3_aux").parameters, 27'161'264u);
  EXPECT_EQ(zooModel("bert-base").parameters, 109'482'240u);
  EXPECT_EQ(zooModel("resnet50").layers.size(), 161u);
  // Backward order: the classifier's gradients come first.
  EXPECT_EQ(zooModel("resnet50").layers.front().name, "fc.bias");
  EXPECT_EQ(zooModel("vgg16").layers[1].name, "classifier.6.weight");
  EXPECT_EQ(zooModel("bert-base").layers.back().name,
            "embeddings.word_embeddings.weight");
}

TEST(PredictZoo, UnknownModelListsTheKnown) {
  try {
    zooModel("alexnet");
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'alexnet'"), std::string::npos) << what;
    EXPECT_NE(what.find("bert-base"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kolo::predict

// --- the papers' figures from their published inputs ---

namespace kolo::predict {
namespace {

// Horovod's 512 GPUs (90% Inception V3 and ResNet-101, 68% VGG-16) and
// DDL's 256 (95% ResNet-50): each within 10 points, VGG-16 the lowest of
// Horovod's three.
TEST(PredictPapers, PublishedEfficienciesWithinTenPoints) {
  double vgg = 0, lowestOther = 1;
  int cases = 0;
  for (const PaperCase& c : paperCases()) {
    const PaperResult r = predictPaperCase(c);
    EXPECT_NEAR(r.step.efficiency, c.publishedEfficiency, 0.10)
        << c.paper << " " << c.model;
    if (c.paper == "Horovod 2018") {
      if (c.model == "vgg16") {
        vgg = r.step.efficiency;
      } else {
        lowestOther = std::min(lowestOther, r.step.efficiency);
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 4);
  EXPECT_LT(vgg, lowestOther);
}

// NCCL's ring: latency steps by hop kind, bytes over the host link.
TEST(PredictPapers, NcclRingByHand) {
  NcclRing ring;
  ring.linkEfficiency = 1.0;
  const auto fn = ncclRingModel(8e9, ring);  // 1 GB/s
  // 8 ranks, 4 a host: 14 steps, 2 of them across hosts; 14/8 of 1 MB.
  const double expected = 8.4e-6 + 12 * 5.7e-6 + 2 * 9.6e-6 + 14.0 / 8.0 * 1e6 / 1e9;
  EXPECT_NEAR(fn(8, 4, 1'000'000), expected, 1e-12);
  EXPECT_EQ(fn(1, 4, 1'000'000), 0.0);
}

}  // namespace
}  // namespace kolo::predict
