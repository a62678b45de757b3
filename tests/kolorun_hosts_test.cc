// Tests of kolorun's remote hosts (-H, --ssh-command), with a stand-in for
// ssh and the ranks on this machine (support/kolorun_child.h runs kolorun
// as a real child process): the remote ranks' layout and forwarded
// variables, the secret, this host without ssh, unreachable hosts, failures
// and signals across hosts, and collectives between the hosts.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/kolorun_child.h"

namespace kolo::kolorun_test {
namespace {

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

}  // namespace
}  // namespace kolo::kolorun_test
