// Command-line options of kolorun.
//
//   kolorun -np N [--timeout S] [--output-dir DIR] [--verbose] [-x NAME[=VALUE]]
//           CMD ARGS...
//
// Options come before CMD; everything from CMD on is the ranks' command line,
// passed verbatim ("--" may separate the two). parseArguments() throws
// UsageError for anything malformed; main() prints it with the usage text and
// exits 2. Host lists (-H, --hostfile) arrive with multi-host launching and
// will add a field here and a placement rule in placement.h.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace kolo::kolorun {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LaunchOptions {
  int numRanks = 0;                  // -np N, required, >= 1
  double timeoutSeconds = 0;         // --timeout S: job wall-clock limit, 0 = none
  std::string outputDir;             // --output-dir DIR: also rank.R.{stdout,stderr}
  bool verbose = false;              // --verbose / -v
  std::vector<std::string> exports;  // -x NAME or -x NAME=VALUE, in order
  std::vector<std::string> command;  // CMD ARGS..., never empty after parsing
  bool showHelp = false;             // -h / --help: print usage, run nothing
  bool showVersion = false;          // --version
};

// argv[0] is kolorun's own name and is skipped.
LaunchOptions parseArguments(int argc, const char* const* argv);

// The usage text, ending with a newline.
std::string usageText();

}  // namespace kolo::kolorun
