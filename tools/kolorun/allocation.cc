// Reading the batch system's variables is this file's purpose: they are the
// allocation's, not kolo settings, so they come through an
// EnvironmentLookup (the process environment, or a test's map).
#include "allocation.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "kolo/error.h"
#include "rendezvous/slurm_lists.h"

namespace kolo::kolorun {
namespace {

constexpr int kMaxSlots = 65536;   // per host, as host_list.cc allows
constexpr size_t kHostsShown = 8;  // in the info line

std::string quoted(std::string_view name, std::string_view value) {
  return std::string(name) + "='" + std::string(value) + "'";
}

bool isHostName(std::string_view host) {
  if (host.empty()) return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Hosts in the order first seen, slots summed over repeats.
class HostTally {
 public:
  explicit HostTally(std::string source) : source_(std::move(source)) {}

  void add(const std::string& host, long slots) {
    auto [it, fresh] = index_.emplace(host, hosts_.size());
    if (fresh) hosts_.push_back({host, 0});
    HostSlots& h = hosts_[it->second];
    if (slots > kMaxSlots - h.slots) {
      throw UsageError(source_ + ": host '" + host + "' has more than " +
                       std::to_string(kMaxSlots) + " slots");
    }
    h.slots += static_cast<int>(slots);
  }

  std::vector<HostSlots> take() {
    if (hosts_.empty()) throw UsageError(source_ + ": no host");
    return std::move(hosts_);
  }

 private:
  std::string source_;
  std::vector<HostSlots> hosts_;
  std::unordered_map<std::string, size_t> index_;
};

std::optional<Allocation> lsfAllocation(const EnvironmentLookup& env) {
  Allocation a;
  a.manager = "LSF";
  if (auto file = env("LSB_DJOB_HOSTFILE")) {
    a.variables = "LSB_DJOB_HOSTFILE=" + *file;
    a.hosts = parseLsfHostfile(*file);
  } else if (auto list = env("LSB_MCPU_HOSTS")) {
    a.variables = "LSB_MCPU_HOSTS";
    a.hosts = parseLsfMcpuHosts("LSB_MCPU_HOSTS", *list);
  } else {
    return std::nullopt;
  }
  // IBM CSM systems list the launch node first, with one slot.
  if (env("CSM_ALLOCATION_ID") && a.hosts.size() > 1 && a.hosts.front().slots == 1) {
    a.note = "left out the launch node " + a.hosts.front().host +
             " (the first host under IBM CSM, CSM_ALLOCATION_ID)";
    a.hosts.erase(a.hosts.begin());
  }
  return a;
}

std::optional<Allocation> slurmAllocation(const EnvironmentLookup& env) {
  const char* listName = "SLURM_JOB_NODELIST";
  auto list = env(listName);
  if (!list) list = env(listName = "SLURM_NODELIST");
  if (!list) return std::nullopt;
  const char* slotsName = "SLURM_TASKS_PER_NODE";
  auto slots = env(slotsName);
  if (!slots) slots = env(slotsName = "SLURM_JOB_CPUS_PER_NODE");
  if (!slots) {
    throw UsageError(quoted(listName, *list) +
                     " names the allocation's nodes but neither SLURM_TASKS_PER_NODE "
                     "nor SLURM_JOB_CPUS_PER_NODE gives their slots");
  }
  Allocation a;
  a.manager = "Slurm";
  a.variables = std::string(listName) + ", " + slotsName;
  a.hosts = parseSlurmHosts(listName, *list, slotsName, *slots);
  return a;
}

std::string describe(const std::vector<HostSlots>& hosts) {
  std::string s;
  for (size_t i = 0; i < hosts.size() && i < kHostsShown; ++i) {
    s += (i == 0 ? "" : ",") + hosts[i].host + ":" + std::to_string(hosts[i].slots);
  }
  if (hosts.size() > kHostsShown) {
    s += ",... (" + std::to_string(hosts.size() - kHostsShown) + " more)";
  }
  return s;
}

}  // namespace

EnvironmentLookup processEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

long Allocation::slots() const {
  long n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

std::vector<HostSlots> parseLsfHostfile(const std::string& path) {
  const std::string source = quoted("LSB_DJOB_HOSTFILE", path);
  std::ifstream in(path);
  if (!in) throw UsageError(source + ": cannot read it: " + std::strerror(errno));
  HostTally tally(source);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string host, extra;
    if (!(words >> host)) continue;  // blank line
    if (words >> extra || !isHostName(host)) {
      throw UsageError(source + ": line " + std::to_string(number) + " ('" + line +
                       "') is not one host name");
    }
    tally.add(host, 1);
  }
  return tally.take();
}

std::vector<HostSlots> parseLsfMcpuHosts(std::string_view name, std::string_view text) {
  const std::string source = quoted(name, text);
  HostTally tally(source);
  std::istringstream words{std::string(text)};
  std::string host, count;
  while (words >> host) {
    if (!isHostName(host)) {
      throw UsageError(source + ": '" + host + "' is not a host name");
    }
    if (!(words >> count)) {
      throw UsageError(source + ": host '" + host + "' has no slot count after it");
    }
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(count.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || n < 1 || n > kMaxSlots) {
      throw UsageError(source + ": '" + count + "' after host '" + host +
                       "' is not a slot count (1.." + std::to_string(kMaxSlots) + ")");
    }
    tally.add(host, n);
  }
  return tally.take();
}

std::vector<HostSlots> parseSlurmHosts(std::string_view listName, std::string_view list,
                                       std::string_view slotsName,
                                       std::string_view slots) {
  std::vector<std::string> names;
  std::vector<int> counts;
  try {
    names = rendezvous::expandSlurmHostList(listName, list);
    counts = rendezvous::expandSlurmCounts(slotsName, slots);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (counts.size() != names.size()) {
    throw UsageError(quoted(slotsName, slots) + " gives the slots of " +
                     std::to_string(counts.size()) + " nodes but " +
                     quoted(listName, list) + " names " + std::to_string(names.size()));
  }
  HostTally tally(quoted(listName, list));
  for (size_t i = 0; i < names.size(); ++i) {
    if (counts[i] > 0) tally.add(names[i], counts[i]);  // a node without tasks
  }
  return tally.take();
}

std::optional<Allocation> detectAllocation(const EnvironmentLookup& env) {
  if (auto a = lsfAllocation(env)) return a;
  return slurmAllocation(env);
}

std::string useAllocation(LaunchOptions& options, const EnvironmentLookup& env) {
  if (!options.hosts.empty() || !options.elastic.discoveryScript.empty()) return "";
  std::optional<Allocation> a = detectAllocation(env);
  if (!a) return "";
  const long slots = a->slots();
  const std::string where = "the " + a->manager + " allocation (" + a->variables + ")";
  if (options.numRanks > slots && !options.oversubscribe) {
    throw UsageError("-np " + std::to_string(options.numRanks) +
                     " is more ranks than the " + std::to_string(slots) + " slots of " +
                     std::to_string(a->hosts.size()) + " host(s) in " + where +
                     "; ask the batch system for more, pass -H/--hostfile, or pass "
                     "--oversubscribe");
  }
  options.hosts = a->hosts;
  std::string line = "-np " + std::to_string(options.numRanks) + " on " + where + ": " +
                     std::to_string(a->hosts.size()) + " host(s), " +
                     std::to_string(slots) + " slots: " + describe(a->hosts);
  if (!a->note.empty()) line += "; " + a->note;
  return line;
}

}  // namespace kolo::kolorun
