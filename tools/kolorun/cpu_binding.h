// CPU binding of ranks (kolorun --bind-to none|core|socket).
//
// kolorun decides, per host, which of the CPUs it may use (its own
// sched_getaffinity, "the allowed CPUs", in ascending order) each local
// rank gets:
//   none    nothing is bound (the default: the ranks float as before);
//   core    local rank i of L gets the allowed CPUs at positions
//           [i*C/L, (i+1)*C/L) (C allowed CPUs): contiguous blocks, every
//           CPU used, no CPU shared. With more ranks than CPUs (L > C) rank i
//           gets CPU i mod C (round-robin; kolorun -v says so once);
//   socket  the sockets (physical packages) of the allowed CPUs, in the
//           order of their first CPU, S of them: local rank i gets every
//           allowed CPU of socket i*S/L (blocks of ranks per socket, or
//           spread over the sockets when there are more sockets than ranks).
// A local rank is bound in the child between fork and exec
// (sched_setaffinity), so every thread it ever starts (torch's and OpenMP's
// pools, kolo's background thread) inherits the mask; OpenMP and torch then
// size their default thread pools to the bound CPUs. A rank on a remote host
// is bound there by the remote wrapper (bindingShellFragment()), from that
// host's own allowed CPUs, through taskset. Every bound rank gets
// KOLO_BIND_TO and KOLO_CPU_BINDING (its CPU list, "0-3,8").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kolo::kolorun {

enum class BindTo { kNone, kCore, kSocket };

// "none", "core" or "socket" (mpirun's spellings); anything else throws
// UsageError naming `flag` and the accepted values.
BindTo parseBindTo(std::string_view flag, const std::string& text);
const char* bindToName(BindTo bind);

// The CPUs this process may run on, ascending, each with its socket.
struct CpuTopology {
  std::vector<int> cpus;     // sched_getaffinity of this process
  std::vector<int> sockets;  // physical_package_id of each (0 when unknown)
};
CpuTopology readCpuTopology();

// The CPUs of local rank `localRank` of `localSize` under `bind` (empty for
// kNone). `wrapped` is set when there are more ranks than CPUs (core).
std::vector<int> cpusForRank(BindTo bind, int localRank, int localSize,
                             const CpuTopology& topology, bool* wrapped = nullptr);

// "0-3,8,10-11" for {0,1,2,3,8,10,11}.
std::string formatCpuList(const std::vector<int>& cpus);

// POSIX sh for the remote wrapper (remote_launch.cc), run after the rank's
// variables are exported and before "$@" runs: under KOLO_BIND_TO=core or
// socket it computes the rank's CPUs exactly as cpusForRank() does, from
// KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE and that host's Cpus_allowed_list,
// exports KOLO_CPU_BINDING and prefixes the command with `taskset -c LIST`
// (exit 127 naming the host when taskset is missing).
std::string_view bindingShellFragment();

}  // namespace kolo::kolorun
