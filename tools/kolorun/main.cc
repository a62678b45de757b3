// kolorun: starts the ranks of a kolo job on this host (see usageText()).
#include <cstdio>
#include <exception>

#include "kolo/config.h"
#include "options.h"
#include "output_multiplexer.h"
#include "supervisor.h"

int main(int argc, char** argv) {
  using namespace kolo::kolorun;
  LaunchOptions options;
  try {
    options = parseArguments(argc, argv);
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
