// Tests of how kolorun (KOLO_BIN_DIR/kolorun, run as a real child process;
// support/kolorun_child.h) ends a job: a failing or killed rank ends the
// others and is named, a rank ignoring SIGTERM is killed after the grace
// period, a successful job leaves no process behind, Ctrl-C and SIGTERM
// reach every rank, and a killed kolorun takes its ranks' trees with it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/kolorun_child.h"

namespace kolo::kolorun_test {
namespace {

TEST(KolorunTest, FailingRankEndsTheOthersAndNamesItself) {
  TempDir pids;
  // Ranks 0 and 2 sleep in the background (a grandchild of kolorun) and
  // record its pid; rank 1 fails.
  std::string script =
      "if [ $KOLO_RANK = 1 ]; then sleep 0.3; echo some output; "
      "echo last words >&2; exit 3; fi; sleep 100 & echo $! > " +
      pids.path.string() + "/$KOLO_RANK; wait";
  auto r = runKolorun({"-np", "3", "sh", "-c", script}, 30);
  EXPECT_EQ(r.exitCode, 3) << describe(r);
  EXPECT_LT(r.seconds, 5.0) << describe(r);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(kolorun: rank 1 \(pid \d+\) exited with code 3)")))
      << describe(r);
  // The report quotes the rank's last lines, after its own output.
  auto report = r.err.find("kolorun: rank 1 (pid");
  ASSERT_NE(report, std::string::npos);
  EXPECT_TRUE(contains(r.err.substr(report), "[1] last words")) << describe(r);
  EXPECT_TRUE(contains(r.err.substr(report), "[1] some output")) << describe(r);
  expectAllGone(pidsIn(pids.path));
}

TEST(KolorunTest, RankKilledBySignalGives128PlusSignal) {
  auto r = runKolorun({"-np", "2", "sh", "-c",
                       "if [ $KOLO_RANK = 0 ]; then kill -KILL $$; fi; exec sleep 100"},
                      30);
  EXPECT_EQ(r.exitCode, 128 + SIGKILL) << describe(r);
  EXPECT_LT(r.seconds, 5.0) << describe(r);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(kolorun: rank 0 \(pid \d+\) was killed by signal SIGKILL)")))
      << describe(r);
}

TEST(KolorunTest, VerboseDescribesTheFailingExitOnce) {
  auto r = runKolorun({"-v", "-np", "2", "sh", "-c",
                       "if [ $KOLO_RANK = 1 ]; then kill -9 $$; fi; sleep 10"});
  EXPECT_EQ(r.exitCode, 128 + SIGKILL) << describe(r);
  const std::regex killed("rank 1 \\(pid [0-9]+\\) was killed by signal SIGKILL");
  auto begin = std::sregex_iterator(r.err.begin(), r.err.end(), killed);
  EXPECT_EQ(std::distance(begin, std::sregex_iterator()), 1) << describe(r);
  // The other ranks' exits are still told.
  EXPECT_TRUE(contains(r.err, "rank 0 (pid")) << describe(r);
}

TEST(KolorunTest, RankIgnoringSigtermIsKilledAfterGrace) {
  auto r = runKolorun({"-np", "2", "sh", "-c",
                       "if [ $KOLO_RANK = 1 ]; then sleep 0.2; exit 5; fi; "
                       "trap '' TERM; sleep 100 & wait; sleep 100"},
                      30);
  EXPECT_EQ(r.exitCode, 5) << describe(r);
  // SIGTERM is ignored; SIGKILL follows after the ~3 s grace period.
  EXPECT_GT(r.seconds, 2.5) << describe(r);
  EXPECT_LT(r.seconds, 8.0) << describe(r);
  EXPECT_TRUE(contains(r.err, "kolorun: rank 1")) << describe(r);
}

TEST(KolorunTest, SuccessfulJobExitsZeroAndLeavesNothingBehind) {
  TempDir pids;
  auto r = runKolorun(
      {"-np", "2", "sh", "-c",
       "sleep 100 & echo $! > " + pids.path.string() + "/$KOLO_RANK; echo done"},
      30);
  EXPECT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_LT(r.seconds, 5.0) << describe(r);
  EXPECT_EQ(pidsIn(pids.path).size(), 2u);
  expectAllGone(pidsIn(pids.path));
}

void interruptWhenReady(int signal, int ranks, std::vector<pid_t>* recorded,
                        const std::filesystem::path& pidDir, RunResult* out) {
  bool sent = false;
  auto r = runKolorun(
      {"-np", std::to_string(ranks), "sh", "-c",
       "sleep 100 & echo $! > " + pidDir.string() + "/$KOLO_RANK; echo ready; wait"},
      30, [&](pid_t pid, const RunResult& sofar) {
        int ready = 0;
        for (const auto& l : lines(sofar.out)) ready += contains(l, "ready");
        if (!sent && ready == ranks) {
          sent = true;
          kill(pid, signal);
        }
      });
  *recorded = pidsIn(pidDir);
  *out = r;
}

TEST(KolorunTest, CtrlCEndsEveryRank) {
  TempDir pids;
  std::vector<pid_t> sleeps;
  RunResult r;
  auto start = Clock::now();
  interruptWhenReady(SIGINT, 3, &sleeps, pids.path, &r);
  EXPECT_EQ(r.exitCode, 128 + SIGINT) << describe(r);
  EXPECT_FALSE(r.timedOut) << describe(r);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_TRUE(contains(r.err, "SIGINT")) << describe(r);
  EXPECT_EQ(sleeps.size(), 3u);
  expectAllGone(sleeps);
}

TEST(KolorunTest, SecondCtrlCKillsAtOnce) {
  // The ranks ignore SIGINT and SIGTERM; without the second interrupt they
  // would last the whole grace period.
  int sent = 0;
  auto r = runKolorun({"-np", "2", "sh", "-c",
                       "trap '' INT TERM; echo ready; while :; do sleep 0.05; done"},
                      30, [&](pid_t pid, const RunResult& sofar) {
                        if (sent == 0 && lines(sofar.out).size() == 2) {
                          sent = 1;
                          kill(pid, SIGINT);
                        } else if (sent == 1 && contains(sofar.err, "received SIGINT")) {
                          sent = 2;
                          kill(pid, SIGINT);
                        }
                      });
  EXPECT_EQ(sent, 2) << describe(r);
  EXPECT_EQ(r.exitCode, 128 + SIGINT) << describe(r);
  EXPECT_LT(r.seconds, 2.5) << describe(r);
  EXPECT_TRUE(contains(r.err, "again")) << describe(r);
}

TEST(KolorunTest, SigtermIsForwardedToRanks) {
  // The ranks see the SIGTERM themselves (their trap prints), then kolorun
  // exits 128+SIGTERM.
  bool sent = false;
  auto r = runKolorun({"-np", "2", "sh", "-c",
                       "trap 'echo got TERM; exit 0' TERM; echo ready; "
                       "while :; do sleep 0.05; done"},
                      30, [&](pid_t pid, const RunResult& sofar) {
                        if (!sent && lines(sofar.out).size() == 2) {
                          sent = true;
                          kill(pid, SIGTERM);
                        }
                      });
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] got TERM")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] got TERM")) << describe(r);
  EXPECT_LT(r.seconds, 5.0) << describe(r);
}

TEST(KolorunTest, KolorunKilledTakesItsRanksWithIt) {
  // SIGKILL gives kolorun no chance to act: the kernel ends each rank
  // (PR_SET_PDEATHSIG), which would otherwise live on with parent 1.
  TempDir pidDir;
  bool sent = false;
  auto r = runKolorun({"-np", "2", "sh", "-c",
                       "trap '' TERM; echo $$ > " + pidDir.path.string() +
                           "/$KOLO_RANK; echo ready; exec sleep 300"},
                      10, [&](pid_t pid, const RunResult& sofar) {
                        if (!sent && lines(sofar.out).size() == 2) {
                          sent = true;
                          kill(pid, SIGKILL);
                        }
                      });
  EXPECT_TRUE(sent) << describe(r);
  EXPECT_FALSE(r.timedOut) << describe(r);
  auto ranks = pidsIn(pidDir.path);
  EXPECT_EQ(ranks.size(), 2u);
  expectAllGone(ranks);
}

TEST(KolorunTest, KolorunKilledTakesEveryProcessOfARanksTree) {
  // Ranks started through a shell: what the shell starts (a background job,
  // a subshell's command after `cd dir &&`) would outlive the killed shell
  // with parent 1; it is still in the rank's process group, which kolorun's
  // guard kills.
  TempDir pidDir;
  const std::string dir = pidDir.path.string();
  bool sent = false;
  auto r = runKolorun({"-np", "3", "sh", "-c",
                       "echo $$ > " + dir + "/$KOLO_RANK.sh; sleep 300 & echo $! > " +
                           dir + "/$KOLO_RANK.bg; (cd / && { sleep 300 & echo $! > " +
                           dir + "/$KOLO_RANK.sub; wait; }) & while [ ! -s " + dir +
                           "/$KOLO_RANK.sub ]; do sleep 0.01; done; echo ready; wait"},
                      10, [&](pid_t pid, const RunResult& sofar) {
                        if (!sent && lines(sofar.out).size() == 3) {
                          sent = true;
                          kill(pid, SIGKILL);
                        }
                      });
  EXPECT_TRUE(sent) << describe(r);
  EXPECT_FALSE(r.timedOut) << describe(r);
  auto processes = pidsIn(pidDir.path);
  EXPECT_EQ(processes.size(), 9u);
  expectAllGone(processes);
}

}  // namespace
}  // namespace kolo::kolorun_test
