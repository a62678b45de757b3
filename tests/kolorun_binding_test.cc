// kolorun --bind-to (tools/kolorun/cpu_binding.h): the CPUs each local rank
// gets, the flag's parsing (and horovodrun's --binding-args), the mpirun
// translation, and real ranks' sched_getaffinity, local and on a "remote"
// host started through a fake ssh that runs the wrapper here.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cpu_binding.h"
#include "kolorun_args.h"
#include "mpi_launch.h"
#include "options.h"

namespace kolo::kolorun {
namespace {

CpuTopology topology(std::vector<int> cpus, std::vector<int> sockets = {}) {
  if (sockets.empty()) sockets.assign(cpus.size(), 0);
  return {std::move(cpus), std::move(sockets)};
}

std::vector<int> core(int i, int l, const CpuTopology& t, bool* wrapped = nullptr) {
  return cpusForRank(BindTo::kCore, i, l, t, wrapped);
}

using Cpus = std::vector<int>;

TEST(CpuBindingTest, CoreGivesEachRankItsBlockOfTheAllowedCpus) {
  const auto eight = topology({0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(core(0, 1, eight), Cpus({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(core(0, 2, eight), Cpus({0, 1, 2, 3}));
  EXPECT_EQ(core(1, 2, eight), Cpus({4, 5, 6, 7}));
  EXPECT_EQ(core(0, 3, eight), Cpus({0, 1}));  // [0, 8/3), [8/3, 16/3), [16/3, 8)
  EXPECT_EQ(core(1, 3, eight), Cpus({2, 3, 4}));
  EXPECT_EQ(core(2, 3, eight), Cpus({5, 6, 7}));
  bool wrapped = true;
  EXPECT_EQ(core(7, 8, eight, &wrapped), Cpus({7}));
  EXPECT_FALSE(wrapped);
  // Positions in the allowed set, not CPU numbers.
  const auto odd = topology({1, 3, 5, 7});
  EXPECT_EQ(core(1, 2, odd), Cpus({5, 7}));
  // More ranks than CPUs: one CPU each, round-robin.
  const auto two = topology({4, 9});
  EXPECT_EQ(core(0, 5, two, &wrapped), Cpus({4}));
  EXPECT_TRUE(wrapped);
  EXPECT_EQ(core(3, 5, two), Cpus({9}));
  EXPECT_EQ(core(4, 5, two), Cpus({4}));
  EXPECT_TRUE(cpusForRank(BindTo::kNone, 0, 2, eight).empty());
}

TEST(CpuBindingTest, SocketGivesEachRankAWholeSocket) {
  const auto t = topology({0, 1, 2, 3, 4, 5, 6, 7}, {1, 1, 0, 0, 1, 1, 0, 0});
  // Sockets in the order of their first CPU: 1, then 0.
  EXPECT_EQ(cpusForRank(BindTo::kSocket, 0, 2, t), Cpus({0, 1, 4, 5}));
  EXPECT_EQ(cpusForRank(BindTo::kSocket, 1, 2, t), Cpus({2, 3, 6, 7}));
  EXPECT_EQ(cpusForRank(BindTo::kSocket, 1, 4, t), Cpus({0, 1, 4, 5}));
  EXPECT_EQ(cpusForRank(BindTo::kSocket, 2, 4, t), Cpus({2, 3, 6, 7}));
  EXPECT_EQ(cpusForRank(BindTo::kSocket, 0, 1, t), Cpus({0, 1, 4, 5}));
}

TEST(CpuBindingTest, CpuListsAreWrittenAsTasksetReadsThem) {
  EXPECT_EQ(formatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(formatCpuList({5}), "5");
  EXPECT_EQ(formatCpuList({}), "");
}

TEST(CpuBindingTest, FlagValuesAndErrors) {
  EXPECT_EQ(parse({"-np", "2", "prog"}).bindTo, BindTo::kNone);
  EXPECT_EQ(parse({"-np", "2", "--bind-to", "core", "prog"}).bindTo, BindTo::kCore);
  EXPECT_EQ(parse({"-np", "2", "--bind-to=socket", "prog"}).bindTo, BindTo::kSocket);
  EXPECT_EQ(parse({"-np", "2", "-bind-to", "none", "prog"}).bindTo, BindTo::kNone);
  // horovodrun's --binding-args: mpirun's spellings of what kolorun does.
  EXPECT_EQ(
      parse({"-np", "2", "--binding-args", "-bind-to core -map-by slot", "prog"}).bindTo,
      BindTo::kCore);
  EXPECT_EQ(parse({"-np", "2", "--binding-args=--bind-to=socket", "prog"}).bindTo,
            BindTo::kSocket);
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--bind-to", "cores"}, "--bind-to expects none, core or socket, got 'cores'"},
      {{"--bind-to", ""}, "--bind-to expects none, core or socket, got ''"},
      {{"--bind-to"}, "option --bind-to needs a value"},
      {{"--binding-args", "--bind-to hwthread"},
       "--binding-args: --bind-to expects none, core or socket, got 'hwthread'"},
      {{"--binding-args", "--map-by socket"},
       "kolorun places ranks by slot (--map-by slot), got '--map-by socket'"},
      {{"--binding-args", "--report-bindings"},
       "understands only --bind-to none|core|socket and --map-by slot, got "
       "'--report-bindings'"},
      {{"--binding-args", "--bind-to"}, "--binding-args: --bind-to needs a value"},
      {{"--binding-args", " "}, "--binding-args needs binding flags"},
      {{"--bind-to", "core", "--binding-args", "--bind-to core"},
       "give either --bind-to or --binding-args, not both"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (flags.size() > 1) args.push_back("prog");
    const std::string error = usageErrorOf(args);
    EXPECT_NE(error.find(message), std::string::npos) << flags[0] << ": " << error;
  }
}

std::string mpirunLine(const std::vector<std::string>& args) {
  std::string line;
  for (const auto& a : mpirunCommand(parse(args), {}, false)) line += "<" + a + ">";
  return line;
}

TEST(CpuBindingTest, MpirunGetsTheBinding) {
  EXPECT_NE(mpirunLine({"--mpi", "-np", "2", "prog"}).find("<--bind-to><none><--map-by>"),
            std::string::npos);
  EXPECT_NE(mpirunLine({"--mpi", "-np", "2", "--bind-to", "core", "prog"})
                .find("<--bind-to><core><--map-by><slot>"),
            std::string::npos);
  // --binding-args replaces kolorun's binding flags, whatever mpirun takes.
  const auto line = mpirunLine({"--mpi", "-np", "2", "--binding-args",
                                "-bind-to socket -map-by ppr:1:socket", "prog"});
  EXPECT_NE(line.find("<-bind-to><socket><-map-by><ppr:1:socket><--tag-output>"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("<--bind-to>"), std::string::npos) << line;
}

// ---- real ranks ------------------------------------------------------------

std::string kolorunPath() {
  const char* dir = std::getenv("KOLO_BIN_DIR");
  return std::string(dir != nullptr ? dir : "bin") + "/kolorun";
}

// Runs `kolorun ARGS` (a shell line) with stderr into stdout; its exit code
// into `code`.
std::string run(const std::string& args, int& code) {
  std::string out;
  FILE* p = popen((kolorunPath() + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

// rank -> "ALLOWED|KOLO_CPU_BINDING|KOLO_BIND_TO" from lines "[R] ...".
constexpr char kReport[] =
    "sh -c 'echo \"$(sed -n \"s/^Cpus_allowed_list:[[:space:]]*//p\" /proc/self/status)"
    "|$KOLO_CPU_BINDING|$KOLO_BIND_TO\"'";

std::map<int, std::string> reports(const std::string& out) {
  std::map<int, std::string> by;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int rank = -1;
    char rest[512] = {};
    if (std::sscanf(line.c_str(), "[%d] %511[^\n]", &rank, rest) == 2) by[rank] = rest;
  }
  return by;
}

// Restricts this thread (and what it starts) to at most two of its CPUs,
// so that the checks below see more ranks than CPUs on any machine.
struct AtMostTwoCpus {
  cpu_set_t saved;
  CpuTopology topology;
  AtMostTwoCpus() {
    sched_getaffinity(0, sizeof saved, &saved);
    cpu_set_t two;
    CPU_ZERO(&two);
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; ++cpu) {
      if (CPU_ISSET(cpu, &saved)) {
        CPU_SET(cpu, &two);
        ++n;
      }
    }
    sched_setaffinity(0, sizeof two, &two);
    topology = readCpuTopology();
  }
  ~AtMostTwoCpus() { sched_setaffinity(0, sizeof saved, &saved); }
};

TEST(CpuBindingRanksTest, LocalRanksReportTheirAffinity) {
  AtMostTwoCpus limit;
  const std::string all = formatCpuList(limit.topology.cpus);
  int code = -1;
  auto out = run("-v -np 3 --bind-to core " + std::string(kReport), code);
  ASSERT_EQ(code, 0) << out;
  auto by = reports(out);
  ASSERT_EQ(by.size(), 3u) << out;
  for (int i = 0; i < 3; ++i) {
    const std::string list = formatCpuList(core(i, 3, limit.topology));
    EXPECT_EQ(by[i], list + "|" + list + "|core") << out;
  }
  // Three ranks on at most two CPUs: said once, under -v.
  size_t count = 0;
  for (size_t at = out.find("round-robin"); at != std::string::npos;
       at = out.find("round-robin", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << out;
  EXPECT_NE(out.find("rank 1 bound to CPUs " + formatCpuList(core(1, 3, limit.topology))),
            std::string::npos)
      << out;

  // One rank: all of them.
  out = run("-np 1 --bind-to core " + std::string(kReport), code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(reports(out)[0], all + "|" + all + "|core") << out;

  // Unbound (the default): every rank may use every CPU; no -v: no notes.
  out = run("-np 2 " + std::string(kReport), code);
  ASSERT_EQ(code, 0) << out;
  by = reports(out);
  EXPECT_EQ(by[0], all + "||") << out;
  EXPECT_EQ(by[1], all + "||") << out;
  out = run("-np 2 --bind-to core " + std::string(kReport), code);
  EXPECT_EQ(out.find("kolorun:"), std::string::npos) << out;

  // A bad value: the flag and the accepted values named, exit 2.
  out = run("-np 2 --bind-to cpu true", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--bind-to expects none, core or socket, got 'cpu'"),
            std::string::npos)
      << out;
}

TEST(CpuBindingRanksTest, RemoteRanksAreBoundByTheirHost) {
  AtMostTwoCpus limit;
  auto dir = std::filesystem::temp_directory_path() /
             ("kolorun_binding." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto ssh = (dir / "fake-ssh").string();
  // Runs the remote line here, with only PATH and HOME, as sshd would.
  std::ofstream(ssh) << "#!/bin/sh\nshift\nexec env -i PATH=\"$PATH\" HOME=/ sh -c "
                        "\"$1\"\n";
  std::filesystem::permissions(ssh, std::filesystem::perms::owner_all);
  const std::string hosts =
      "-H 198.51.100.1:3,198.51.100.2:2,198.51.100.3:1 --ssh-command " + ssh +
      " --network-interface lo";
  int code = -1;
  auto out = run("-np 6 " + hosts + " --bind-to core " + kReport, code);
  ASSERT_EQ(code, 0) << out;
  auto by = reports(out);
  ASSERT_EQ(by.size(), 6u) << out;
  const int localRank[] = {0, 1, 2, 0, 1, 0};
  const int localSize[] = {3, 3, 3, 2, 2, 1};
  for (int r = 0; r < 6; ++r) {
    const auto cpus = core(localRank[r], localSize[r], limit.topology);
    std::string commas;
    for (int c : cpus) commas += (commas.empty() ? "" : ",") + std::to_string(c);
    EXPECT_EQ(by[r], formatCpuList(cpus) + "|" + commas + "|core") << "rank " << r << out;
  }
  out = run("-np 2 " + hosts + " --bind-to socket " + kReport, code);
  ASSERT_EQ(code, 0) << out;
  by = reports(out);
  for (int r = 0; r < 2; ++r) {
    const auto cpus = cpusForRank(BindTo::kSocket, r, r == 0 ? 3 : 2, limit.topology);
    ASSERT_FALSE(cpus.empty());
    EXPECT_EQ(by[r].substr(0, by[r].find('|')), formatCpuList(cpus)) << out;
    EXPECT_NE(by[r].find("|socket"), std::string::npos) << out;
  }
  out = run("-np 2 " + hosts + " " + kReport, code);
  ASSERT_EQ(code, 0) << out;
  by = reports(out);
  EXPECT_EQ(by[0], formatCpuList(limit.topology.cpus) + "||") << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kolo::kolorun
