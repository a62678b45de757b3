// kolo's allreduce selection by the scale model (src/collectives/
// selection.h) over real communicators (ranks as threads): it picks what
// the model says, every rank uses rank 0's constants, link rate and cores
// (bad ones on rank 0 fail every rank naming them), the same choice on
// every rank across hosts, and KOLO_ALGORITHM / the allreduce algorithm
// override it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "collectives/registry.h"
#include "collectives/selection.h"
#include "predict/allreduce_model.h"
#include "predict/constants.h"
#include "support/comm_world.h"
#include "support/expect_error.h"
#include "support/predict_shapes.h"

namespace kolo::predict_shapes {
namespace {

// ---- kolo's selection ----------------------------------------------------------------

// Constants under which one algorithm is plainly cheapest: latency only
// (tree, fewest steps) or bytes only (ring for 3 ranks, which rhd must fold).
Constants latencyOnly() {
  Constants c = roundConstants();
  for (auto& p : c.paths) {
    p[Term::kBeta] = p[Term::kGamma] = p[Term::kMessage] = 0;
    p[Term::kAlpha] = 1e-3;
  }
  return c;
}
Constants bytesOnly() {
  Constants c = roundConstants();
  for (auto& p : c.paths) p[Term::kAlpha] = p[Term::kMessage] = 0;
  return c;
}

TEST(Selection, PicksWhatTheModelSays) {
  const collectives::AllreduceSelector latency(latencyOnly(), oneHostTcp(3));
  const collectives::AllreduceSelector bytes(bytesOnly(), oneHostTcp(3));
  for (size_t b : {size_t{8}, size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    EXPECT_EQ(latency.choose(b), "tree") << b;
    EXPECT_EQ(bytes.choose(b), "ring") << b;
  }
  const collectives::AllreduceSelector built(predict::builtInConstants(), oneHostTcp(4));
  for (int cls = 0; cls < predict::kSizeClasses; ++cls) {
    const size_t b = predict::sizeClassBytes(cls);
    EXPECT_EQ(built.choose(b), predict::toString(predict::selectAllreduce(
                                   b, oneHostTcp(4), predict::builtInConstants())))
        << b;
  }
  // One host with an arena: shm alone.
  JobShape arena = oneHostTcp(4);
  arena.intra = Path::kShm;
  arena.shmArena = true;
  EXPECT_EQ(collectives::AllreduceSelector(bytesOnly(), arena).choose(1 << 20), "shm");
  // Across hosts hier is a candidate, and the cross selector has one rank
  // per host.
  JobShape hosts;
  hosts.ranks = 8;
  hosts.ranksPerHost = 4;
  const collectives::AllreduceSelector across(bytesOnly(), hosts);
  ASSERT_NE(across.crossHosts(), nullptr);
  EXPECT_EQ(across.crossHosts()->shape().ranks, 2);
  EXPECT_EQ(across.crossHosts()->shape().ranksPerHost, 1);
}

std::string writeTemp(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
  std::ofstream(path) << text;
  return path;
}

TEST(Selection, EveryRankUsesRankZerosConstants) {
  // Rank 0 names latency-only constants (tree at every size); the others
  // name bytes-only ones (ring for 3 ranks): all must pick tree, and the
  // allreduces must complete with the right sums.
  const std::string latency = writeTemp("latency.json", constantsToJson(latencyOnly()));
  const std::string bytes = writeTemp("bytes.json", constantsToJson(bytesOnly()));
  test::withCommunicators(
      3,
      [&](int r) {
        Settings s = test::testSettings("tcp");
        s.predictConstants = r == 0 ? latency : bytes;
        return s;
      },
      [](Communicator& c) {
        for (size_t count : {size_t{3}, size_t{1000}, size_t{300000}}) {
          EXPECT_EQ(c.allreduceAlgorithm(count * 4), "tree") << "rank " << c.rank();
          std::vector<float> buf(count, float(c.rank() + 1));
          AllreduceOptions o;
          o.send = o.recv = buf.data();
          o.count = count;
          c.allreduce(o);
          EXPECT_EQ(buf[count - 1], 6.0f);
        }
      });
  std::remove(latency.c_str());
  std::remove(bytes.c_str());
}

TEST(Selection, EveryRankUsesRankZerosLinkRate) {
  // Latency-only constants choose tree at every size; rank 0's slow link
  // (KOLO_LINK_RATE) makes the wire time count, so large vectors go to an
  // algorithm that moves fewer bytes per link. The other ranks name no rate
  // and must still decide as rank 0 does.
  const std::string latency =
      writeTemp("latency_link.json", constantsToJson(latencyOnly()));
  std::vector<std::vector<std::string>> choices(3);
  test::withCommunicators(
      3,
      [&](int r) {
        Settings s = test::testSettings("tcp");
        s.predictConstants = latency;
        if (r == 0) s.linkRate = "1mbit";
        return s;
      },
      [&](Communicator& c) {
        for (size_t bytes : {size_t{8}, size_t{64} << 20}) {
          choices[c.rank()].push_back(c.allreduceAlgorithm(bytes));
        }
      },
      [](int r) { return "host" + std::to_string(r); });  // one rank per host
  std::remove(latency.c_str());
  EXPECT_EQ(choices[0][0], "tree");
  EXPECT_NE(choices[0][1], "tree");
  EXPECT_EQ(choices[1], choices[0]);
  EXPECT_EQ(choices[2], choices[0]);
}

TEST(Selection, BadLinkRateOnRankZeroFailsEveryRankNamingIt) {
  try {
    test::withCommunicators(
        2,
        [](int r) {
          Settings s = test::testSettings("tcp");
          if (r == 0) s.linkRate = "fast";
          return s;
        },
        [](Communicator&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string text = e.what();
    EXPECT_TRUE(test::contains(text, "rank 0: KOLO_PREDICT_CONSTANTS / KOLO_LINK_RATE"))
        << text;
    EXPECT_TRUE(test::contains(text, "rank 1: KOLO_PREDICT_CONSTANTS / KOLO_LINK_RATE"))
        << text;
    EXPECT_TRUE(test::contains(text, "fast")) << text;
  }
}

TEST(Selection, EveryRankUsesRankZerosCores) {
  // Three hosts of one rank on one machine's single core (rank 0's
  // KOLO_HOST_CORES=1, KOLO_HOSTS_SHARE_CORES=1): every step waits a spin
  // for the core (allreduce_model.cc), so at 8 bytes the tree's 3 steps
  // beat the ring's 4, which the bytes-only constants pick otherwise.
  const std::string bytes = writeTemp("bytes_cores.json", constantsToJson(bytesOnly()));
  for (bool told : {false, true}) {
    std::vector<std::string> choices(3);
    test::withCommunicators(
        3,
        [&](int r) {
          Settings s = test::testSettings("tcp");
          s.predictConstants = bytes;
          if (r == 0 && told) {
            s.hostCores = 1;
            s.hostsShareCores = 1;
            s.spinMicros = 100;
          }
          return s;
        },
        [&](Communicator& c) { choices[c.rank()] = c.allreduceAlgorithm(8); },
        [](int r) { return "host" + std::to_string(r); });
    EXPECT_EQ(choices[0], told ? "tree" : "ring") << "told the cores: " << told;
    EXPECT_EQ(choices[1], choices[0]);
    EXPECT_EQ(choices[2], choices[0]);
  }
  std::remove(bytes.c_str());
  try {
    test::withCommunicators(
        2,
        [](int r) {
          Settings s = test::testSettings("tcp");
          if (r == 0) s.hostCores = -2;
          return s;
        },
        [](Communicator&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string text = e.what();
    EXPECT_TRUE(test::contains(text, "rank 1: KOLO_PREDICT_CONSTANTS")) << text;
    EXPECT_TRUE(test::contains(text, "KOLO_HOST_CORES=-2")) << text;
  }
}

TEST(Selection, SameChoiceOnEveryRankAcrossHosts) {
  // Pretend hosts of 3 and 2 ranks (local sizes differ) with the built-in
  // constants: every rank's choice for every size class is the same.
  const int n = 5;
  std::vector<std::vector<std::string>> choices(n);
  test::withCommunicators(
      n, [](int) { return test::testSettings(); },
      [&](Communicator& c) {
        for (int cls = 0; cls < 4 * 32; cls += 3) {
          choices[c.rank()].push_back(c.allreduceAlgorithm(predict::sizeClassBytes(cls)));
        }
        std::vector<float> buf(70000, 1.0f);
        AllreduceOptions o;
        o.send = o.recv = buf.data();
        o.count = buf.size();
        c.allreduce(o);
        EXPECT_EQ(buf[0], 5.0f);
      },
      [](int r) { return r < 3 ? "host0" : "host1"; });
  for (int r = 1; r < n; ++r) EXPECT_EQ(choices[r], choices[0]) << "rank " << r;
}

TEST(Selection, BadConstantsOnRankZeroFailEveryRankNamingTheFile) {
  const std::string bad =
      writeTemp("bad.json", "{\"kolo_predict_constants\": 1, \"paths\":");
  try {
    test::withCommunicators(
        2,
        [&](int r) {
          Settings s = test::testSettings("tcp");
          if (r == 0) s.predictConstants = bad;
          return s;
        },
        [](Communicator&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string text = e.what();
    EXPECT_TRUE(test::contains(text, "rank 0: KOLO_PREDICT_CONSTANTS")) << text;
    EXPECT_TRUE(test::contains(text, "rank 1: KOLO_PREDICT_CONSTANTS")) << text;
    EXPECT_TRUE(test::contains(text, bad + ":1:")) << text;
  }
  std::remove(bad.c_str());
}

TEST(Selection, KoloAlgorithmOverridesAndAllreduceAlgoWins) {
  Settings s = test::testSettings("tcp");
  s.algorithm = "rhd";
  test::withCommunicators(2, s, [](Communicator& c) {
    EXPECT_EQ(c.allreduceAlgorithm(64), "rhd");
    EXPECT_EQ(c.allreduceAlgorithm(64 << 20), "rhd");
  });
  s.allreduceAlgorithm = "ring";
  test::withCommunicators(
      2, s, [](Communicator& c) { EXPECT_EQ(c.allreduceAlgorithm(64), "ring"); });
}

}  // namespace
}  // namespace kolo::predict_shapes
