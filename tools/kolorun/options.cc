#include "options.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace kolo::kolorun {
namespace {

constexpr int kMaxRanks = 65536;

int parseRankCount(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || v < 1 ||
      v > kMaxRanks) {
    throw UsageError(std::string(flag) + " expects a positive integer (1.." +
                     std::to_string(kMaxRanks) + "), got '" + text + "'");
  }
  return static_cast<int>(v);
}

double parseSeconds(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE ||
      !(v >= 0)) {
    throw UsageError(std::string(flag) +
                     " expects a non-negative number of seconds, got '" + text + "'");
  }
  return v;
}

void checkExport(const std::string& spec) {
  std::string_view name(spec);
  if (auto eq = name.find('='); eq != std::string_view::npos) name = name.substr(0, eq);
  bool ok = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) {
    ok = ok && (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9'));
  }
  if (!ok) throw UsageError("-x expects NAME or NAME=VALUE, got '" + spec + "'");
}

// Splits "--flag=value" into flag and value.
std::pair<std::string, std::optional<std::string>> splitInline(const std::string& arg) {
  if (arg.rfind("--", 0) == 0) {
    if (auto eq = arg.find('='); eq != std::string::npos) {
      return {arg.substr(0, eq), arg.substr(eq + 1)};
    }
  }
  return {arg, std::nullopt};
}

}  // namespace

LaunchOptions parseArguments(int argc, const char* const* argv) {
  LaunchOptions options;
  bool haveRanks = false;
  int i = 1;
  // The value of the flag at argv[i]: inline (--flag=v) or the next argument.
  auto value = [&](const std::string& flag,
                   const std::optional<std::string>& inlineValue) {
    if (inlineValue) return *inlineValue;
    if (i + 1 >= argc) throw UsageError("option " + flag + " needs a value");
    return std::string(argv[++i]);
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the command starts here
    auto [flag, inlineValue] = splitInline(arg);
    if (flag == "-np" || flag == "-n" || flag == "--np") {
      options.numRanks = parseRankCount(flag, value(flag, inlineValue));
      haveRanks = true;
    } else if (flag == "--timeout") {
      options.timeoutSeconds = parseSeconds(flag, value(flag, inlineValue));
    } else if (flag == "--output-dir") {
      options.outputDir = value(flag, inlineValue);
      if (options.outputDir.empty()) throw UsageError("--output-dir needs a directory");
    } else if (flag == "--verbose" || flag == "-v") {
      options.verbose = true;
    } else if (flag == "-H" || flag == "--hosts" || flag == "-host" || flag == "--host") {
      if (!options.hostfile.empty())
        throw UsageError("give either -H or --hostfile, not both");
      options.hosts = parseHostList(value(flag, inlineValue));
    } else if (flag == "--hostfile" || flag == "-hostfile") {
      if (!options.hosts.empty())
        throw UsageError("give either -H or --hostfile, not both");
      options.hostfile = value(flag, inlineValue);
      options.hosts = parseHostfile(options.hostfile);
    } else if (flag == "--ssh-command") {
      options.sshCommand = value(flag, inlineValue);
      if (options.sshCommand.find_first_not_of(" \t") == std::string::npos) {
        throw UsageError("--ssh-command needs a command");
      }
      options.sshCommandGiven = true;
    } else if (flag == "--network-interface") {
      options.networkInterface = value(flag, inlineValue);
      if (options.networkInterface.empty()) {
        throw UsageError("--network-interface needs an interface name or address");
      }
    } else if (flag == "--oversubscribe") {
      options.oversubscribe = true;
    } else if (flag == "--start-timeout") {
      options.startTimeoutSeconds = parseSeconds(flag, value(flag, inlineValue));
      if (options.startTimeoutSeconds <= 0) {
        throw UsageError("--start-timeout expects a positive number of seconds");
      }
    } else if (flag == "--mpi") {
      options.mpi = true;
    } else if (flag == "-x") {
      std::string spec = value(flag, inlineValue);
      checkExport(spec);
      options.exports.push_back(spec);
    } else if (flag == "-h" || flag == "--help") {
      options.showHelp = true;
      return options;
    } else if (flag == "--version") {
      options.showVersion = true;
      return options;
    } else {
      throw UsageError("unknown option '" + arg + "'");
    }
  }
  for (; i < argc; ++i) options.command.emplace_back(argv[i]);
  if (!haveRanks) throw UsageError("missing -np N (the number of ranks)");
  if (options.command.empty()) throw UsageError("missing the command to run");
  if (!options.hosts.empty() && !options.oversubscribe && !options.mpi) {
    long slots = 0;
    for (const auto& h : options.hosts) slots += h.slots;
    if (options.numRanks > slots) {
      throw UsageError("-np " + std::to_string(options.numRanks) +
                       " is more ranks than the " + std::to_string(slots) + " slots of " +
                       std::to_string(options.hosts.size()) +
                       " host(s); add hosts or slots, or pass --oversubscribe");
    }
  }
  return options;
}

std::string usageText() {
  return "usage: kolorun -np N [options] CMD [ARGS...]\n"
         "\n"
         "Starts N ranks of CMD on this host or on the hosts given, with the kolo\n"
         "rendezvous set up. Each output line is prefixed with [rank]. When one\n"
         "rank fails the others are ended and kolorun exits with its code.\n"
         "\n"
         "options:\n"
         "  -np N, -n N         number of ranks (required, >= 1)\n"
         "  -H HOST[:SLOTS],... hosts and their slots (default 1); ranks fill\n"
         "                      them in order. Without -H: all ranks here\n"
         "  --hostfile FILE     hosts from FILE: 'HOST slots=N' or 'HOST:N' lines\n"
         "  --ssh-command CMD   how remote ranks start: CMD HOST 'COMMAND LINE'\n"
         "                      (default: ssh -o BatchMode=yes)\n"
         "  --network-interface IF  interface (or IPv4 address) for kolo's\n"
         "                      traffic between hosts (sets KOLO_IFACE)\n"
         "  --oversubscribe     allow more ranks than slots\n"
         "  --start-timeout S   how long a remote host may take to answer the\n"
         "                      probe before the launch (default 30)\n"
         "  --mpi               launch through mpirun instead (same options)\n"
         "  --timeout S         end the job after S seconds (exit 124); 0: no limit\n"
         "  --output-dir DIR    also write each rank's output to\n"
         "                      DIR/rank.R.stdout and DIR/rank.R.stderr\n"
         "  -x NAME[=VALUE]     export NAME (set to VALUE) to every rank\n"
         "  -v, --verbose       say what kolorun does\n"
         "  -h, --help          this text\n"
         "  --version           print the version\n"
         "\n"
         "Each rank gets KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE,\n"
         "KOLO_CROSS_RANK, KOLO_CROSS_SIZE, KOLO_HOST_ID, KOLO_RENDEZVOUS and\n"
         "KOLO_JOB_ID. Remote ranks also get the caller's KOLO_* variables and\n"
         "those named by -x.\n";
}

}  // namespace kolo::kolorun
