#include "mpi_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "placement.h"
#include "remote_launch.h"

namespace kolo::kolorun {

std::vector<std::string> mpirunCommand(const LaunchOptions& options,
                                       const std::vector<std::string>& environment,
                                       bool asRoot) {
  std::vector<std::string> argv = {"mpirun"};
  if (asRoot) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-np", std::to_string(options.numRanks)});
  if (!options.hostfile.empty()) {
    argv.insert(argv.end(), {"--hostfile", options.hostfile});
  } else if (!options.hosts.empty()) {
    std::string list;
    for (const auto& h : options.hosts) {
      const bool v6 = h.host.find(':') != std::string::npos;
      list += (list.empty() ? "" : ",") + (v6 ? "[" + h.host + "]" : h.host) + ":" +
              std::to_string(h.slots);
    }
    argv.insert(argv.end(), {"-H", list});
  }
  if (options.oversubscribe || options.hosts.empty()) argv.push_back("--oversubscribe");
  if (!options.bindingArgs.empty()) {
    argv.insert(argv.end(), options.bindingArgs.begin(), options.bindingArgs.end());
  } else {
    argv.insert(argv.end(),
                {"--bind-to", bindToName(options.bindTo), "--map-by", "slot"});
  }
  argv.push_back("--tag-output");
  if (options.sshCommandGiven) {
    argv.insert(argv.end(), {"--mca", "plm_rsh_agent", options.sshCommand});
  }
  if (!options.networkInterface.empty()) {
    argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", options.networkInterface,
                             "--mca", "oob_tcp_if_include", options.networkInterface,
                             "-x", "KOLO_IFACE=" + options.networkInterface});
  }
  if (!options.outputDir.empty()) {
    argv.insert(argv.end(), {"--output-filename", options.outputDir});
  }
  if (options.timeoutSeconds > 0) {
    argv.insert(argv.end(),
                {"--timeout",
                 std::to_string(static_cast<long>(std::ceil(options.timeoutSeconds)))});
  }
  for (const auto& e : environment) {
    if (!isForwarded(e)) continue;
    std::string name = e.substr(0, e.find('='));
    if (!options.networkInterface.empty() && name == "KOLO_IFACE") continue;
    argv.insert(argv.end(), {"-x", name});
  }
  for (const auto& spec : options.exports) argv.insert(argv.end(), {"-x", spec});
  argv.insert(argv.end(), options.mpiArgs.begin(), options.mpiArgs.end());
  argv.insert(argv.end(), options.command.begin(), options.command.end());
  return argv;
}

int execMpirun(const std::vector<std::string>& argv, bool verbose) {
  if (verbose) {
    std::string line;
    for (const auto& a : argv) line += (line.empty() ? "" : " ") + shellQuote(a);
    std::fprintf(stderr, "kolorun: %s\n", line.c_str());
    std::fflush(stderr);
  }
  std::vector<std::string> copy = argv;
  std::vector<char*> cargv;
  for (auto& a : copy) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp(cargv[0], cargv.data());
  const int err = errno;
  std::fprintf(stderr, "kolorun: --mpi: cannot run %s: %s\n", cargv[0],
               std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

}  // namespace kolo::kolorun
