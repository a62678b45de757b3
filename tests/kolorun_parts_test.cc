// Unit tests of kolorun's parts: host lists, placement, option checks, the
// mpirun translation and the remote command line run by a real sh. The
// policy for jobs with servers or a study: kolorun_server_job_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/settings.h"
#include "host_list.h"
#include "kolo/error.h"
#include "kolorun_args.h"
#include "mpi_launch.h"
#include "options.h"
#include "placement.h"
#include "remote_launch.h"

namespace kolo::kolorun {
namespace {

std::string hostErrorOf(const std::string& list) {
  try {
    parseHostList(list);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HostListTest, ParsesHostsAndSlots) {
  auto hosts = parseHostList("node1:4,10.0.0.2,node3:2,[fe80::1]:3");
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "10.0.0.2");
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(hosts[2].slots, 2);
  EXPECT_EQ(hosts[3].host, "fe80::1");
  EXPECT_EQ(hosts[3].slots, 3);
}

TEST(HostListTest, BadEntriesAreNamed) {
  EXPECT_NE(hostErrorOf("a:0").find("-H entry 1"), std::string::npos);
  EXPECT_NE(hostErrorOf("a:0").find("slots must be a positive integer, got '0'"),
            std::string::npos);
  EXPECT_NE(hostErrorOf("a:2,b:x").find("-H entry 2"), std::string::npos);
  EXPECT_NE(hostErrorOf("a:2,,b").find("empty"), std::string::npos);
  EXPECT_NE(hostErrorOf("a:2,b:").find("missing slots"), std::string::npos);
  EXPECT_NE(hostErrorOf("a:2,a:1").find("host 'a' is listed twice"), std::string::npos);
  EXPECT_NE(hostErrorOf("fe80::1:2").find("[ADDR]:SLOTS"), std::string::npos);
  EXPECT_NE(hostErrorOf("a b:2").find("not a host name"), std::string::npos);
  EXPECT_NE(hostErrorOf("").find("empty host list"), std::string::npos);
}

TEST(HostListTest, HostfileFormsAndErrors) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kolorun_hosts_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good").string();
  std::ofstream(good) << "# cluster\n\nnode1 slots=4\nnode2:2   # two\n  node3\n"
                         "node4 slots=2 max_slots=8\n";
  auto hosts = parseHostfile(good);
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_EQ(hosts[3].slots, 2);

  const std::string bad = (dir / "bad").string();
  std::ofstream(bad) << "node1 slots=4\nnode2 cpus=3\n";
  try {
    parseHostfile(bad);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpus=3"), std::string::npos) << e.what();
  }
  const std::string empty = (dir / "empty").string();
  std::ofstream(empty) << "# nothing\n";
  EXPECT_THROW(parseHostfile(empty), UsageError);
  EXPECT_THROW(parseHostfile((dir / "missing").string()), UsageError);
  std::filesystem::remove_all(dir);
}

TEST(PlacementTest, RanksFillHostsInOrder) {
  auto options = parse({"-np", "5", "-H", "a:2,b:2,c:2", "prog"});
  auto p = planPlacement(options);
  ASSERT_EQ(p.size(), 5u);
  const char* hosts[] = {"a", "a", "b", "b", "c"};
  const int local[] = {0, 1, 0, 1, 0};
  const int localSize[] = {2, 2, 2, 2, 1};
  const int cross[] = {0, 0, 1, 1, 2};
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(p[r].rank, r);
    EXPECT_EQ(p[r].size, 5);
    EXPECT_EQ(p[r].host, hosts[r]) << "rank " << r;
    EXPECT_EQ(p[r].localRank, local[r]) << "rank " << r;
    EXPECT_EQ(p[r].localSize, localSize[r]) << "rank " << r;
    EXPECT_EQ(p[r].crossRank, cross[r]) << "rank " << r;
    EXPECT_EQ(p[r].crossSize, 3) << "rank " << r;
  }
}

TEST(PlacementTest, UnusedHostsAreNotInTheJob) {
  auto p = planPlacement(parse({"-np", "3", "-H", "a:2,b:2,c:2", "prog"}));
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].host, "b");
  EXPECT_EQ(p[2].localSize, 1);
  for (const auto& r : p) EXPECT_EQ(r.crossSize, 2);
}

TEST(PlacementTest, OversubscribeDealsTheExcessInTurn) {
  auto p = planPlacement(parse({"-np", "7", "--oversubscribe", "-H", "a:2,b:1", "prog"}));
  ASSERT_EQ(p.size(), 7u);
  int onA = 0;
  for (const auto& r : p) onA += r.host == "a";
  EXPECT_EQ(onA, 4);  // 2 slots + 2 of the 4 extra (a, b, a, b)
  EXPECT_EQ(p[3].host, "a");
  EXPECT_EQ(p[3].localRank, 3);
  EXPECT_EQ(p[4].host, "b");
  EXPECT_EQ(p[4].localRank, 0);
  EXPECT_EQ(p[6].localSize, 3);
}

TEST(PlacementTest, WithoutHostsAllRanksAreLocal) {
  auto p = planPlacement(parse({"-np", "3", "prog"}));
  for (const auto& r : p) {
    EXPECT_EQ(r.host, "");
    EXPECT_EQ(r.localRank, r.rank);
    EXPECT_EQ(r.localSize, 3);
    EXPECT_EQ(r.crossSize, 1);
  }
}

TEST(PlacementTest, EnvironmentNamesTheHost) {
  auto options = parse({"-np", "2", "-H", "n1:1,n2:1", "--network-interface", "eth1",
                        "-x", "A=1", "prog"});
  auto p = planPlacement(options);
  JobIdentity job{"tcp://10.0.0.1:5000", "job-1", options.networkInterface, ""};
  auto env = rankEnvironment({"KOLO_TIMEOUT=7"}, options.exports, p[1], job);
  auto has = [&](const std::string& e) {
    return std::find(env.begin(), env.end(), e) != env.end();
  };
  EXPECT_TRUE(has("KOLO_TIMEOUT=7"));
  EXPECT_TRUE(has("A=1"));
  EXPECT_TRUE(has("KOLO_RANK=1"));
  EXPECT_TRUE(has("KOLO_LOCAL_RANK=0"));
  EXPECT_TRUE(has("KOLO_CROSS_RANK=1"));
  EXPECT_TRUE(has("KOLO_CROSS_SIZE=2"));
  EXPECT_TRUE(has("KOLO_HOST_ID=n2"));
  EXPECT_TRUE(has("KOLO_IFACE=eth1"));
  EXPECT_TRUE(has("KOLO_RENDEZVOUS=tcp://10.0.0.1:5000"));
}

TEST(OptionsTest, HostOptionErrors) {
  EXPECT_NE(usageErrorOf({"-np", "5", "-H", "a:2,b:2", "prog"})
                .find("-np 5 is more ranks than the 4 slots of 2 host(s)"),
            std::string::npos);
  EXPECT_EQ(usageErrorOf({"-np", "5", "--oversubscribe", "-H", "a:2,b:2", "prog"}),
            "(no error)");
  EXPECT_NE(usageErrorOf({"-np", "2", "-H", "a:2", "--hostfile", "f", "prog"})
                .find("either -H or --hostfile"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "-H", "a:2", "--start-timeout", "0", "prog"})
                .find("--start-timeout"),
            std::string::npos);
  EXPECT_NE(
      usageErrorOf({"-np", "2", "--ssh-command", " ", "prog"}).find("--ssh-command"),
      std::string::npos);
  EXPECT_NE(usageErrorOf({"-np", "2", "-H", "a:zz", "prog"}).find("-H entry 1"),
            std::string::npos);
}

// ---- horovodrun's command line ------------------------------------------------

// Every tuning flag of horovodrun and the KOLO_ export it becomes.
TEST(HorovodFlagsTest, TuningFlagsBecomeKoloExports) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--fusion-threshold-mb", "32"}, "KOLO_FUSION_THRESHOLD=33554432"},  // MiB
      {{"--fusion-threshold-mb=0"}, "KOLO_FUSION_THRESHOLD=0"},
      {{"--cycle-time-ms", "2.5"}, "KOLO_CYCLE_TIME=2.5"},
      {{"--cache-capacity", "256"}, "KOLO_CACHE_CAPACITY=256"},
      {{"--hierarchical-allreduce"}, "KOLO_HIERARCHICAL_ALLREDUCE=1"},
      {{"--no-hierarchical-allreduce"}, "KOLO_HIERARCHICAL_ALLREDUCE=0"},
      {{"--autotune"}, "KOLO_AUTOTUNE=1"},
      {{"--no-autotune"}, "KOLO_AUTOTUNE=0"},
      {{"--autotune-log-file", "tune.csv"}, "KOLO_AUTOTUNE_LOG=tune.csv"},
      {{"--autotune-warmup-samples", "3"}, "KOLO_AUTOTUNE_WARMUP_SAMPLES=3"},
      {{"--autotune-steps-per-sample", "10"}, "KOLO_AUTOTUNE_STEPS_PER_SAMPLE=10"},
      {{"--timeline-filename", "/tmp/tl.json"}, "KOLO_TIMELINE=/tmp/tl.json"},
      {{"--timeline-mark-cycles"}, "KOLO_TIMELINE_MARK_CYCLES=1"},
      {{"--no-timeline-mark-cycles"}, "KOLO_TIMELINE_MARK_CYCLES=0"},
      {{"--no-stall-check"}, "KOLO_STALL_CHECK_DISABLE=1"},
      {{"--stall-check"}, "KOLO_STALL_CHECK_DISABLE=0"},
      {{"--stall-check-warning-time-seconds", "20"}, "KOLO_STALL_WARNING=20"},
      {{"--stall-check-shutdown-time-seconds", "90"}, "KOLO_STALL_SHUTDOWN=90"},
      {{"--gloo-timeout-seconds", "45"}, "KOLO_TIMEOUT=45"},
      {{"--log-level", "TRACE"}, "KOLO_LOG_LEVEL=debug"},
      {{"--log-level", "DEBUG"}, "KOLO_LOG_LEVEL=debug"},
      {{"--log-level", "INFO"}, "KOLO_LOG_LEVEL=info"},
      {{"--log-level", "warning"}, "KOLO_LOG_LEVEL=warning"},
      {{"--log-level", "ERROR"}, "KOLO_LOG_LEVEL=error"},
      {{"--log-level", "FATAL"}, "KOLO_LOG_LEVEL=error"},
  };
  for (const auto& [flags, expected] : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("prog");
    const auto options = parse(args);
    EXPECT_EQ(options.exports, std::vector<std::string>{expected}) << flags[0];
    EXPECT_TRUE(options.notes.empty()) << flags[0];
    EXPECT_EQ(options.command, std::vector<std::string>{"prog"}) << flags[0];
  }
}

TEST(HorovodFlagsTest, TuningFlagsReachTheRanksAndTheLastWins) {
  auto options = parse({"-np", "2", "-x", "KOLO_CYCLE_TIME=3", "--cycle-time-ms", "5",
                        "--autotune", "prog"});
  auto p = planPlacement(options);
  JobIdentity job{"tcp://127.0.0.1:5000", "job-1", "", ""};
  // A local rank (kolorun's environment) and a remote one (only KOLO_*).
  for (const auto& base : {std::vector<std::string>{"KOLO_CYCLE_TIME=9", "HOME=/"},
                           std::vector<std::string>{"KOLO_CYCLE_TIME=9"}}) {
    auto env = rankEnvironment(base, options.exports, p[1], job);
    EXPECT_EQ(std::count(env.begin(), env.end(), "KOLO_CYCLE_TIME=5"), 1);
    EXPECT_EQ(std::count(env.begin(), env.end(), "KOLO_AUTOTUNE=1"), 1);
    for (const auto& e : env) EXPECT_NE(e, "KOLO_CYCLE_TIME=9");
  }
}

TEST(HorovodFlagsTest, SpellingsOfKolorunsOwnFlags) {
  const std::string hostfile = ::testing::TempDir() + "kolorun_hvd_hosts";
  std::ofstream(hostfile) << "a slots=2\nb slots=2\n";
  auto o = parse({"--num-proc", "3", "--output-filename", "logs", "--network-interfaces",
                  "eth1", "--network-interface", "eth1", "-p", "2222", "-i",
                  "/keys/my key", "--start-timeout", "12", "--verbose", "--gloo",
                  "-hostfile", hostfile, "prog"});
  std::remove(hostfile.c_str());
  EXPECT_EQ(o.numRanks, 3);
  EXPECT_EQ(o.hosts.size(), 2u);
  EXPECT_EQ(o.outputDir, "logs");
  EXPECT_EQ(o.networkInterface, "eth1");
  EXPECT_EQ(o.startTimeoutSeconds, 12);
  EXPECT_TRUE(o.verbose);
  EXPECT_FALSE(o.mpi);
  EXPECT_TRUE(o.sshCommandGiven);
  EXPECT_EQ(o.sshCommand, "ssh -o BatchMode=yes -p 2222 -i '/keys/my key'");
  EXPECT_EQ(splitCommandWords(o.sshCommand).back(), "/keys/my key");
  auto custom = parse({"-np", "1", "--ssh-port=22", "--ssh-command", "my-ssh",
                       "--ssh-identity-file", "id", "prog"});
  EXPECT_EQ(custom.sshCommand, "my-ssh -p 22 -i id");
  auto hosts = parse({"-np", "2", "--hosts", "a:1,b:1", "prog"});
  EXPECT_EQ(hosts.hosts.size(), 2u);
}

TEST(HorovodFlagsTest, FlagsThatChangeNothingAreAcceptedWithANote) {
  const std::vector<std::vector<std::string>> noted = {
      {"--autotune-bayes-opt-max-samples", "20"},
      {"--autotune-gaussian-process-noise", "0.8"},
      {"--hierarchical-allgather"},
      {"--torus-allreduce"},
      {"--num-nccl-streams", "2"},
      {"--thread-affinity", "1"},
      {"--tcp"},
      {"--disable-cache"},
  };
  for (const auto& flags : noted) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("prog");
    const auto o = parse(args);
    ASSERT_EQ(o.notes.size(), 1u) << flags[0];
    EXPECT_EQ(o.notes[0].rfind(flags[0] + " has no effect: ", 0), 0u) << o.notes[0];
    EXPECT_TRUE(o.exports.empty()) << flags[0];
  }
  // Those asking for what kolo does anyway: honoured, nothing to say.
  const auto o = parse({"-np", "2", "--no-hierarchical-allgather", "--no-torus-allreduce",
                        "--no-mpi-threads-disable", "--log-without-timestamp",
                        "--log-hide-timestamp", "prog"});
  EXPECT_TRUE(o.notes.empty());
  EXPECT_TRUE(o.exports.empty());
}

TEST(HorovodFlagsTest, FlagsKolorunCannotHonourAreErrorsNamingThem) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--config-file", "c.yaml"},
       "--config-file is not supported: kolorun reads no YAML"},
      {{"-cb"}, "-cb is not supported"},
      {{"--check-build"}, "--check-build is not supported"},
      {{"--jsrun"},
       "--jsrun is not supported: inside an LSF allocation kolorun takes its hosts"},
      {{"--mpi-threads-disable"}, "--mpi-threads-disable is not supported"},
      {{"--log-with-timestamp"}, "--log-with-timestamp is not supported: kolo's log"},
      {{"--no-log-hide-timestamp"}, "--no-log-hide-timestamp is not supported"},
      {{"--prefix-output-with-timestamp"}, "--prefix-output-with-timestamp is not"},
      {{"-prefix-timestamp"}, "-prefix-timestamp is not supported"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("prog");
    const std::string error = usageErrorOf(args);
    EXPECT_EQ(error.rfind(message, 0), 0u) << flags[0] << ": " << error;
  }
}

TEST(HorovodFlagsTest, BadValuesAndCombinationsAreErrors) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--min-np", "3"}, "--min-np 3 is more than -np 2"},
      {{"--min-num-proc=0"}, "--min-num-proc expects a positive integer"},
      {{"--max-np", "1"}, "--max-np 1 is less than -np 2"},
      {{"--min-np", "1", "--servers", "1"}, "--servers cannot be combined with elastic"},
      {{"--min-np", "1", "--mpi"}, "--mpi cannot be combined with elastic"},
      {{"--elastic-timeout", "soon"}, "--elastic-timeout expects a non-negative number"},
      {{"--reset-limit", "-1"}, "--reset-limit expects a non-negative integer"},
      {{"--min-np", "1", "-H", "a:2", "--host-discovery-script", "d.sh"},
       "give either --host-discovery-script or -H"},
      {{"--slots-per-host", "0"}, "--slots-per-host expects a positive integer"},
      {{"--blacklist-cooldown-range", "10", "soon"},
       "--blacklist-cooldown-range expects a non-negative number of seconds, got 'soon'"},
      {{"--blacklist-cooldown-range", "10", "5"},
       "--blacklist-cooldown-range 10 5: the upper"},
      {{"--fusion-threshold-mb", "-1"}, "--fusion-threshold-mb expects a non-negative"},
      {{"--fusion-threshold-mb", "1.5"}, "got '1.5'"},
      {{"--fusion-threshold-mb", "99999999999999999"}, "too large"},
      {{"--cycle-time-ms", "fast"}, "--cycle-time-ms expects a non-negative number"},
      {{"--cache-capacity", "x"}, "--cache-capacity expects a non-negative integer"},
      {{"--autotune-warmup-samples", "-3"}, "--autotune-warmup-samples expects"},
      {{"--autotune-gaussian-process-noise", "2"}, "a number in [0, 1], got '2'"},
      {{"--autotune-bayes-opt-max-samples", "many"}, "got 'many'"},
      {{"--stall-check-warning-time-seconds", "1m"}, "got '1m'"},
      {{"--log-level", "verbose"}, "--log-level expects TRACE, DEBUG"},
      {{"--timeline-filename="}, "--timeline-filename needs a file name"},
      {{"--ssh-port", "0"}, "--ssh-port expects a port number (1..65535), got '0'"},
      {{"-p", "70000"}, "-p expects a port number"},
      {{"--network-interfaces", "eth0,eth1"}, "got eth0,eth1: name one of them"},
      {{"--network-interface", "eth0", "--network-interface", "eth1"}, "name one"},
      {{"--network-interfaces", ","}, "needs an interface name"},
      {{"--gloo", "--mpi"}, "give either --gloo or --mpi, not both"},
      {{"--mpi", "--gloo"}, "give either --gloo or --mpi, not both"},
      {{"--mpi-args", "--map-by core"}, "--mpi-args needs --mpi"},
      {{"--mpi", "--mpi-args", " "}, "--mpi-args needs flags for mpirun"},
      {{"--mpi", "--mpi-args", "'open"}, "--mpi-args: unbalanced '"},
      {{"--autotune=1"}, "option --autotune takes no value"},
      {{"--fusion-threshold-mb"}, "option --fusion-threshold-mb needs a value"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (flags[0] != "--fusion-threshold-mb" || flags.size() > 1) args.push_back("prog");
    const std::string error = usageErrorOf(args);
    EXPECT_NE(error.find(message), std::string::npos) << flags[0] << ": " << error;
  }
}

TEST(MpiLaunchTest, CarriesHorovodFlags) {
  auto options =
      parse({"--mpi", "-np", "2", "-H", "a:1,b:1", "-p", "2222", "--fusion-threshold-mb",
             "8", "--mpi-args=--map-by core -v", "prog"});
  auto argv = mpirunCommand(options, {}, false);
  std::string line;
  for (const auto& a : argv) line += "<" + a + ">";
  for (const char* expected :
       {"<--mca><plm_rsh_agent><ssh -o BatchMode=yes -p 2222>",
        "<-x><KOLO_FUSION_THRESHOLD=8388608>", "<--map-by><core><-v><prog>"}) {
    EXPECT_NE(line.find(expected), std::string::npos) << expected << " in " << line;
  }
}

TEST(MpiLaunchTest, TranslatesTheOptions) {
  auto options = parse({"-np", "4", "-H", "a:2,b:2", "--ssh-command", "my-ssh -p 2",
                        "--network-interface", "eth1", "--output-dir", "out", "--timeout",
                        "9.5", "-x", "FOO=1", "prog", "arg"});
  auto argv = mpirunCommand(
      options, {"KOLO_TIMEOUT=5", "HOME=/root", "HOROVOD_CYCLE_TIME=2"}, true);
  std::string line;
  for (const auto& a : argv) line += "<" + a + ">";
  EXPECT_EQ(argv.front(), "mpirun");
  for (const char* expected :
       {"<--allow-run-as-root>", "<-np><4>", "<-H><a:2,b:2>",
        "<--mca><plm_rsh_agent><my-ssh -p 2>", "<--mca><btl_tcp_if_include><eth1>",
        "<-x><KOLO_IFACE=eth1>", "<--output-filename><out>", "<--timeout><10>",
        "<-x><KOLO_TIMEOUT>", "<-x><HOROVOD_CYCLE_TIME>", "<-x><FOO=1>",
        "<--bind-to><none>", "<prog><arg>"}) {
    EXPECT_NE(line.find(expected), std::string::npos) << expected << " in " << line;
  }
  EXPECT_EQ(line.find("HOME"), std::string::npos) << line;
  EXPECT_EQ(line.find("--oversubscribe"), std::string::npos) << line;
  EXPECT_EQ(argv.back(), "arg");

  auto local = mpirunCommand(parse({"-np", "3", "prog"}), {}, false);
  std::string l2;
  for (const auto& a : local) l2 += "<" + a + ">";
  EXPECT_NE(l2.find("<--oversubscribe>"), std::string::npos) << l2;
  EXPECT_EQ(l2.find("allow-run-as-root"), std::string::npos) << l2;
}

TEST(RemoteLaunchTest, SplitsSshCommandWords) {
  auto w = splitCommandWords("ssh -o 'ProxyCommand=a b' -p \"22\"");
  ASSERT_EQ(w.size(), 5u);
  EXPECT_EQ(w[2], "ProxyCommand=a b");
  EXPECT_EQ(w[4], "22");
  EXPECT_THROW(splitCommandWords("ssh 'open"), UsageError);
}

TEST(RemoteLaunchTest, LocalHostDetection) {
  EXPECT_TRUE(isLocalHost("localhost"));
  EXPECT_TRUE(isLocalHost("127.0.0.1"));
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  EXPECT_TRUE(isLocalHost(name));
  EXPECT_FALSE(isLocalHost("198.51.100.77"));  // TEST-NET-2, never ours here
}

// Runs `line` as a remote login shell would (sh -c LINE) with a control
// pipe on stdin; returns {exit status, output}.
struct RemoteRun {
  pid_t pid = -1;
  int controlFd = -1;
  int outFd = -1;
};

RemoteRun startRemote(const std::string& line) {
  int control[2];
  int out[2];
  EXPECT_EQ(pipe(control), 0);
  EXPECT_EQ(pipe(out), 0);
  RemoteRun run;
  run.pid = fork();
  if (run.pid == 0) {
    setpgid(0, 0);
    dup2(control[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(control[1]);
    close(out[0]);
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(control[0]);
  close(out[1]);
  run.controlFd = control[1];
  run.outFd = out[0];
  return run;
}

// Processes of group `pgid` that are not zombies.
int liveMembersOfGroup(pid_t pgid) {
  int live = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    if (!stat || !std::getline(stat, text)) continue;
    auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    long group = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %ld %ld", &state, &ppid, &group) !=
        3) {
      continue;
    }
    if (group == pgid && state != 'Z' && state != 'X') ++live;
  }
  return live;
}

std::pair<int, std::string> finishRemote(RemoteRun& run) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(run.outFd, buf, sizeof buf)) > 0) text.append(buf, n);
  close(run.outFd);
  if (run.controlFd >= 0) close(run.controlFd);
  int status = 0;
  waitpid(run.pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text};
}

TEST(RemoteLaunchTest, LineSetsEnvironmentDirectoryAndQuotesArguments) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  std::string line = remoteCommandLine(
      dir, {"KOLO_RANK=3", "ODD=it's a \"test\" $HOME"},
      {"sh", "-c", "echo \"$KOLO_RANK|$ODD|$(pwd)|$1|$2\"", "x", "a b'c", "$PATH"});
  auto run = startRemote(line);
  auto [code, out] = finishRemote(run);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "3|it's a \"test\" $HOME|" + dir + "|a b'c|$PATH\n");
}

TEST(RemoteLaunchTest, SecretTravelsOnTheControlStreamNotTheCommandLine) {
  const std::string secret = "s3cret-value-of-the-job";
  std::string line = remoteCommandLine(
      "/", {"KOLO_RANK=1", "KOLO_JOB_SECRET=" + secret},
      {"sh", "-c",
       "echo \"$KOLO_RANK|$KOLO_JOB_SECRET|${KOLO_JOB_SECRET_STDIN-unset}\""});
  EXPECT_EQ(line.find(secret), std::string::npos) << line;  // not visible in ps
  auto run = startRemote(line);
  std::string first = secret + "\n";
  ASSERT_EQ(write(run.controlFd, first.data(), first.size()),
            static_cast<ssize_t>(first.size()));
  auto [code, out] = finishRemote(run);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "1|" + secret + "|unset\n");
}

TEST(RemoteLaunchTest, ExitStatusAndMissingCommand) {
  auto run = startRemote(remoteCommandLine("/", {}, {"sh", "-c", "exit 7"}));
  EXPECT_EQ(finishRemote(run).first, 7);
  auto missing = startRemote(remoteCommandLine("/", {}, {"no-such-command-kolo"}));
  auto [code, out] = finishRemote(missing);
  EXPECT_EQ(code, 127);
  EXPECT_NE(out.find("no-such-command-kolo: command not found on"), std::string::npos)
      << out;
  auto nodir = startRemote(remoteCommandLine("/no/such/dir", {}, {"true"}));
  auto [code2, out2] = finishRemote(nodir);
  EXPECT_EQ(code2, 0);
  EXPECT_NE(out2.find("has no directory /no/such/dir"), std::string::npos) << out2;
}

TEST(RemoteLaunchTest, ControlLineSignalsTheRank) {
  auto run = startRemote(remoteCommandLine(
      "/", {},
      {"sh", "-c",
       "trap 'echo got-term; exit 9' TERM; echo up; while :; do sleep 0.05; done"}));
  char buf[3];
  ASSERT_EQ(read(run.outFd, buf, 3), 3);  // "up\n": the trap is set
  std::string word = remoteSignalName(SIGINT) + "\n";
  ASSERT_EQ(write(run.controlFd, word.data(), word.size()),
            static_cast<ssize_t>(word.size()));
  auto [code, out] = finishRemote(run);
  EXPECT_EQ(code, 9);
  EXPECT_NE(out.find("got-term"), std::string::npos) << out;
}

TEST(RemoteLaunchTest, ClosedControlKillsEverythingTheRankStarted) {
  // The rank ignores TERM and starts a grandchild; closing the control
  // stream must still end both.
  const std::string marker = "kolo-remote-" + std::to_string(getpid());
  auto run = startRemote(remoteCommandLine(
      "/", {}, {"sh", "-c", "trap '' TERM; sleep 300 & echo up; wait", marker}));
  char buf[3];
  ASSERT_EQ(read(run.outFd, buf, 3), 3);
  close(run.controlFd);
  run.controlFd = -1;
  auto start = std::chrono::steady_clock::now();
  auto [code, out] = finishRemote(run);
  EXPECT_EQ(code, 128 + SIGKILL) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Nothing of the group is left running (members reparented to init may
  // linger a moment as zombies until it reaps them).
  EXPECT_EQ(liveMembersOfGroup(run.pid), 0) << "process group " << run.pid << " survived";
}

}  // namespace
TEST(OptionsTest, ServersSetKoloServersAndMustLeaveAWorker) {
  LaunchOptions o = parse({"--servers", "1", "-np", "3", "prog"});
  EXPECT_EQ(o.servers, 1);
  EXPECT_NE(std::find(o.exports.begin(), o.exports.end(), "KOLO_SERVERS=1"),
            o.exports.end());
  EXPECT_NE(usageErrorOf({"--servers", "3", "-np", "3", "prog"})
                .find("--servers 3 with -np 3: the servers must be fewer than the ranks"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"--servers", "-1", "-np", "3", "prog"})
                .find("--servers expects a non-negative integer, got '-1'"),
            std::string::npos);
}

TEST(OptionsTest, ValidatorsSetKoloValidatorsAndMustLeaveATrainer) {
  LaunchOptions o = parse({"--servers", "1", "--validators", "1", "-np", "4", "prog"});
  EXPECT_EQ(o.validators, 1);
  EXPECT_NE(std::find(o.exports.begin(), o.exports.end(), "KOLO_VALIDATORS=1"),
            o.exports.end());
  EXPECT_NE(usageErrorOf({"--validators", "1", "-np", "3", "prog"})
                .find("--validators 1 needs --servers S"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"--servers", "1", "--validators", "2", "-np", "3", "prog"})
                .find("--validators 2 with -np 3 and --servers 1: at least one worker "
                      "must train"),
            std::string::npos);
}

TEST(PlacementTest, JobVariableIsWhatALocalRankSees) {
  setenv("KOLO_TEST_VARIABLE", "env", 1);
  EXPECT_EQ(jobVariable({}, "KOLO_TEST_VARIABLE"), "env");
  EXPECT_EQ(
      jobVariable({"KOLO_TEST_VARIABLE=a", "KOLO_TEST_VARIABLE=b"}, "KOLO_TEST_VARIABLE"),
      "b");
  EXPECT_EQ(
      jobVariable({"KOLO_TEST_VARIABLE=a", "KOLO_TEST_VARIABLE"}, "KOLO_TEST_VARIABLE"),
      "env");
  unsetenv("KOLO_TEST_VARIABLE");
  EXPECT_EQ(jobVariable({"KOLO_TEST_VARIABLE_2=x"}, "KOLO_TEST_VARIABLE"), std::nullopt);
  EXPECT_EQ(koloTimeoutSeconds({"KOLO_TIMEOUT=4.5"}), 4.5);
  EXPECT_EQ(koloTimeoutSeconds({"KOLO_TIMEOUT=-1"}), Settings{}.timeoutSeconds);
}

}  // namespace kolo::kolorun
