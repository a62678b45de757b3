// What the whole runtime reports (real communicators, each rank a thread of
// this process; support/runtime_world.h): the timeline's phases per tensor
// and its cycle marks, the straggler report, the autotune log, and a stall
// check that is off never ending the job.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/runtime.h"
#include "support/runtime_world.h"

namespace kolo::runtime::runtime_world {
namespace {

// The timeline (rank 0) records each phase per tensor; the straggler report
// counts the operations.
TEST(RuntimeTest, TimelineAndStragglerReport) {
  const std::string path =
      ::testing::TempDir() + "runtime_timeline_" + std::to_string(getpid()) + ".json";
  RuntimeOptions o = fastOptions();
  o.timelinePath = path;
  withRuntimes(2, o, [&](Runtime& rt, int rank) {
    // A group shares one bucket whatever the timing: tl.a and tl.b run as
    // one segmented allreduce (no copies to record), tl.p and tl.q, with a
    // prescale, through the fusion buffer (its phases recorded).
    std::vector<float> a(64, 1), b(64, 1), c(8, 1), p(16, 1), q(16, 1);
    for (auto& h : rt.enqueueGroup({allreduce("tl.a", a), allreduce("tl.b", b)}))
      h->wait();
    OpRequest rp = allreduce("tl.p", p), rq = allreduce("tl.q", q);
    rp.spec.prescale = rq.spec.prescale = 0.5;
    for (auto& h : rt.enqueueGroup({rp, rq})) h->wait();
    EXPECT_EQ(p[3], 1.0f);  // 0.5 + 0.5
    auto hc = rt.enqueue(allreduce("tl.c", c));
    hc->wait();
    const auto report = rt.stragglerReport();
    ASSERT_EQ(report.ranks.size(), 2u);
    EXPECT_GE(report.ranks[rank].operations, 3);
  });
  const std::string text = takeFile(path);
  ASSERT_FALSE(text.empty()) << path;
  for (const char* want :
       {"NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER", "COLLECTIVE", "MEMCPY_OUT_FUSION_BUFFER",
        "tl.a", "tl.b", "tl.c", "tl.p", "tl.q",
        "\"bytes\":\"512\",\"bucket\":\"0\",\"tensors\":\"2\""}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << " in\n" << text;
  }
  EXPECT_EQ(text.back() == '\n' ? text[text.size() - 2] : text.back(), ']') << text;
}

// KOLO_TIMELINE_MARK_CYCLES: rank 0's timeline has an instant CYCLE_START
// on the track "cycles" for every negotiation cycle.
TEST(RuntimeTest, TimelineMarksCycles) {
  const std::string path =
      ::testing::TempDir() + "runtime_cycles_" + std::to_string(getpid()) + ".json";
  RuntimeOptions o = fastOptions();
  o.timelinePath = path;
  o.timelineMarkCycles = true;
  withRuntimes(2, o, [&](Runtime& rt, int) {
    std::vector<float> a(8, 1);
    for (int step = 0; step < 3; ++step) rt.enqueue(allreduce("cy.a", a))->wait();
  });
  const std::string text = takeFile(path);
  size_t marks = 0;
  for (size_t at = text.find("CYCLE_START"); at != std::string::npos;
       at = text.find("CYCLE_START", at + 1)) {
    ++marks;
  }
  EXPECT_GE(marks, 3u) << text.substr(0, 2000);
  EXPECT_NE(text.find("\"name\":\"cycles\""), std::string::npos) << text.substr(0, 2000);
  EXPECT_NE(text.find("\"ph\":\"i\""), std::string::npos);
}

// KOLO_AUTOTUNE_LOG: rank 0 writes one CSV row per candidate of the grid,
// then the chosen one again.
TEST(RuntimeTest, AutotuneLogListsEveryCandidateThenTheChoice) {
  const std::string path =
      ::testing::TempDir() + "runtime_autotune_" + std::to_string(getpid()) + ".csv";
  RuntimeOptions o = fastOptions();
  o.autotune = true;
  o.autotuneLogPath = path;
  o.autotuneWarmupSamples = 0;
  o.autotuneStepsPerSample = 1;  // one cycle with work scores a candidate
  const size_t candidates = Autotuner::defaultGrid().size();
  withRuntimes(2, o, [&](Runtime& rt, int) {
    std::vector<float> a(256, 1);
    for (size_t step = 0; step < 2 * candidates + 4; ++step) {
      rt.enqueue(allreduce("tune.a", a))->wait();
    }
  });
  std::istringstream text(takeFile(path));
  std::vector<std::string> rows;
  for (std::string line; std::getline(text, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), candidates + 2);
  EXPECT_EQ(rows[0], "fusion_threshold_bytes,cycle_time_ms,bytes_per_second");
  EXPECT_EQ(rows[1].rfind("1048576,0.5,", 0), 0u) << rows[1];
  bool chosenIsACandidate = false;
  for (size_t i = 1; i <= candidates; ++i) chosenIsACandidate |= rows[i] == rows.back();
  EXPECT_TRUE(chosenIsACandidate) << rows.back();
}

// KOLO_STALL_CHECK_DISABLE: a wait far beyond the stall shutdown time ends
// nothing.
TEST(RuntimeTest, StallCheckOffNeverEndsTheJob) {
  RuntimeOptions o = fastOptions();
  o.stallWarningSeconds = 0.05;
  o.stallShutdownSeconds = 0.1;
  o.stallCheck = false;
  withRuntimes(2, o, [&](Runtime& rt, int rank) {
    std::vector<float> a(4, 1);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    auto h = rt.enqueue(allreduce("slow.a", a));
    ASSERT_NO_THROW(h->wait());
    EXPECT_EQ(a[0], 2.0f);
  });
}

}  // namespace
}  // namespace kolo::runtime::runtime_world
