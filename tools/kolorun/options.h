// Command-line options of kolorun.
//
//   kolorun -np N [-H HOST:SLOTS,... | --hostfile FILE] [--ssh-command CMD]
//           [-p PORT] [-i KEYFILE] [--network-interface IF] [--oversubscribe]
//           [--start-timeout S] [--timeout S] [--output-dir DIR] [--verbose]
//           [-x NAME[=VALUE]] [--bind-to none|core|socket]
//           [--mpi [--mpi-args ARGS] | --gloo]
//           [horovodrun's tuning flags] CMD ARGS...
//
// horovodrun's command line is accepted for everything kolorun can honour
// (docs/launching.md, "horovodrun's command line", lists every flag):
// spellings of kolorun's own flags (--num-proc, --output-filename,
// --network-interfaces, ...) mean the same; each tuning flag
// (--fusion-threshold-mb, --autotune, --timeline-filename, ...) becomes a
// KOLO_NAME=VALUE entry of `exports`, so it reaches local, remote and
// mpirun-launched ranks alike; a flag asking for what kolo does anyway, or
// for a tuning detail kolo does not have, is accepted with a line in
// `notes`; any other flag (elastic training, --config-file, ...) is a
// UsageError naming it.
//
// Options come before CMD; everything from CMD on is the ranks' command line,
// passed verbatim ("--" may separate the two). parseArguments() throws
// UsageError for anything malformed (including a bad host list or hostfile);
// main() prints it with the usage text and exits 2.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu_binding.h"
#include "host_list.h"

namespace kolo::kolorun {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Elastic training (--min-np, --max-np, ...; docs/elastic.md).
struct ElasticOptions {
  bool enabled = false;           // any of the flags below was given
  int minRanks = 0;               // --min-np: fewer live workers fail the job
  int maxRanks = 0;               // --max-np: 0 = -np
  double timeoutSeconds = 600;    // --elastic-timeout: wait for --min-np this long
  std::optional<int> resetLimit;  // --reset-limit: worlds after the first
  std::string discoveryScript;    // --host-discovery-script: "" = the hosts given
  int slotsPerHost = 1;           // --slots-per-host: for lines without :SLOTS
  std::optional<std::pair<double, double>> blacklistCooldown;  // LO HI seconds
};

struct LaunchOptions {
  int numRanks = 0;           // -np N, required, >= 1
  int servers = 0;            // --servers S: parameter servers among them, < N
  int validators = 0;         // --validators V: validating workers, < N - S
  bool hpo = false;           // --hpo: a kolo.hpo study; only rank 0's failure ends it
  double timeoutSeconds = 0;  // --timeout S: job wall-clock limit, 0 = none
  std::string outputDir;      // --output-dir DIR: also rank.R.{stdout,stderr}
  bool verbose = false;       // --verbose / -v
  // -x NAME or -x NAME=VALUE and the tuning flags' KOLO_NAME=VALUE, in
  // command-line order (a later entry for a name wins).
  std::vector<std::string> exports;
  std::vector<std::string> notes;    // accepted flags that change nothing, and why
  std::vector<std::string> command;  // CMD ARGS..., never empty after parsing
  std::vector<HostSlots> hosts;      // -H, --hostfile or the batch allocation
                                     // (allocation.h); empty = all on this host
  std::string hostfile;              // --hostfile FILE, as given (for --mpi)
  std::string sshCommand = "ssh -o BatchMode=yes";  // --ssh-command CMD,
                                                    // then -p PORT -i FILE
  bool sshCommandGiven = false;                     // any of those three
  std::string networkInterface;      // --network-interface IF: KOLO_IFACE of ranks
  bool oversubscribe = false;        // --oversubscribe: more ranks than slots
  double startTimeoutSeconds = 30;   // --start-timeout S: remote host probe
  bool mpi = false;                  // --mpi: delegate the launch to mpirun
  std::vector<std::string> mpiArgs;  // --mpi-args ARGS: more mpirun flags
  BindTo bindTo = BindTo::kNone;     // --bind-to (cpu_binding.h)
  // --binding-args ARGS (horovodrun's): with --mpi, mpirun's binding flags
  // instead of kolorun's "--bind-to X --map-by slot"; without --mpi only
  // --bind-to X and --map-by slot are understood (they set bindTo).
  std::vector<std::string> bindingArgs;
  bool showHelp = false;     // -h / --help: print usage, run nothing
  bool showVersion = false;  // --version
  ElasticOptions elastic;
};

// argv[0] is kolorun's own name and is skipped.
LaunchOptions parseArguments(int argc, const char* const* argv);

// The usage text, ending with a newline.
std::string usageText();

}  // namespace kolo::kolorun
