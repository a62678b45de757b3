// kolorun: starts the ranks of a kolo job on this host or across hosts (see
// usageText()), or hands the launch to mpirun (--mpi).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "allocation.h"
#include "kolo/config.h"
#include "mpi_launch.h"
#include "options.h"
#include "output_multiplexer.h"
#include "placement.h"
#include "supervisor.h"

int main(int argc, char** argv) {
  using namespace kolo::kolorun;
  LaunchOptions options;
  std::string hostsFrom;  // the allocation's hosts, when they are used
  try {
    options = parseArguments(argc, argv);
    if (!options.showHelp && !options.showVersion)
      hostsFrom = useAllocation(options, processEnvironment());
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kolorun: %s\n\n%s", e.what(), usageText().c_str());
    return 2;
  }
  if (options.showHelp) {
    std::fputs(usageText().c_str(), stdout);
    return 0;
  }
  if (options.showVersion) {
    std::printf("kolorun (kolo) %s\n", KOLO_VERSION);
    return 0;
  }
  if (!hostsFrom.empty()) std::fprintf(stderr, "kolorun: %s\n", hostsFrom.c_str());
  for (const auto& note : options.notes)
    std::fprintf(stderr, "kolorun: %s\n", note.c_str());
  try {
    ensureJobSecret();  // exported: mpirun, ssh and local ranks inherit it
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return 1;
  }
  if (options.mpi) {
    extern char** environ;
    std::vector<std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
    return execMpirun(mpirunCommand(options, env, geteuid() == 0), options.verbose);
  }
  try {
    OutputMultiplexer::Config config;
    config.outputDir = options.outputDir;
    OutputMultiplexer output(config);
    Supervisor supervisor(std::move(options), output);
    return supervisor.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolorun: %s\n", e.what());
    return 1;
  }
}
