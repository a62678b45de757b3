// Tests of the kolorun binary (KOLO_BIN_DIR/kolorun), run as a real child
// process with real ranks (/bin/sh scripts): output prefixing, the per-rank
// environment, failure handling, signals and argument errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

std::string kolorunPath() {
  const char* dir = std::getenv("KOLO_BIN_DIR");
  return std::string(dir != nullptr ? dir : "bin") + "/kolorun";
}

struct RunResult {
  int exitCode = -1;  // 128+signal when kolorun itself was killed
  std::string out;
  std::string err;
  double seconds = 0;
  bool timedOut = false;
};

// Runs kolorun with `args`, collecting stdout and stderr. `onOutput` is
// called whenever output arrives with the child's pid (to send it signals).
// Anything still running after `limitSeconds` is killed and timedOut is set.
RunResult runKolorun(const std::vector<std::string>& args, double limitSeconds = 30,
                     const std::function<void(pid_t, const RunResult&)>& onOutput = {}) {
  std::vector<std::string> argv = {kolorunPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  int outPipe[2], errPipe[2];
  EXPECT_EQ(pipe2(outPipe, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(errPipe, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  auto start = Clock::now();
  int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(outPipe[1]);
  close(errPipe[1]);
  RunResult result;
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << cargv[0] << ": " << std::strerror(rc);
    close(outPipe[0]);
    close(errPipe[0]);
    return result;
  }

  auto deadline = start + std::chrono::duration<double>(limitSeconds);
  std::vector<pollfd> fds = {{outPipe[0], POLLIN, 0}, {errPipe[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.timedOut = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n <= 0) continue;
    bool got = false;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(r));
        got = true;
      } else if (r == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
    if (got && onOutput) onOutput(pid, result);
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  // Output closed; kolorun itself should be gone promptly.
  while (true) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (Clock::now() > deadline) {
      result.timedOut = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string describe(const RunResult& r) {
  return "exit " + std::to_string(r.exitCode) + " after " + std::to_string(r.seconds) +
         " s\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

// A fresh temporary directory, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kolorun_test.XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// True while `pid` exists and is not a zombie.
bool processAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string content((std::istreambuf_iterator<char>(stat)),
                      std::istreambuf_iterator<char>());
  auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() &&
         content[close + 2] != 'Z' && content[close + 2] != 'X';
}

// Pids written one per file under dir (the ranks' background sleeps).
std::vector<pid_t> pidsIn(const std::filesystem::path& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path());
    pid_t pid = 0;
    if (f >> pid && pid > 0) pids.push_back(pid);
  }
  return pids;
}

void expectAllGone(const std::vector<pid_t>& pids) {
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (pid_t pid : pids) {
    while (processAlive(pid) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(processAlive(pid)) << "process " << pid << " survived kolorun";
  }
}

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

// The job secret (docs/security.md): one per job, the same on every rank,
// in the environment only.
std::string secretOf(const std::string& out, int rank) {
  const std::string tag = "[" + std::to_string(rank) + "] secret=";
  size_t at = out.find(tag);
  if (at == std::string::npos) return "";
  at += tag.size();
  return out.substr(at, out.find('\n', at) - at);
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

// ---------------------------------------------------------------------------
// Remote hosts. A stand-in for ssh, written per test, is called exactly as
// ssh is (SSH-ARGS... HOST 'LINE'): it logs its arguments, fails like ssh
// (exit 255, "No route to host") for a host of 198.51.100.9, and otherwise runs
// LINE with sh in a clean environment (only PATH and HOME), as a remote login
// shell would, so only what kolorun forwards reaches the rank. The hosts are
// TEST-NET addresses that are never this machine's: kolorun tells them the
// store address its route towards them uses (on a machine without such a
// route, the address of --network-interface lo), and with KOLO_IFACE=lo the
// ranks talk to each other over loopback.

struct FakeSsh {
  TempDir dir;
  std::string script;
  std::string log;
  FakeSsh() {
    script = (dir.path / "fake-ssh").string();
    log = (dir.path / "calls.log").string();
    std::ofstream(script)
        << "#!/bin/sh\n"
           "# called as: fake-ssh -p 22 HOST LINE\n"
           "echo \"$#|$1|$2|$3\" >> '"
        << log
        << "'\n"
           "[ \"$1\" = -p ] && [ \"$2\" = 22 ] || { echo bad-args >&2; exit 2; }\n"
           "case \"$3\" in 198.51.100.9) echo \"ssh: connect to host $3 port "
           "22: No route to host\" >&2; exit 255;; esac\n"
           "exec env -i PATH=\"$PATH\" HOME=/ sh -c \"$4\"\n";
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  }
  std::vector<std::string> args(const std::string& hosts) const {
    return {"-H", hosts, "--ssh-command", script + " -p 22", "--network-interface", "lo"};
  }
  std::vector<std::string> calls() const {
    std::ifstream in(log);
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    return out;
  }
};

std::vector<std::string> concat(std::vector<std::string> a,
                                const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(KolorunHostsTest, RemoteRanksGetTheirLayoutAndOnlyForwardedVariables) {
  FakeSsh ssh;
  setenv("KOLO_TIMEOUT", "9", 1);
  setenv("HOROVOD_CYCLE_TIME", "4", 1);
  setenv("KOLORUN_EXPORTED", "yes", 1);
  setenv("KOLORUN_NOT_FORWARDED", "leak", 1);
  auto r = runKolorun(concat(
      concat({"-np", "4"}, ssh.args("198.51.100.1:2,198.51.100.2:2")),
      {"-x", "KOLORUN_EXPORTED", "-x", "SET=v w", "sh", "-c",
       "echo \"$KOLO_RANK $KOLO_SIZE $KOLO_LOCAL_RANK $KOLO_LOCAL_SIZE $KOLO_CROSS_RANK "
       "$KOLO_CROSS_SIZE $KOLO_HOST_ID $KOLO_IFACE $KOLO_TIMEOUT $KOLORUN_EXPORTED "
       "[$SET] [$KOLORUN_NOT_FORWARDED] $HOROVOD_CYCLE_TIME $KOLO_RENDEZVOUS $(pwd)\""}));
  unsetenv("KOLO_TIMEOUT");
  unsetenv("HOROVOD_CYCLE_TIME");
  unsetenv("KOLORUN_EXPORTED");
  unsetenv("KOLORUN_NOT_FORWARDED");
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  const std::string cwd = std::filesystem::current_path().string();
  const char* want[] = {"[0] 0 4 0 2 0 2 198.51.100.1 lo 9 yes [v w] [] 4 tcp://",
                        "[1] 1 4 1 2 0 2 198.51.100.1 lo 9 yes [v w] [] 4 tcp://",
                        "[2] 2 4 0 2 1 2 198.51.100.2 lo 9 yes [v w] [] 4 tcp://",
                        "[3] 3 4 1 2 1 2 198.51.100.2 lo 9 yes [v w] [] 4 tcp://"};
  for (const char* w : want) EXPECT_TRUE(contains(r.out, w)) << w << "\n" << describe(r);
  EXPECT_TRUE(contains(r.out, " " + cwd + "\n")) << describe(r);
  // Probe + one call per rank, each "ARGS... HOST LINE": 4 arguments.
  auto calls = ssh.calls();
  EXPECT_EQ(calls.size(), 6u);
  int onFirst = 0;
  for (const auto& c : calls) {
    EXPECT_EQ(c.rfind("4|-p|22|198.51.100.", 0), 0u) << c;
    onFirst += contains(c, "|198.51.100.1");
  }
  EXPECT_EQ(onFirst, 3);  // probe + 2 ranks
}

TEST(KolorunHostsTest, HorovodTuningFlagsReachRemoteRanks) {
  FakeSsh ssh;
  auto r = runKolorun(
      concat(concat({"-np", "2", "--autotune", "--timeline-filename", "/tmp/tl.json"},
                    ssh.args("198.51.100.1:1,198.51.100.2:1")),
             {"sh", "-c", "echo $KOLO_RANK $KOLO_AUTOTUNE $KOLO_TIMELINE"}));
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] 0 1 /tmp/tl.json\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] 1 1 /tmp/tl.json\n")) << describe(r);
}

TEST(KolorunHostsTest, SecretReachesRemoteRanksButNoCommandLine) {
  FakeSsh ssh;
  auto r =
      runKolorun(concat(concat({"-np", "2"}, ssh.args("198.51.100.1:1,198.51.100.2:1")),
                        {"sh", "-c", "echo secret=$KOLO_JOB_SECRET"}));
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  const std::string secret = secretOf(r.out, 0);
  EXPECT_EQ(secret.size(), 64u) << describe(r);
  EXPECT_EQ(secretOf(r.out, 1), secret) << describe(r);
  for (const auto& c : ssh.calls()) EXPECT_EQ(c.find(secret), std::string::npos) << c;
}

TEST(KolorunHostsTest, ThisHostInTheListIsStartedWithoutSsh) {
  FakeSsh ssh;
  auto r = runKolorun(concat(concat({"-np", "3"}, ssh.args("localhost:1,198.51.100.1:2")),
                             {"sh", "-c", "echo $KOLO_RANK $KOLO_HOST_ID"}));
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] 0 localhost\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[2] 2 198.51.100.1\n")) << describe(r);
  for (const auto& c : ssh.calls()) EXPECT_FALSE(contains(c, "localhost")) << c;
  EXPECT_EQ(ssh.calls().size(), 3u);  // probe + 2 ranks of 198.51.100.1
}

TEST(KolorunHostsTest, VerbosePrefixesHostAndRank) {
  FakeSsh ssh;
  auto r = runKolorun(
      concat(concat({"-np", "2", "--verbose"}, ssh.args("198.51.100.1:1,198.51.100.2:1")),
             {"sh", "-c", "echo hello"}));
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "[198.51.100.1:0] hello\n")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[198.51.100.2:1] hello\n")) << describe(r);
}

TEST(KolorunHostsTest, UnreachableHostIsNamedBeforeAnyRankStarts) {
  FakeSsh ssh;
  auto marker = ssh.dir.path / "started";
  auto r =
      runKolorun(concat(concat({"-np", "2"}, ssh.args("198.51.100.1:1,198.51.100.9:1")),
                        {"touch", marker.string()}));
  EXPECT_EQ(r.exitCode, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot reach host 198.51.100.9 with")) << describe(r);
  EXPECT_TRUE(contains(r.err,
                       "exited with code 255: ssh: connect to host 198.51.100.9 port 22: "
                       "No route to host"))
      << describe(r);
  EXPECT_FALSE(contains(r.err, "198.51.100.1 with")) << describe(r);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a rank started anyway";
  EXPECT_LT(r.seconds, 10.0) << describe(r);
}

TEST(KolorunHostsTest, MissingRemoteCommandIsNamed) {
  FakeSsh ssh;
  auto r = runKolorun(concat(concat({"-np", "2"}, ssh.args("198.51.100.1:2")),
                             {"kolorun-no-such-command"}));
  EXPECT_EQ(r.exitCode, 127) << describe(r);
  EXPECT_TRUE(contains(r.err, "kolorun-no-such-command: command not found on"))
      << describe(r);
}

TEST(KolorunHostsTest, RemoteRankKilledEndsTheJobAndNamesItsHost) {
  FakeSsh ssh;
  TempDir pidDir;
  auto r = runKolorun(
      concat(concat({"-np", "4"}, ssh.args("198.51.100.1:2,198.51.100.2:2")),
             {"sh", "-c",
              "sleep 300 & echo $! > " + pidDir.path.string() +
                  "/$KOLO_RANK; echo ready; "
                  "if [ $KOLO_RANK = 3 ]; then sleep 0.5; kill -9 $$; fi; wait"}),
      60);
  EXPECT_EQ(r.exitCode, 128 + SIGKILL) << describe(r);
  EXPECT_TRUE(contains(r.err, "kolorun: rank 3 on host 198.51.100.2 (pid "))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "exited with code 137 (killed by SIGKILL on its host)"))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "last lines of rank 3")) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << describe(r);
  auto sleeps = pidsIn(pidDir.path);
  EXPECT_EQ(sleeps.size(), 4u);
  expectAllGone(sleeps);
}

TEST(KolorunHostsTest, CtrlCReachesRemoteRanks) {
  FakeSsh ssh;
  bool sent = false;
  auto r =
      runKolorun(concat(concat({"-np", "2"}, ssh.args("198.51.100.1:1,198.51.100.2:1")),
                        {"sh", "-c",
                         "trap 'echo got TERM; exit 0' TERM; echo ready; "
                         "while :; do sleep 0.05; done"}),
                 30, [&](pid_t pid, const RunResult& sofar) {
                   if (!sent && lines(sofar.out).size() == 2) {
                     sent = true;
                     kill(pid, SIGINT);
                   }
                 });
  EXPECT_EQ(r.exitCode, 128 + SIGINT) << describe(r);
  EXPECT_TRUE(contains(r.out, "[0] got TERM")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[1] got TERM")) << describe(r);
  EXPECT_LT(r.seconds, 5.0) << describe(r);
}

TEST(KolorunHostsTest, KolorunKilledLeavesNothingOnTheHosts) {
  // SIGKILL gives kolorun no chance to act: the remote side notices that its
  // control stream closed and kills what the rank started.
  FakeSsh ssh;
  TempDir pidDir;
  bool sent = false;
  auto r =
      runKolorun(concat(concat({"-np", "2"}, ssh.args("198.51.100.1:1,198.51.100.2:1")),
                        {"sh", "-c",
                         "trap '' TERM; sleep 300 & echo $! > " + pidDir.path.string() +
                             "/$KOLO_RANK; echo ready; wait"}),
                 30, [&](pid_t pid, const RunResult& sofar) {
                   if (!sent && lines(sofar.out).size() == 2) {
                     sent = true;
                     kill(pid, SIGKILL);
                   }
                 });
  EXPECT_TRUE(sent) << describe(r);
  auto sleeps = pidsIn(pidDir.path);
  EXPECT_EQ(sleeps.size(), 2u);
  expectAllGone(sleeps);
}

TEST(KolorunHostsTest, CollectivesAcrossHostsUseTheirHostIds) {
  // Two ranks on each of two "hosts": shm inside a host, tcp between them,
  // the hierarchical allreduce across (by name: which algorithm the
  // selection runs there is the scale model's call). kolo-bench checks
  // every result.
  FakeSsh ssh;
  const std::string bench =
      std::string(std::getenv("KOLO_BIN_DIR") != nullptr ? std::getenv("KOLO_BIN_DIR")
                                                         : "bin") +
      "/kolo-bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << bench << " is not built";
  auto r = runKolorun(concat(concat({"-np", "4", "-x", "KOLO_LOG_LEVEL=info"},
                                    ssh.args("198.51.100.1:2,198.51.100.2:2")),
                             {bench, "-a", "hier", "-b", "1K", "-e", "1M", "-f", "32",
                              "-n", "2", "-w", "1"}),
                      120);
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_TRUE(contains(r.out + r.err, "host 0/2")) << describe(r);
  EXPECT_TRUE(contains(r.out + r.err, "transport shm+tcp")) << describe(r);
  EXPECT_TRUE(contains(r.out, " hier ")) << describe(r);
  EXPECT_FALSE(contains(r.out, "FAIL")) << describe(r);
  int ok = 0;
  for (const auto& l : lines(r.out))
    ok += l.size() > 3 && l.substr(l.size() - 3) == " ok";
  EXPECT_EQ(ok, 3) << describe(r);  // 1 KiB, 32 KiB and 1 MiB, printed by rank 0
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
