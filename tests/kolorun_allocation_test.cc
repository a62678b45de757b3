// kolorun inside a batch allocation: Slurm's compressed lists, the LSF and
// Slurm host sources, the host selection of `kolorun -np N` without -H, and
// real launches of KOLO_BIN_DIR/kolorun under faked allocation variables
// naming this machine (docs/launching.md, "Inside an allocation").
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "allocation.h"
#include "kolo/error.h"
#include "mpi_launch.h"
#include "options.h"
#include "rendezvous/slurm_lists.h"

extern char** environ;

namespace kolo::kolorun {
namespace {

using rendezvous::expandSlurmCounts;
using rendezvous::expandSlurmHostList;
using Hosts = std::vector<std::string>;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string slurmError(const std::string& list) {
  try {
    expandSlurmHostList("SLURM_JOB_NODELIST", list);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "(no error)";
}

std::string countsError(const std::string& text) {
  try {
    expandSlurmCounts("SLURM_TASKS_PER_NODE", text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

EnvironmentLookup fakeEnvironment(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

template <typename Fn>
std::string usageErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

LaunchOptions parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"kolorun"};
  for (auto& a : args) argv.push_back(a.c_str());
  return parseArguments(static_cast<int>(argv.size()), argv.data());
}

std::string hostsOf(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (const auto& h : hosts)
    s += (s.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  return s;
}

// ------------------------------------------------------------ Slurm's lists

TEST(SlurmListsTest, ExpandsNamesRangesAndZeroPadding) {
  EXPECT_EQ(expandSlurmHostList("V", "gpu5"), Hosts({"gpu5"}));
  EXPECT_EQ(expandSlurmHostList("V", "node[01-03,07],gpu5"),
            Hosts({"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expandSlurmHostList("V", "n[8-10]"), Hosts({"n8", "n9", "n10"}));
  EXPECT_EQ(expandSlurmHostList("V", "n[098-101]"),
            Hosts({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expandSlurmHostList("V", "a,b[1-2],c"), Hosts({"a", "b1", "b2", "c"}));
  EXPECT_EQ(expandSlurmHostList("V", "x[3]"), Hosts({"x3"}));
  EXPECT_EQ(expandSlurmHostList("V", "host-[1-2].ib"), Hosts({"host-1.ib", "host-2.ib"}));
}

TEST(SlurmListsTest, SeveralBracketGroupsMultiplyLeftmostSlowest) {
  EXPECT_EQ(expandSlurmHostList("V", "rack[1-2]-n[01,03]"),
            Hosts({"rack1-n01", "rack1-n03", "rack2-n01", "rack2-n03"}));
  EXPECT_EQ(expandSlurmHostList("V", "r[1-2]n[1-2],login[7,9]"),
            Hosts({"r1n1", "r1n2", "r2n1", "r2n2", "login7", "login9"}));
}

TEST(SlurmListsTest, MalformedListsNameTheBadPart) {
  struct Case {
    std::string list, part;
  };
  for (const Case& c : std::vector<Case>{
           {"node[01-x]", "'01-x' in 'node[01-x]' is not a number or a range N-M"},
           {"node[1-3,]", "'' in 'node[1-3,]' is not a number"},
           {"node[]", "'' in 'node[]'"},
           {"node[5-3]", "'5-3' in 'node[5-3]' is a descending range"},
           {"a,node[1-2", "'node[1-2' lacks a ']'"},
           {"node1-2],b", "'node1-2]' has a ']' without '['"},
           {"n[1[2]]", "'[' inside [...]"},
           {"a,,b", "entry 2 is empty"},
           {"a,", "entry 2 is empty"},
           {"[1-2]", "'[1-2]' has no name before '['"},
           {"no de1", "'no de1' has ' ', which no host name has"},
           {"", "no host"},
           {"n[0-99999999]", "names more than 1048576 hosts"},
           {"a[1-1024]b[1-1025]", "names more than 1048576 hosts"},
       }) {
    SCOPED_TRACE(c.list);
    const std::string e = slurmError(c.list);
    EXPECT_TRUE(contains(e, "SLURM_JOB_NODELIST='" + c.list + "'")) << e;
    EXPECT_TRUE(contains(e, c.part)) << e;
  }
}

TEST(SlurmListsTest, CountsExpandRepeats) {
  EXPECT_EQ(expandSlurmCounts("V", "2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(expandSlurmCounts("V", "4"), std::vector<int>({4}));
  EXPECT_EQ(expandSlurmCounts("V", "1,36(x2)"), std::vector<int>({1, 36, 36}));
  for (const std::string bad : {"2(y3)", "2(x0)", "x", "2(x3", "2,,1", "-1", ""}) {
    SCOPED_TRACE(bad);
    const std::string e = countsError(bad);
    EXPECT_TRUE(contains(e, "SLURM_TASKS_PER_NODE='" + bad + "'")) << e;
  }
  EXPECT_TRUE(contains(countsError("2(y3)"), "'2(y3)' is not N or N(xREPEAT)"));
  EXPECT_TRUE(contains(countsError("1(x2000000)"), "more than 1048576 nodes"));
}

// ------------------------------------------------------- the host sources

TEST(AllocationTest, SlurmNodesTakeTheirTaskCounts) {
  auto a = detectAllocation(fakeEnvironment({{"SLURM_JOB_NODELIST", "node[01-03],gpu5"},
                                             {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                                             {"SLURM_JOB_CPUS_PER_NODE", "36(x4)"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->manager, "Slurm");
  EXPECT_EQ(a->variables, "SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE");
  EXPECT_EQ(hostsOf(a->hosts), "node01:2,node02:2,node03:2,gpu5:1");
  EXPECT_EQ(a->slots(), 7);
}

TEST(AllocationTest, SlurmFallsBackToCpusPerNodeAndTheOlderNodeList) {
  auto a = detectAllocation(fakeEnvironment(
      {{"SLURM_NODELIST", "c[1-2]"}, {"SLURM_JOB_CPUS_PER_NODE", "36(x2)"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->variables, "SLURM_NODELIST, SLURM_JOB_CPUS_PER_NODE");
  EXPECT_EQ(hostsOf(a->hosts), "c1:36,c2:36");
}

TEST(AllocationTest, SlurmErrorsNameTheVariables) {
  auto errorOf = [](std::map<std::string, std::string> vars) {
    return usageErrorOf([&] { detectAllocation(fakeEnvironment(vars)); });
  };
  std::string e =
      errorOf({{"SLURM_JOB_NODELIST", "n[1-4]"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}});
  EXPECT_TRUE(contains(e, "SLURM_TASKS_PER_NODE='2(x3)' gives the slots of 3 nodes"));
  EXPECT_TRUE(contains(e, "SLURM_JOB_NODELIST='n[1-4]' names 4")) << e;
  e = errorOf({{"SLURM_JOB_NODELIST", "n[1-x]"}, {"SLURM_TASKS_PER_NODE", "1"}});
  EXPECT_TRUE(contains(e, "'1-x' in 'n[1-x]'")) << e;
  e = errorOf({{"SLURM_JOB_NODELIST", "n1"}});
  EXPECT_TRUE(contains(e, "neither SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE"))
      << e;
}

TEST(AllocationTest, LsfMcpuHostsAndTheirErrors) {
  auto a = detectAllocation(fakeEnvironment({{"LSB_MCPU_HOSTS", "hostA 4 hostB 2 "}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->manager, "LSF");
  EXPECT_EQ(hostsOf(a->hosts), "hostA:4,hostB:2");
  EXPECT_TRUE(a->note.empty());
  EXPECT_TRUE(contains(usageErrorOf([] { parseLsfMcpuHosts("LSB_MCPU_HOSTS", "a 2 b"); }),
                       "LSB_MCPU_HOSTS='a 2 b': host 'b' has no slot count after it"));
  EXPECT_TRUE(contains(usageErrorOf([] { parseLsfMcpuHosts("LSB_MCPU_HOSTS", "a two"); }),
                       "'two' after host 'a' is not a slot count"));
  EXPECT_TRUE(contains(usageErrorOf([] { parseLsfMcpuHosts("LSB_MCPU_HOSTS", "a 0"); }),
                       "'0' after host 'a'"));
  EXPECT_TRUE(contains(usageErrorOf([] { parseLsfMcpuHosts("LSB_MCPU_HOSTS", "a/b 1"); }),
                       "'a/b' is not a host name"));
  EXPECT_TRUE(contains(usageErrorOf([] { parseLsfMcpuHosts("LSB_MCPU_HOSTS", " "); }),
                       "no host"));
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    path =
        (std::filesystem::temp_directory_path() /
         ("kolorun_alloc_" + std::to_string(getpid()) + "_" + std::to_string(serial++)))
            .string();
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
  static inline int serial = 0;
};

TEST(AllocationTest, LsfHostfileCountsLinesAndWinsOverMcpuHosts) {
  TempFile file("h1\nh1\nh2\n\nh1\nh3\n");
  auto a = detectAllocation(fakeEnvironment({{"LSB_DJOB_HOSTFILE", file.path},
                                             {"LSB_MCPU_HOSTS", "other 9"},
                                             {"SLURM_JOB_NODELIST", "n1"},
                                             {"SLURM_TASKS_PER_NODE", "1"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->manager, "LSF");
  EXPECT_EQ(hostsOf(a->hosts), "h1:3,h2:1,h3:1");  // order of first appearance
  TempFile bad("h1\nh2 h3\n");
  std::string e = usageErrorOf([&] { parseLsfHostfile(bad.path); });
  EXPECT_TRUE(contains(e, "LSB_DJOB_HOSTFILE='" + bad.path + "': line 2 ('h2 h3')")) << e;
  e = usageErrorOf([] { parseLsfHostfile("/nonexistent/kolo/hostfile"); });
  EXPECT_TRUE(contains(e, "'/nonexistent/kolo/hostfile': cannot read it")) << e;
}

TEST(AllocationTest, TheLaunchNodeOfIbmCsmIsLeftOut) {
  // Summit: the batch script runs on the launch node, listed first with one
  // slot; the compute nodes follow.
  TempFile file("batch3\na01n01\na01n01\na01n01\na01n02\na01n02\na01n02\n");
  auto a = detectAllocation(fakeEnvironment(
      {{"LSB_DJOB_HOSTFILE", file.path}, {"CSM_ALLOCATION_ID", "12345"}}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(hostsOf(a->hosts), "a01n01:3,a01n02:3");
  EXPECT_TRUE(contains(a->note, "launch node batch3")) << a->note;
  // Without CSM the first host is a compute host like the others.
  a = detectAllocation(fakeEnvironment({{"LSB_MCPU_HOSTS", "h1 1 h2 3"}}));
  EXPECT_EQ(hostsOf(a->hosts), "h1:1,h2:3");
  // A lone host stays, CSM or not.
  a = detectAllocation(
      fakeEnvironment({{"LSB_MCPU_HOSTS", "h1 1"}, {"CSM_ALLOCATION_ID", "1"}}));
  EXPECT_EQ(hostsOf(a->hosts), "h1:1");
}

TEST(AllocationTest, NoVariablesNoAllocation) {
  EXPECT_FALSE(detectAllocation(fakeEnvironment({})).has_value());
  EXPECT_FALSE(detectAllocation(fakeEnvironment({{"SLURM_JOB_ID", "7"}})).has_value());
}

// -------------------------------------------------------- host selection

const std::map<std::string, std::string> kSlurm = {{"SLURM_JOB_NODELIST", "n[1-2]"},
                                                   {"SLURM_TASKS_PER_NODE", "2(x2)"}};

TEST(HostSelectionTest, WithoutHostsTheAllocationIsUsedAndNamed) {
  LaunchOptions o = parse({"-np", "3", "prog"});
  const std::string line = useAllocation(o, fakeEnvironment(kSlurm));
  EXPECT_EQ(hostsOf(o.hosts), "n1:2,n2:2");
  EXPECT_EQ(line,
            "-np 3 on the Slurm allocation (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE): "
            "2 host(s), 4 slots: n1:2,n2:2");
}

TEST(HostSelectionTest, ExplicitHostsWin) {
  LaunchOptions o = parse({"-np", "3", "-H", "a:3", "prog"});
  EXPECT_EQ(useAllocation(o, fakeEnvironment(kSlurm)), "");
  EXPECT_EQ(hostsOf(o.hosts), "a:3");
  // Even with more ranks than the allocation has slots.
  o = parse({"-np", "6", "-H", "a:6", "prog"});
  EXPECT_EQ(useAllocation(o, fakeEnvironment(kSlurm)), "");
  EXPECT_EQ(hostsOf(o.hosts), "a:6");
  o = parse({"-np", "2", "--min-np", "1", "--host-discovery-script", "./d.sh", "prog"});
  EXPECT_EQ(useAllocation(o, fakeEnvironment(kSlurm)), "");
  EXPECT_TRUE(o.hosts.empty());
}

TEST(HostSelectionTest, MoreRanksThanSlotsNamesBothNumbers) {
  LaunchOptions o = parse({"-np", "5", "prog"});
  const std::string e = usageErrorOf([&] { useAllocation(o, fakeEnvironment(kSlurm)); });
  EXPECT_TRUE(contains(e,
                       "-np 5 is more ranks than the 4 slots of 2 host(s) in the Slurm "
                       "allocation"))
      << e;
  o = parse({"-np", "5", "--oversubscribe", "prog"});
  EXPECT_NE(useAllocation(o, fakeEnvironment(kSlurm)), "");
  EXPECT_EQ(hostsOf(o.hosts), "n1:2,n2:2");
}

TEST(HostSelectionTest, MpirunGetsTheAllocationsHosts) {
  LaunchOptions o = parse({"--mpi", "-np", "4", "prog"});
  ASSERT_NE(useAllocation(o, fakeEnvironment(kSlurm)), "");
  const std::vector<std::string> argv = mpirunCommand(o, {}, false);
  std::string line;
  for (const auto& a : argv) line += a + " ";
  EXPECT_TRUE(contains(line, " -H n1:2,n2:2 ")) << line;
  EXPECT_FALSE(contains(line, "--oversubscribe")) << line;
}

TEST(HostSelectionTest, LongHostListsAreShortenedInTheLine) {
  LaunchOptions o = parse({"-np", "1", "prog"});
  const std::string line =
      useAllocation(o, fakeEnvironment({{"SLURM_JOB_NODELIST", "n[1-20]"},
                                        {"SLURM_TASKS_PER_NODE", "1(x20)"}}));
  EXPECT_EQ(o.hosts.size(), 20u);
  EXPECT_TRUE(contains(line, "n8:1,... (12 more)")) << line;
}

// ------------------------------------------------------- kolorun itself

struct KolorunRun {
  int exitCode = -1;
  std::string out, err;
};

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs KOLO_BIN_DIR/kolorun with `args` and an environment without any real
// allocation's variables, plus `vars`.
KolorunRun runKolorun(const std::vector<std::string>& args,
                      const std::map<std::string, std::string>& vars) {
  const char* dir = std::getenv("KOLO_BIN_DIR");
  std::vector<std::string> argv = {std::string(dir != nullptr ? dir : "bin") + "/kolorun",
                                   "--timeout", "30"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const bool batch = entry.rfind("LSB_", 0) == 0 || entry.rfind("SLURM_", 0) == 0 ||
                       entry.rfind("CSM_", 0) == 0;
    if (!batch) env.push_back(entry);
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const TempFile out(""), err("");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.path.c_str(), O_WRONLY | O_TRUNC, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err.path.c_str(), O_WRONLY | O_TRUNC, 0);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  KolorunRun run;
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << cargv[0] << ": " << std::strerror(rc);
    return run;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  run.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = readAll(out.path);
  run.err = readAll(err.path);
  return run;
}

std::string describe(const KolorunRun& r) {
  return "exit " + std::to_string(r.exitCode) + "\n--- stdout\n" + r.out +
         "--- stderr\n" + r.err;
}

std::string thisHost() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Each rank prints "R on HOST-ID" (kolorun sets KOLO_HOST_ID to the host
// that a host list names).
const std::vector<std::string> kWhere = {"sh", "-c", "echo $KOLO_RANK on $KOLO_HOST_ID"};

std::set<std::string> linesOf(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.insert(line);
  return out;
}

TEST(KolorunAllocationTest, LsfHostsPlaceTheRanksAndTheLineSaysSo) {
  const std::string host = thisHost();
  std::vector<std::string> args = {"-np", "3"};
  args.insert(args.end(), kWhere.begin(), kWhere.end());
  const KolorunRun r =
      runKolorun(args, {{"LSB_MCPU_HOSTS", "localhost 1 " + host + " 2"}});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_EQ(linesOf(r.out),
            std::set<std::string>(
                {"[0] 0 on localhost", "[1] 1 on " + host, "[2] 2 on " + host}))
      << describe(r);
  EXPECT_TRUE(contains(r.err,
                       "kolorun: -np 3 on the LSF allocation (LSB_MCPU_HOSTS): 2 "
                       "host(s), 3 slots: localhost:1," +
                           host + ":2\n"))
      << describe(r);
}

TEST(KolorunAllocationTest, SlurmHostsPlaceTheRanks) {
  std::vector<std::string> args = {"-np", "2"};
  args.insert(args.end(), kWhere.begin(), kWhere.end());
  const KolorunRun r =
      runKolorun(args, {{"SLURM_JOB_NODELIST", "localhost," + thisHost()},
                        {"SLURM_TASKS_PER_NODE", "1(x2)"}});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_EQ(linesOf(r.out),
            std::set<std::string>({"[0] 0 on localhost", "[1] 1 on " + thisHost()}))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "kolorun: -np 2 on the Slurm allocation")) << describe(r);
}

TEST(KolorunAllocationTest, TooManyRanksAndExplicitHosts) {
  const std::map<std::string, std::string> slurm = {{"SLURM_JOB_NODELIST", "localhost"},
                                                    {"SLURM_TASKS_PER_NODE", "2"}};
  std::vector<std::string> args = {"-np", "3"};
  args.insert(args.end(), kWhere.begin(), kWhere.end());
  KolorunRun r = runKolorun(args, slurm);
  EXPECT_EQ(r.exitCode, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "-np 3 is more ranks than the 2 slots")) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
  // -H wins: no line about the allocation, ranks where -H says.
  args = {"-np", "3", "-H", "127.0.0.1:3"};
  args.insert(args.end(), kWhere.begin(), kWhere.end());
  r = runKolorun(args, slurm);
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_FALSE(contains(r.err, "allocation")) << describe(r);
  EXPECT_EQ(linesOf(r.out),
            std::set<std::string>(
                {"[0] 0 on 127.0.0.1", "[1] 1 on 127.0.0.1", "[2] 2 on 127.0.0.1"}))
      << describe(r);
}

}  // namespace
}  // namespace kolo::kolorun
