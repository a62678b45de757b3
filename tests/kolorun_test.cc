// Tests of the kolorun binary (KOLO_BIN_DIR/kolorun), run as a real child
// process with real ranks (/bin/sh scripts; support/kolorun_child.h):
// output prefixing, the per-rank environment, argument errors, the
// timeout, the output directory and --mpi. Failing ranks and signals are
// tested in kolorun_failure_test, remote hosts in kolorun_hosts_test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/kolorun_child.h"

namespace kolo::kolorun_test {
namespace {

TEST(KolorunTest, PrefixesEveryLineWithItsRank) {
  auto r = runKolorun(
      {"-np", "3", "sh", "-c", "echo first $KOLO_RANK; echo second $KOLO_RANK"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  std::multiset<std::string> got;
  for (const auto& l : lines(r.out)) got.insert(l);
  std::multiset<std::string> want;
  for (int rank = 0; rank < 3; ++rank) {
    std::string p = "[" + std::to_string(rank) + "] ";
    want.insert(p + "first " + std::to_string(rank));
    want.insert(p + "second " + std::to_string(rank));
  }
  EXPECT_EQ(got, want) << describe(r);
  // Each rank's own lines keep their order.
  for (int rank = 0; rank < 3; ++rank) {
    std::string p = "[" + std::to_string(rank) + "] ";
    EXPECT_LT(r.out.find(p + "first"), r.out.find(p + "second"));
  }
}

TEST(KolorunTest, StderrStaysOnStderrWithPrefix) {
  auto r = runKolorun({"-np", "2", "sh", "-c", "echo to-out; echo to-err >&2"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] to-out\n") && contains(r.out, "[1] to-out\n"))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "[0] to-err\n") && contains(r.err, "[1] to-err\n"))
      << describe(r);
  EXPECT_FALSE(contains(r.out, "to-err")) << describe(r);
  EXPECT_FALSE(contains(r.err, "to-out")) << describe(r);
}

TEST(KolorunTest, PartialLastLineIsFlushedAtExit) {
  auto r = runKolorun({"-np", "2", "sh", "-c", "printf 'no newline %s' $KOLO_RANK"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] no newline 0\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] no newline 1\n")) << describe(r);
}

TEST(KolorunTest, LineOver64KiBIsPrintedInPrefixedPieces) {
  // 150,000 'x' then a newline: pieces of 65,536, 65,536 and 18,928 bytes,
  // each on its own line with the rank's prefix (docs/launching.md).
  auto r = runKolorun({"-np", "1", "sh", "-c",
                       "head -c 150000 /dev/zero | tr '\\0' x; echo; echo after"});
  EXPECT_EQ(r.exitCode, 0) << describe(r);
  auto out = lines(r.out);
  ASSERT_EQ(out.size(), 4u) << r.out.size() << " bytes: " << r.out.substr(0, 200);
  const size_t sizes[] = {65536, 65536, 150000 - 2 * 65536};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i], "[0] " + std::string(sizes[i], 'x')) << "piece " << i;
  }
  EXPECT_EQ(out[3], "[0] after");
}

TEST(KolorunTest, ManyRanksWritingFastNeverInterleaveMidLine) {
  // Each rank floods 20000 lines of 100 characters; every line of kolorun's
  // output must be one whole line of one rank, and none may be lost.
  constexpr int kRanks = 4;
  constexpr int kLines = 20000;
  auto r = runKolorun(
      {"-np", std::to_string(kRanks), "sh", "-c",
       "yes \"rank$KOLO_RANK-$(printf '%0100d' 0)\" | head -n " + std::to_string(kLines)},
      60);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::regex line(R"(\[(\d+)\] rank(\d+)-0{100})");
  std::map<int, int> perRank;
  for (const auto& l : lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << "mangled line: " << l.substr(0, 200);
    ASSERT_EQ(m[1], m[2]) << l.substr(0, 200);
    ++perRank[std::stoi(m[1])];
  }
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(perRank[rank], kLines) << rank;
}

TEST(KolorunTest, SetsTheLayoutEnvironmentPerRank) {
  auto r =
      runKolorun({"-np", "3", "sh", "-c",
                  "echo $KOLO_RANK $KOLO_SIZE $KOLO_LOCAL_RANK $KOLO_LOCAL_SIZE "
                  "$KOLO_CROSS_RANK $KOLO_CROSS_SIZE $KOLO_RENDEZVOUS $KOLO_JOB_ID"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  const std::regex re(
      R"(\[(\d)\] (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (tcp://127\.0\.0\.1:\d+) (\S+))");
  std::set<int> ranks;
  std::set<std::string> rendezvous, jobIds;
  for (const auto& l : lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, re)) << l;
    int rank = std::stoi(m[1]);
    ranks.insert(rank);
    EXPECT_EQ(std::stoi(m[2]), rank) << l;  // KOLO_RANK
    EXPECT_EQ(m[3], "3") << l;              // KOLO_SIZE
    EXPECT_EQ(std::stoi(m[4]), rank) << l;  // KOLO_LOCAL_RANK
    EXPECT_EQ(m[5], "3") << l;              // KOLO_LOCAL_SIZE
    EXPECT_EQ(m[6], "0") << l;              // KOLO_CROSS_RANK
    EXPECT_EQ(m[7], "1") << l;              // KOLO_CROSS_SIZE
    rendezvous.insert(m[8]);
    jobIds.insert(m[9]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(rendezvous.size(), 1u) << "ranks must share one rendezvous";
  EXPECT_EQ(jobIds.size(), 1u) << "ranks must share one job id";

  // Another job gets another id.
  auto again = runKolorun({"-np", "1", "sh", "-c", "echo $KOLO_JOB_ID"});
  ASSERT_EQ(again.exitCode, 0);
  EXPECT_NE("[0] " + *jobIds.begin() + "\n", again.out);
}

TEST(KolorunTest, LauncherVariablesOverrideInheritedOnes) {
  setenv("KOLO_RANK", "42", 1);
  auto r = runKolorun({"-np", "2", "sh", "-c", "echo $KOLO_RANK"});
  unsetenv("KOLO_RANK");
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] 0\n") && contains(r.out, "[1] 1\n")) << describe(r);
}

TEST(KolorunTest, ExportFlagSetsVariables) {
  auto r = runKolorun({"-np", "2", "-x", "KOLORUN_TEST_VAR=hello world", "sh", "-c",
                       "echo \"$KOLORUN_TEST_VAR\""});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] hello world\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] hello world\n")) << describe(r);
}

TEST(KolorunTest, EveryRankGetsTheJobsFreshSecret) {
  std::vector<std::string> cmd = {"-np", "2", "sh", "-c", "echo secret=$KOLO_JOB_SECRET"};
  auto a = runKolorun(cmd);
  auto b = runKolorun(cmd);
  ASSERT_EQ(a.exitCode, 0) << describe(a);
  ASSERT_EQ(b.exitCode, 0) << describe(b);
  EXPECT_EQ(secretOf(a.out, 0).size(), 64u) << describe(a);
  EXPECT_EQ(secretOf(a.out, 0), secretOf(a.out, 1)) << describe(a);
  EXPECT_NE(secretOf(a.out, 0), secretOf(b.out, 0));  // fresh per job
  setenv("KOLO_JOB_SECRET", "given-by-the-user", 1);
  auto c = runKolorun(cmd);
  unsetenv("KOLO_JOB_SECRET");
  EXPECT_EQ(secretOf(c.out, 1), "given-by-the-user") << describe(c);
}

// horovodrun's tuning flags become the ranks' KOLO_* settings; a flag
// that changes nothing says so on stderr.
TEST(KolorunTest, HorovodTuningFlagsReachEveryRank) {
  auto r =
      runKolorun({"-np", "2", "--fusion-threshold-mb", "16", "--cycle-time-ms", "2.5",
                  "--log-level", "TRACE", "--no-stall-check", "--tcp", "sh", "-c",
                  "echo $KOLO_RANK $KOLO_FUSION_THRESHOLD $KOLO_CYCLE_TIME "
                  "$KOLO_LOG_LEVEL $KOLO_STALL_CHECK_DISABLE"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] 0 16777216 2.5 debug 1\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] 1 16777216 2.5 debug 1\n")) << describe(r);
  EXPECT_TRUE(contains(r.err, "kolorun: --tcp has no effect: ")) << describe(r);
}

TEST(KolorunTest, StdinIsEmpty) {
  auto r = runKolorun({"-np", "2", "sh", "-c", "cat; echo read-done"}, 10);
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] read-done")) << describe(r);
}

TEST(KolorunTest, MoreRanksThanCores) {
  auto r = runKolorun({"-np", "16", "sh", "-c", "echo up"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_EQ(lines(r.out).size(), 16u) << describe(r);
  EXPECT_TRUE(contains(r.out, "[15] up\n")) << describe(r);
}

TEST(KolorunTest, CommandNotFoundIsAClearError) {
  auto r = runKolorun({"-np", "2", "kolo-no-such-command-xyz", "arg"});
  EXPECT_EQ(r.exitCode, 127) << describe(r);
  EXPECT_TRUE(contains(r.err, "kolo-no-such-command-xyz")) << describe(r);
  EXPECT_TRUE(contains(r.err, "not found")) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);

  auto path = runKolorun({"-np", "1", "/nonexistent/dir/prog"});
  EXPECT_EQ(path.exitCode, 127) << describe(path);
  EXPECT_TRUE(contains(path.err, "/nonexistent/dir/prog")) << describe(path);

  auto notExec = runKolorun({"-np", "1", "/etc/hostname"});
  EXPECT_EQ(notExec.exitCode, 126) << describe(notExec);
  EXPECT_TRUE(contains(notExec.err, "/etc/hostname")) << describe(notExec);
}

TEST(KolorunTest, BadFlagsPrintUsageAndExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-np", "0", "true"}, "'0'"},
      {{"-np", "abc", "true"}, "'abc'"},
      {{"-np", "-3", "true"}, "'-3'"},
      {{"-np", "2"}, "missing the command"},
      {{"true"}, "missing -np"},
      {{}, "missing -np"},
      {{"-np", "2", "--frobnicate", "true"}, "unknown option '--frobnicate'"},
      {{"-np"}, "needs a value"},
      {{"-np", "2", "--timeout", "soon", "true"}, "'soon'"},
      {{"-np", "2", "-x", "1BAD", "true"}, "'1BAD'"},
      {{"-np", "2", "--min-np", "3", "true"}, "kolorun: --min-np 3 is more than -np 2"},
      {{"-np", "2", "--fusion-threshold-mb", "lots", "true"}, "'lots'"},
  };
  for (const auto& [args, message] : cases) {
    auto r = runKolorun(args, 10);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exitCode, 2) << joined << describe(r);
    EXPECT_TRUE(contains(r.err, message)) << joined << describe(r);
    EXPECT_TRUE(contains(r.err, "usage: kolorun")) << joined << describe(r);
  }
}

TEST(KolorunTest, HelpGoesToStdoutAndExitsZero) {
  auto r = runKolorun({"--help"});
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_TRUE(contains(r.out, "usage: kolorun")) << describe(r);
}

TEST(KolorunTest, OptionsEndAtTheCommand) {
  // Flags after the command belong to the command.
  auto r = runKolorun({"-np", "1", "echo", "-np", "5", "--bogus"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_EQ(r.out, "[0] -np 5 --bogus\n");
}

TEST(KolorunTest, TimeoutEndsTheJob) {
  auto r = runKolorun({"-np", "2", "--timeout", "0.5", "sleep", "100"}, 30);
  EXPECT_EQ(r.exitCode, 124) << describe(r);
  EXPECT_LT(r.seconds, 5.0) << describe(r);
  EXPECT_TRUE(contains(r.err, "--timeout")) << describe(r);
}

TEST(KolorunTest, OutputDirKeepsEachRanksRawOutput) {
  TempDir dir;
  auto outDir = dir.path / "logs";
  auto r = runKolorun({"-np", "2", "--output-dir", outDir.string(), "sh", "-c",
                       "echo out $KOLO_RANK; echo err $KOLO_RANK >&2"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream out(outDir / ("rank." + std::to_string(rank) + ".stdout"));
    std::ifstream err(outDir / ("rank." + std::to_string(rank) + ".stderr"));
    std::string o((std::istreambuf_iterator<char>(out)),
                  std::istreambuf_iterator<char>());
    std::string e((std::istreambuf_iterator<char>(err)),
                  std::istreambuf_iterator<char>());
    EXPECT_EQ(o, "out " + std::to_string(rank) + "\n");
    EXPECT_EQ(e, "err " + std::to_string(rank) + "\n");
  }
  // And the console still gets the prefixed lines.
  EXPECT_TRUE(contains(r.out, "[1] out 1\n")) << describe(r);
}

TEST(KolorunMpiTest, MpiDelegatesToMpirun) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "mpirun is not installed";
  }
  auto r = runKolorun({"--mpi", "-np", "2", "-x", "KOLORUN_MPI_VAR=abc",
                       "--cycle-time-ms", "3", "sh", "-c",
                       "echo rank=$OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE "
                       "var=$KOLORUN_MPI_VAR cycle=$KOLO_CYCLE_TIME"},
                      60);
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "rank=0 of 2 var=abc cycle=3")) << describe(r);
  EXPECT_TRUE(contains(r.out, "rank=1 of 2 var=abc cycle=3")) << describe(r);
  // A failing rank fails the launch with its code, as under kolorun.
  auto f = runKolorun({"--mpi", "-np", "2", "sh", "-c",
                       "[ $OMPI_COMM_WORLD_RANK = 1 ] && exit 3; exit 0"},
                      60);
  EXPECT_NE(f.exitCode, 0) << describe(f);
}

}  // namespace
}  // namespace kolo::kolorun_test
