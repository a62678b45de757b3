// The hosts of the batch allocation kolorun runs in (LSF or Slurm), used
// when no -H / --hostfile / --host-discovery-script names any.
//
// Sources, first match wins (docs/launching.md, "Inside an allocation"):
//   LSF    LSB_DJOB_HOSTFILE: a file naming one host per line per slot
//          (a host's slots are its lines); else LSB_MCPU_HOSTS:
//          "HOST1 N1 HOST2 N2 ...". Under IBM CSM (CSM_ALLOCATION_ID set:
//          Summit, Sierra) the first host is the launch node, where the batch
//          script and kolorun run but no rank belongs; it is left out when it
//          has one slot and other hosts follow.
//   Slurm  SLURM_JOB_NODELIST (or the older SLURM_NODELIST), compressed
//          (src/rendezvous/slurm_lists.h), with the slots of each node from
//          SLURM_TASKS_PER_NODE (the tasks the allocation was asked for, as
//          Open MPI's mpirun counts them), else SLURM_JOB_CPUS_PER_NODE.
// A host's slots are summed when it appears more than once; hosts keep the
// order of their first appearance.
//
// Every malformed value is a UsageError naming the variable, its value and
// the part that is wrong.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host_list.h"
#include "options.h"

namespace kolo::kolorun {

// Reads one environment variable; nullopt when unset or empty. Tests pass
// a map; kolorun passes processEnvironment().
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string&)>;

EnvironmentLookup processEnvironment();

struct Allocation {
  std::string manager;  // "LSF" or "Slurm"
  std::string
      variables;  // what was read, e.g. "SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE"
  std::vector<HostSlots> hosts;
  std::string note;  // what was left out and why ("" when nothing)
  long slots() const;
};

// nullopt outside an allocation.
std::optional<Allocation> detectAllocation(const EnvironmentLookup& env);

// The parsers, for the tests. `name` is the variable (for messages).
std::vector<HostSlots> parseLsfHostfile(const std::string& path);
std::vector<HostSlots> parseLsfMcpuHosts(std::string_view name, std::string_view text);
std::vector<HostSlots> parseSlurmHosts(std::string_view listName, std::string_view list,
                                       std::string_view slotsName,
                                       std::string_view slots);

// Host selection: when `options` names no hosts (-H, --hostfile,
// --host-discovery-script) and `env` shows an allocation, its hosts become
// options.hosts and the line to print (on stderr, after "kolorun: ") is
// returned; else options are unchanged and "" is returned. Throws
// UsageError when -np is more than the allocation's slots (naming both
// numbers) unless --oversubscribe, or for a malformed variable.
std::string useAllocation(LaunchOptions& options, const EnvironmentLookup& env);

}  // namespace kolo::kolorun
