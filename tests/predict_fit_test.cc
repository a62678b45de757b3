// The scale model's fit against known constants, its measurement files'
// errors, the constants file (round trip, missing paths, bad files) and
// the units (src/predict/fit.h, constants.h, json.h, units.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "predict/allreduce_model.h"
#include "predict/constants.h"
#include "predict/fit.h"
#include "predict/json.h"
#include "predict/units.h"
#include "support/expect_error.h"
#include "support/predict_shapes.h"

namespace kolo::predict_shapes {
namespace {

// ---- the fit ---------------------------------------------------------------------

std::vector<predict::Measurement> synthetic(const Constants& truth,
                                            const std::string& transport) {
  std::vector<predict::Measurement> out;
  for (int n : {2, 3, 4}) {
    for (Algorithm a :
         {Algorithm::kRing, Algorithm::kRhd, Algorithm::kTree, Algorithm::kShm}) {
      if (a == Algorithm::kShm && transport != "shm") continue;
      for (size_t b :
           {size_t{64}, size_t{4096}, size_t{65536}, size_t{1} << 20, size_t{8} << 20}) {
        predict::Measurement m;
        m.transport = transport;
        m.hosts = 1;
        m.ranksPerHost = n;
        m.algorithm = a;
        m.bytes = b;
        predict::CostOptions o;
        o.agreement = true;
        m.seconds = predict::allreduceSeconds(a, b, predict::shapeOf(m), truth, o);
        out.push_back(m);
      }
    }
  }
  return out;
}

TEST(Fit, RecoversKnownConstantsFromSyntheticSamples) {
  Constants truth = predict::builtInConstants();
  truth[Path::kTcp] = pathOf(20 * kUs, 0.7e-9, 0.3e-9, 1.5 * kUs, 4 * kUs);
  Constants start = truth;
  start[Path::kTcp] = pathOf(60 * kUs, 0.2e-9, 1.0e-9, 0.5 * kUs, 12 * kUs);
  const auto data = synthetic(truth, "tcp");
  const predict::FitResult fit = predict::fitConstants(data, start);
  for (Term t : {Term::kAlpha, Term::kBeta, Term::kGamma, Term::kCall}) {
    EXPECT_NEAR(fit.constants.get(Path::kTcp, t) / truth.get(Path::kTcp, t), 1.0, 0.02)
        << toString(t);
  }
  // The per-message term is nearly proportional to the bytes here (one
  // per 128 KiB chunk): the data barely tell it from beta, so the ridge
  // keeps it between the start and the truth.
  EXPECT_GT(fit.constants.get(Path::kTcp, Term::kMessage), 0.5 * kUs);
  EXPECT_LT(fit.constants.get(Path::kTcp, Term::kMessage), 1.6 * kUs);
  EXPECT_LT(fit.maxRelativeError, 0.01);
  // Only the tcp path was touched.
  for (const auto& [p, t] : fit.fitted) EXPECT_EQ(p, Path::kTcp);
  EXPECT_EQ(fit.constants.get(Path::kShm, Term::kAlpha),
            start.get(Path::kShm, Term::kAlpha));
}

TEST(Fit, SharedMemoryRunsFitTheTransportAndTheArena) {
  Constants truth = predict::builtInConstants();
  truth[Path::kShm] = pathOf(3 * kUs, 0.3e-9, 0.2e-9, 0.4 * kUs, 2 * kUs);
  truth[Path::kShmArena] = pathOf(0.8 * kUs, 0.1e-9, 0.2e-9, 0, 0.6 * kUs);
  const auto data = synthetic(truth, "shm");
  const predict::FitResult fit = predict::fitConstants(data, predict::builtInConstants());
  EXPECT_LT(fit.maxRelativeError, 0.02);
  EXPECT_NEAR(fit.constants.get(Path::kShm, Term::kAlpha) / (3 * kUs), 1.0, 0.05);
  // The arena's synchronisations (1 or 2 per 128 KiB chunk) and its call
  // term are told apart only by the chunk count, which grows with the
  // bytes: looser.
  EXPECT_NEAR(fit.constants.get(Path::kShmArena, Term::kAlpha) / (0.8 * kUs), 1.0, 0.3);
}

TEST(Fit, MeasurementFileErrorsNameTheLineAndField) {
  auto message = [](const std::string& text) {
    try {
      predict::parseMeasurements(text, "m.csv");
    } catch (const predict::FitError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string header(predict::kMeasurementHeader);
  EXPECT_TRUE(test::contains(message("a,b\n"), "m.csv:1: expected the header"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,0,ring,4096\n"),
                             "m.csv:2: expected 7 fields"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,0,bogus,4096,0.001\n"),
                             "m.csv:2: algorithm 'bogus'"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,0,ring,4096,-1\n"),
                             "m.csv:2: seconds '-1'"));
  EXPECT_TRUE(test::contains(message(header + "\nudp,1,4,0,ring,4096,1\n"),
                             "m.csv:2: transport 'udp'"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,fast,ring,4096,1\n"),
                             "m.csv:2: link_bps 'fast'"));
  const auto rows = predict::parseMeasurements(
      header + "\ntcp,2,2,1gbit,hier,64K,0.0025\n# comment\n", "m.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].linkBps, 1e9);
  EXPECT_EQ(rows[0].bytes, 65536u);
  EXPECT_EQ(rows[0].algorithm, Algorithm::kHier);
  EXPECT_EQ(predict::measurementLine(rows[0]), "tcp,2,2,1000000000,hier,65536,0.0025");
}

// ---- the constants file -------------------------------------------------------

TEST(ConstantsFile, RoundTrip) {
  Constants c = roundConstants();
  c[Path::kTcp][Term::kBeta] = 1.2345678901234567e-10;
  c.source = "a \"quoted\" source";
  const std::string text = predict::constantsToJson(c);
  const Constants back = predict::constantsFromJson(text, "x.json");
  for (int p = 0; p < predict::kPaths; ++p) {
    for (int t = 0; t < predict::kTerms; ++t) {
      EXPECT_EQ(back.paths[p].value[t], c.paths[p].value[t]) << p << " " << t;
    }
  }
  EXPECT_EQ(back.source, "x.json (a \"quoted\" source)");
}

TEST(ConstantsFile, MissingPathsKeepTheBase) {
  const Constants c = predict::constantsFromJson(
      R"({"kolo_predict_constants": 1, "paths": {"tcp": {"alpha": 1e-3}}})", "f.json",
      roundConstants());
  EXPECT_EQ(c.get(Path::kTcp, Term::kAlpha), 1e-3);
  EXPECT_EQ(c.get(Path::kTcp, Term::kBeta), 1e-9);
  EXPECT_EQ(c.get(Path::kShm, Term::kAlpha), 1 * kUs);
}

TEST(ConstantsFile, BadFilesAreNamedClearly) {
  auto message = [](const std::string& text) {
    try {
      predict::constantsFromJson(text, "bad.json");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(test::contains(message("{\"kolo_predict_constants\": 1,\n \"paths\": {"),
                             "bad.json:2:"));
  EXPECT_TRUE(test::contains(message("{\"paths\": {}}"),
                             "bad.json: not a kolo-predict constants file"));
  EXPECT_TRUE(
      test::contains(message(R"({"kolo_predict_constants": 1, "paths": {"udp": {}}})"),
                     "unknown path 'udp'"));
  EXPECT_TRUE(test::contains(
      message(R"({"kolo_predict_constants": 1, "paths": {"tcp": {"delta": 1}}})"),
      "paths.tcp: unknown term 'delta'"));
  EXPECT_TRUE(test::contains(
      message(R"({"kolo_predict_constants": 1, "paths": {"tcp": {"beta": -1}}})"),
      "paths.tcp.beta must be a non-negative number"));
  EXPECT_TRUE(test::contains(message(R"({"kolo_predict_constants": 2})"),
                             "kolo_predict_constants is not 1"));
  try {
    predict::loadConstants("/nonexistent/k.json");
    ADD_FAILURE() << "no error";
  } catch (const predict::ConstantsError& e) {
    EXPECT_TRUE(test::contains(e.what(), "'/nonexistent/k.json'")) << e.what();
  }
}

// ---- units ---------------------------------------------------------------------------

TEST(Units, Parse) {
  EXPECT_EQ(predict::parseRate("--link", "25gbit"), 25e9);
  EXPECT_EQ(predict::parseRate("--link", "100mbit"), 100e6);
  EXPECT_EQ(predict::parseRate("--link", "10Gbps"), 10e9);
  EXPECT_EQ(predict::parseRate("--link", "0"), 0);
  EXPECT_DOUBLE_EQ(predict::parseDuration("--latency", "2us"), 2e-6);
  EXPECT_DOUBLE_EQ(predict::parseDuration("--latency", "1.5ms"), 1.5e-3);
  EXPECT_EQ(predict::parseBytes("--bytes", "64M"), 64u << 20);
  EXPECT_EQ(predict::parseBytes("--bytes", "4KiB"), 4096u);
  EXPECT_EQ(predict::parseBytes("--bytes", "25.6M"),
            static_cast<size_t>(std::llround(25.6 * 1048576)));
  EXPECT_DOUBLE_EQ(predict::parseCount("--params", "25.6M"), 25.6e6);
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const predict::UnitError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(test::contains(message([] { predict::parseRate("--link", "25gbits"); }),
                             "--link '25gbits'"));
  EXPECT_TRUE(test::contains(message([] { predict::parseDuration("--latency", "2"); }),
                             "--latency '2': a duration needs a unit"));
  EXPECT_TRUE(test::contains(message([] { predict::parseBytes("--bytes", "-4K"); }),
                             "--bytes '-4K'"));
  EXPECT_TRUE(test::contains(message([] { predict::parseBytes("--bytes", "4Q"); }),
                             "--bytes '4Q'"));
}

}  // namespace
}  // namespace kolo::predict_shapes
