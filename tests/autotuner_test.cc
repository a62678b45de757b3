// Autotuner alone, fed made-up samples: the grid walk, warm-up samples
// dropped, the best candidate chosen and kept, and the log lines.
#include "runtime/autotuner.h"

#include <gtest/gtest.h>
#include <kolo/error.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace kolo::runtime {
namespace {

constexpr int64_t kMiB = 1 << 20;

std::vector<TuningPoint> threePoints() {
  return {{1 * kMiB, 0.5}, {4 * kMiB, 1.0}, {16 * kMiB, 2.5}};
}

TEST(Autotuner, DefaultGrid) {
  const auto g = Autotuner::defaultGrid();
  ASSERT_EQ(g.size(), 20u);
  EXPECT_EQ(g.front().fusionThresholdBytes, 1 * kMiB);
  EXPECT_EQ(g.front().cycleTimeMs, 0.5);
  EXPECT_EQ(g[1].cycleTimeMs, 1.0);
  EXPECT_EQ(g[3].cycleTimeMs, 5.0);
  EXPECT_EQ(g[4].fusionThresholdBytes, 4 * kMiB);
  EXPECT_EQ(g.back().fusionThresholdBytes, 128 * kMiB);
  EXPECT_EQ(g.back().cycleTimeMs, 5.0);
}

TEST(Autotuner, WalksTheGridSkippingWarmup) {
  Autotuner t(threePoints(), 2, 3);
  std::vector<int64_t> thresholds;
  EXPECT_EQ(t.current().fusionThresholdBytes, 1 * kMiB);
  EXPECT_EQ(t.logLine(),
            "autotune: trying fusion threshold 1 MiB, cycle time 0.5 ms (candidate 1 of "
            "3)");
  int changes = 0;
  for (int i = 0; i < 15; ++i) {
    thresholds.push_back(t.current().fusionThresholdBytes);
    if (t.record(1000, 0.001)) ++changes;
  }
  // 5 samples per candidate (2 warm-up + 3 scored).
  const std::vector<int64_t> expected = {
      1 * kMiB, 1 * kMiB, 1 * kMiB,  1 * kMiB,  1 * kMiB,  4 * kMiB,  4 * kMiB, 4 * kMiB,
      4 * kMiB, 4 * kMiB, 16 * kMiB, 16 * kMiB, 16 * kMiB, 16 * kMiB, 16 * kMiB};
  EXPECT_EQ(thresholds, expected);
  EXPECT_EQ(changes, 3);  // two moves and the settling
  EXPECT_TRUE(t.done());
}

TEST(Autotuner, WarmupSamplesDoNotCount) {
  // Candidate 0's warm-up samples are huge, its scored ones slow; candidate
  // 1 is steady. Counting the warm-up would pick candidate 0.
  Autotuner t({{1 * kMiB, 1.0}, {2 * kMiB, 1.0}}, 1, 2);
  t.record(1'000'000'000, 0.001);  // warm-up
  t.record(1000, 1.0);
  t.record(1000, 1.0);             // 1 kB/s
  t.record(1'000'000'000, 0.001);  // warm-up
  t.record(2000, 1.0);
  EXPECT_TRUE(t.record(2000, 1.0));  // 2 kB/s
  ASSERT_TRUE(t.done());
  EXPECT_EQ(t.current().fusionThresholdBytes, 2 * kMiB);
}

TEST(Autotuner, ChoosesTheBestAndStays) {
  Autotuner t(threePoints(), 0, 2);
  // Candidate 1 (4 MiB, 1 ms) is the fastest: 3 MB over 1 ms + 2 ms.
  const double seconds[3][2] = {{0.002, 0.002}, {0.001, 0.002}, {0.004, 0.001}};
  for (int c = 0; c < 3; ++c) {
    EXPECT_FALSE(t.record(1'500'000, seconds[c][0]));
    EXPECT_TRUE(t.record(1'500'000, seconds[c][1]));
    if (c < 2) {
      EXPECT_FALSE(t.done());
    }
  }
  ASSERT_TRUE(t.done());
  EXPECT_EQ(t.current().fusionThresholdBytes, 4 * kMiB);
  EXPECT_EQ(t.current().cycleTimeMs, 1.0);
  EXPECT_EQ(t.logLine(),
            "autotune: settled on fusion threshold 4 MiB, cycle time 1 ms (1000.0 MB/s, "
            "best of 3 candidates)");
  // It stays, whatever comes later.
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(t.record(1'000'000'000, 1e-6));
  EXPECT_EQ(t.current().fusionThresholdBytes, 4 * kMiB);
}

TEST(Autotuner, LogLineWhileTrying) {
  Autotuner t(threePoints(), 0, 1);
  EXPECT_TRUE(t.record(812'300, 0.001));
  EXPECT_EQ(t.logLine(),
            "autotune: trying fusion threshold 4 MiB, cycle time 1 ms (candidate 2 of 3; "
            "fusion threshold 1 MiB, cycle time 0.5 ms gave 812.3 MB/s)");
}

TEST(Autotuner, TieGoesToTheEarliest) {
  Autotuner t(threePoints(), 0, 1);
  t.record(1000, 0.001);
  t.record(1000, 0.001);
  t.record(1000, 0.001);
  ASSERT_TRUE(t.done());
  EXPECT_EQ(t.current().fusionThresholdBytes, 1 * kMiB);
}

TEST(Autotuner, EmptyGridIsDone) {
  Autotuner t({}, 1, 1);
  EXPECT_TRUE(t.done());
  EXPECT_EQ(t.current().fusionThresholdBytes, TuningPoint{}.fusionThresholdBytes);
  EXPECT_FALSE(t.record(1, 1));
}

TEST(Autotuner, ThresholdUnits) {
  Autotuner t({{512 * 1024, 2.5}, {1000, 1}}, 0, 1);
  EXPECT_EQ(
      t.logLine(),
      "autotune: trying fusion threshold 512 KiB, cycle time 2.5 ms (candidate 1 of "
      "2)");
  t.record(1, 1);
  EXPECT_EQ(
      t.logLine(),
      "autotune: trying fusion threshold 1000 B, cycle time 1 ms (candidate 2 of 2; "
      "fusion threshold 512 KiB, cycle time 2.5 ms gave 0.0 MB/s)");
}

TEST(Autotuner, TrialsNameTheScoredCandidateAndTheBest) {
  Autotuner t(threePoints(), 0, 1);
  ASSERT_TRUE(t.record(2000, 0.001));  // 2 MB/s
  EXPECT_EQ(t.lastTrial().point.fusionThresholdBytes, 1 * kMiB);
  EXPECT_DOUBLE_EQ(t.lastTrial().bytesPerSecond, 2e6);
  ASSERT_TRUE(t.record(9000, 0.001));
  EXPECT_EQ(t.lastTrial().point.fusionThresholdBytes, 4 * kMiB);
  ASSERT_TRUE(t.record(1000, 0.001));
  ASSERT_TRUE(t.done());
  EXPECT_EQ(t.lastTrial().point.fusionThresholdBytes, 16 * kMiB);
  EXPECT_EQ(t.best().point.fusionThresholdBytes, 4 * kMiB);
  EXPECT_EQ(t.best().point.cycleTimeMs, 1.0);
  EXPECT_DOUBLE_EQ(t.best().bytesPerSecond, 9e6);
}

TEST(AutotuneLog, CsvRowsThenTheChoice) {
  const std::string path = ::testing::TempDir() + "autotune_log_test.csv";
  {
    auto log = AutotuneLog::open(path);
    log->write({{4 * kMiB, 0.5}, 1234.56});
    log->write({{64 * kMiB, 2.5}, 1e9});
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "fusion_threshold_bytes,cycle_time_ms,bytes_per_second\n"
            "4194304,0.5,1234.6\n"
            "67108864,2.5,1000000000.0\n");
  std::remove(path.c_str());
}

TEST(AutotuneLog, UnwritablePathIsNamed) {
  try {
    AutotuneLog::open("/no/such/dir/tune.csv");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("/no/such/dir/tune.csv"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("KOLO_AUTOTUNE_LOG"), std::string::npos);
  }
}

}  // namespace
}  // namespace kolo::runtime
