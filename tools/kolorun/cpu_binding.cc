#include "cpu_binding.h"

#include <sched.h>

#include <fstream>

#include "options.h"

namespace kolo::kolorun {
namespace {

int socketOf(int cpu) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                   "/topology/physical_package_id");
  int id = 0;
  if (!(in >> id)) id = 0;
  return id;
}

// The remote wrapper's version of cpusForRank(), in POSIX sh (dash too):
//   c  the allowed CPUs, expanded from /proc/self/status (sed inherits the
//      shell's mask);
//   socket: q pairs each CPU with its package, s lists the packages in the
//      order of their first CPU (S of them), t is package i*S/L;
//   core: positions [i*C/L, (i+1)*C/L), or i mod C when L > C;
//   then the command becomes `taskset -c LIST CMD...`.
constexpr std::string_view kShell =
    "if [ -n \"$KOLO_BIND_TO\" ] && [ \"$KOLO_BIND_TO\" != none ]; then "
    "command -v taskset >/dev/null 2>&1 || { echo \"kolorun: --bind-to $KOLO_BIND_TO "
    "needs taskset (util-linux) on $(uname -n)\" >&2; exit 127; }; "
    "c=; for r in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status "
    "| tr , ' '); do x=${r%-*}; y=${r#*-}; "
    "while [ \"$x\" -le \"$y\" ]; do c=\"$c $x\"; x=$((x+1)); done; done; "
    "i=${KOLO_LOCAL_RANK:-0}; L=${KOLO_LOCAL_SIZE:-1}; l=; "
    "if [ \"$KOLO_BIND_TO\" = socket ]; then q=; s=; S=0; t=; "
    "for x in $c; do p=$(cat /sys/devices/system/cpu/cpu$x/topology/physical_package_id "
    "2>/dev/null || echo 0); q=\"$q $x:$p\"; "
    "case \" $s \" in *\" $p \"*) ;; *) s=\"$s $p\"; S=$((S+1));; esac; done; "
    "k=$((i*S/L)); n=0; for p in $s; do [ $n -eq $k ] && t=$p; n=$((n+1)); done; "
    "for e in $q; do [ \"${e#*:}\" = \"$t\" ] && l=\"$l,${e%%:*}\"; done; "
    "else C=0; for x in $c; do C=$((C+1)); done; "
    "if [ \"$L\" -le \"$C\" ]; then a=$((i*C/L)); b=$(((i+1)*C/L)); "
    "else a=$((i%C)); b=$((a+1)); fi; "
    "n=0; for x in $c; do [ $n -ge $a ] && [ $n -lt $b ] && l=\"$l,$x\"; "
    "n=$((n+1)); done; fi; "
    "l=${l#,}; export KOLO_CPU_BINDING=\"$l\"; set -- taskset -c \"$l\" \"$@\"; fi; ";

}  // namespace

BindTo parseBindTo(std::string_view flag, const std::string& text) {
  if (text == "none") return BindTo::kNone;
  if (text == "core") return BindTo::kCore;
  if (text == "socket") return BindTo::kSocket;
  throw UsageError(std::string(flag) + " expects none, core or socket, got '" + text +
                   "'");
}

const char* bindToName(BindTo bind) {
  switch (bind) {
    case BindTo::kCore: return "core";
    case BindTo::kSocket: return "socket";
    default: return "none";
  }
}

CpuTopology readCpuTopology() {
  CpuTopology t;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return t;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    t.cpus.push_back(cpu);
    t.sockets.push_back(socketOf(cpu));
  }
  return t;
}

std::vector<int> cpusForRank(BindTo bind, int localRank, int localSize,
                             const CpuTopology& topology, bool* wrapped) {
  std::vector<int> out;
  const auto& cpus = topology.cpus;
  const long c = static_cast<long>(cpus.size());
  if (bind == BindTo::kNone || c == 0 || localSize < 1) return out;
  const long i = localRank;
  const long l = localSize;
  if (bind == BindTo::kCore) {
    if (wrapped != nullptr) *wrapped = l > c;
    if (l > c) return {cpus[static_cast<size_t>(i % c)]};
    for (long k = i * c / l; k < (i + 1) * c / l; ++k) {
      out.push_back(cpus[static_cast<size_t>(k)]);
    }
    return out;
  }
  std::vector<int> sockets;  // in the order of their first CPU
  for (int s : topology.sockets) {
    bool seen = false;
    for (int x : sockets) seen = seen || x == s;
    if (!seen) sockets.push_back(s);
  }
  const int socket =
      sockets[static_cast<size_t>(i * static_cast<long>(sockets.size()) / l)];
  for (size_t k = 0; k < cpus.size(); ++k) {
    if (topology.sockets[k] == socket) out.push_back(cpus[k]);
  }
  return out;
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t k = 0; k < cpus.size();) {
    size_t end = k;
    while (end + 1 < cpus.size() && cpus[end + 1] == cpus[end] + 1) ++end;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[k]);
    if (end > k) out += "-" + std::to_string(cpus[end]);
    k = end + 1;
  }
  return out;
}

std::string_view bindingShellFragment() {
  return kShell;
}

}  // namespace kolo::kolorun
