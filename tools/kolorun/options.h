// Command-line options of kolorun.
//
//   kolorun -np N [-H HOST:SLOTS,... | --hostfile FILE] [--ssh-command CMD]
//           [--network-interface IF] [--oversubscribe] [--start-timeout S]
//           [--timeout S] [--output-dir DIR] [--verbose] [-x NAME[=VALUE]]
//           [--mpi] CMD ARGS...
//
// Options come before CMD; everything from CMD on is the ranks' command line,
// passed verbatim ("--" may separate the two). parseArguments() throws
// UsageError for anything malformed (including a bad host list or hostfile);
// main() prints it with the usage text and exits 2.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "host_list.h"

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
  std::vector<HostSlots> hosts;      // -H or --hostfile; empty = all on this host
  std::string hostfile;              // --hostfile FILE, as given (for --mpi)
  std::string sshCommand = "ssh -o BatchMode=yes";  // --ssh-command CMD
  bool sshCommandGiven = false;
  std::string networkInterface;     // --network-interface IF: KOLO_IFACE of ranks
  bool oversubscribe = false;       // --oversubscribe: more ranks than slots
  double startTimeoutSeconds = 30;  // --start-timeout S: remote host probe
  bool mpi = false;                 // --mpi: delegate the launch to mpirun
  bool showHelp = false;            // -h / --help: print usage, run nothing
  bool showVersion = false;         // --version
};

// argv[0] is kolorun's own name and is skipped.
LaunchOptions parseArguments(int argc, const char* const* argv);

// The usage text, ending with a newline.
std::string usageText();

}  // namespace kolo::kolorun
