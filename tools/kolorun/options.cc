// kolorun's flags are a table (kFlags): each row lists a flag's spellings,
// whether it takes a value, and the handler that applies it. Handlers of
// horovodrun's tuning flags write KOLO_NAME=VALUE exports; the rows of
// flags kolorun cannot honour carry the reason their handler reports.
#include "options.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "remote_launch.h"

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

double parseNumber(std::string_view flag, const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE ||
      !(v >= 0)) {
    throw UsageError(std::string(flag) + " expects a non-negative " + what + ", got '" +
                     text + "'");
  }
  return v;
}

double parseSeconds(std::string_view flag, const std::string& text) {
  return parseNumber(flag, text, "number of seconds");
}

int64_t parseCount(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || v < 0) {
    throw UsageError(std::string(flag) + " expects a non-negative integer, got '" + text +
                     "'");
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

// `word` as one word of a command string that splitCommandWords() reads.
std::string commandWord(std::string_view flag, const std::string& word) {
  if (word.find_first_of(" \t\n'\"") == std::string::npos) return word;
  if (word.find('\'') == std::string::npos) return "'" + word + "'";
  if (word.find('"') == std::string::npos) return "\"" + word + "\"";
  throw UsageError(std::string(flag) + ": '" + word + "' has both kinds of quotes");
}

// ---- the parse -----------------------------------------------------------------

struct Parse {
  LaunchOptions options;
  bool haveRanks = false;
  bool gloo = false;
  std::string sshPort;      // -p
  std::string sshIdentity;  // -i
  bool bindToGiven = false;
};

struct Flag;
using Handler = void (*)(Parse&, const Flag&, const std::string& flag,
                         const std::string& value);

struct Flag {
  const char* names;  // its spellings, blank-separated
  bool takesValue;
  Handler apply;
  // The KOLO_ variable a tuning flag sets, or why a flag is a no-op or
  // unsupported.
  const char* text = "";
};

void setExport(Parse& p, const std::string& name, const std::string& value) {
  p.options.exports.push_back(name + "=" + value);
}

// ---- kolorun's own flags (and horovodrun's spellings of them) ------------------

void ranks(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.numRanks = parseRankCount(flag, v);
  p.haveRanks = true;
}

// --servers S: S of the ranks are parameter servers (docs/parameter_server.md);
// the ranks learn it from KOLO_SERVERS.
void servers(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  const int64_t s = parseCount(flag, v);
  if (s > (1 << 30)) throw UsageError(flag + " '" + v + "' is too large");
  p.options.servers = static_cast<int>(s);
  setExport(p, "KOLO_SERVERS", std::to_string(s));
}

// --hpo: the job runs a kolo.hpo study (docs/hpo.md): rank 0 owns it, and
// another rank's failure fails only its team's trial.
void hpo(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.options.hpo = true;
  setExport(p, "KOLO_HPO", "1");
}

// Elastic training: --min-np, --max-np, --elastic-timeout, --reset-limit.
void minRanks(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.elastic.minRanks = parseRankCount(flag, v);
  p.options.elastic.enabled = true;
}

void maxRanks(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.elastic.maxRanks = parseRankCount(flag, v);
  p.options.elastic.enabled = true;
}

void elasticTimeout(Parse& p, const Flag&, const std::string& flag,
                    const std::string& v) {
  p.options.elastic.timeoutSeconds = parseSeconds(flag, v);
  p.options.elastic.enabled = true;
}

void resetLimit(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  const int64_t n = parseCount(flag, v);
  if (n > (1 << 30)) throw UsageError(flag + " '" + v + "' is too large");
  p.options.elastic.resetLimit = static_cast<int>(n);
  p.options.elastic.enabled = true;
}

void discoveryScript(Parse& p, const Flag&, const std::string& flag,
                     const std::string& v) {
  if (v.empty()) throw UsageError(flag + " needs a script");
  p.options.elastic.discoveryScript = v;
  p.options.elastic.enabled = true;
}

void slotsPerHost(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.elastic.slotsPerHost = parseRankCount(flag, v);
}

// --blacklist-cooldown-range LO HI (two arguments, joined by the parse).
void blacklistCooldown(Parse& p, const Flag&, const std::string& flag,
                       const std::string& v) {
  const auto space = v.find(' ');
  if (space == std::string::npos)
    throw UsageError(flag + " needs two values: LO HI seconds");
  const double lo = parseSeconds(flag, v.substr(0, space));
  const double hi = parseSeconds(flag, v.substr(space + 1));
  if (hi < lo) {
    throw UsageError(flag + " " + v + ": the upper bound is below the lower one");
  }
  p.options.elastic.blacklistCooldown = std::make_pair(lo, hi);
}

// --validators V: the last V workers validate (docs/parameter_server.md,
// "Validation"); the ranks learn it from KOLO_VALIDATORS.
void validators(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  const int64_t n = parseCount(flag, v);
  if (n > (1 << 30)) throw UsageError(flag + " '" + v + "' is too large");
  p.options.validators = static_cast<int>(n);
  setExport(p, "KOLO_VALIDATORS", std::to_string(n));
}

void jobTimeout(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.timeoutSeconds = parseSeconds(flag, v);
}

void outputDir(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  if (v.empty()) throw UsageError(flag + " needs a directory");
  p.options.outputDir = v;
}

void verbose(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.options.verbose = true;
}

void hostList(Parse& p, const Flag&, const std::string&, const std::string& v) {
  if (!p.options.hostfile.empty())
    throw UsageError("give either -H or --hostfile, not both");
  p.options.hosts = parseHostList(v);
}

void hostfile(Parse& p, const Flag&, const std::string&, const std::string& v) {
  if (!p.options.hosts.empty())
    throw UsageError("give either -H or --hostfile, not both");
  p.options.hostfile = v;
  p.options.hosts = parseHostfile(v);
}

void sshCommand(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  if (v.find_first_not_of(" \t") == std::string::npos) {
    throw UsageError(flag + " needs a command");
  }
  p.options.sshCommand = v;
  p.options.sshCommandGiven = true;
}

void sshPort(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  const int64_t port = parseCount(flag, v);
  if (port < 1 || port > 65535) {
    throw UsageError(flag + " expects a port number (1..65535), got '" + v + "'");
  }
  p.sshPort = std::to_string(port);
}

void sshIdentity(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  if (v.empty()) throw UsageError(flag + " needs a file");
  p.sshIdentity = commandWord(flag, v);
}

// kolo takes one interface: a list of several is an error rather than a
// guess at which of them every host has.
void networkInterfaces(Parse& p, const Flag&, const std::string& flag,
                       const std::string& v) {
  std::set<std::string> names;
  if (!p.options.networkInterface.empty()) names.insert(p.options.networkInterface);
  std::istringstream list(v);
  for (std::string name; std::getline(list, name, ',');) {
    if (!name.empty()) names.insert(name);
  }
  if (names.empty()) throw UsageError(flag + " needs an interface name or address");
  if (names.size() > 1) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ",") + n;
    throw UsageError(flag +
                     ": kolo carries its traffic between hosts over one "
                     "interface; got " +
                     all + ": name one of them");
  }
  p.options.networkInterface = *names.begin();
}

void oversubscribe(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.options.oversubscribe = true;
}

void startTimeout(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.startTimeoutSeconds = parseSeconds(flag, v);
  if (p.options.startTimeoutSeconds <= 0) {
    throw UsageError(flag + " expects a positive number of seconds");
  }
}

void mpi(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.options.mpi = true;
}

void gloo(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.gloo = true;
}

void mpiArgs(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  if (v.find_first_not_of(" \t") == std::string::npos) {
    throw UsageError(flag + " needs flags for mpirun");
  }
  for (auto& w : splitCommandWords(v, flag)) p.options.mpiArgs.push_back(std::move(w));
}

void bindTo(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  p.options.bindTo = parseBindTo(flag, v);
  p.bindToGiven = true;
}

void bindingArgs(Parse& p, const Flag&, const std::string& flag, const std::string& v) {
  if (v.find_first_not_of(" \t") == std::string::npos) {
    throw UsageError(flag + " needs binding flags (e.g. '--bind-to core')");
  }
  p.options.bindingArgs = splitCommandWords(v, flag);
}

void exportVariable(Parse& p, const Flag&, const std::string&, const std::string& v) {
  checkExport(v);
  p.options.exports.push_back(v);
}

void help(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.options.showHelp = true;
}

void version(Parse& p, const Flag&, const std::string&, const std::string&) {
  p.options.showVersion = true;
}

// ---- horovodrun's tuning flags: KOLO_ settings of the ranks ---------------------

void setCount(Parse& p, const Flag& f, const std::string& flag, const std::string& v) {
  setExport(p, f.text, std::to_string(parseCount(flag, v)));
}

void setNumber(Parse& p, const Flag& f, const std::string& flag, const std::string& v) {
  parseNumber(flag, v, "number");
  setExport(p, f.text, v);
}

// --fusion-threshold-mb: MiB on the command line, bytes in KOLO_FUSION_THRESHOLD.
void setMebibytes(Parse& p, const Flag& f, const std::string& flag,
                  const std::string& v) {
  const int64_t mib = parseCount(flag, v);
  if (mib > (INT64_MAX >> 20)) throw UsageError(flag + " '" + v + "' is too large");
  setExport(p, f.text, std::to_string(mib << 20));
}

void setPath(Parse& p, const Flag& f, const std::string& flag, const std::string& v) {
  if (v.empty()) throw UsageError(flag + " needs a file name");
  setExport(p, f.text, v);
}

void setOne(Parse& p, const Flag& f, const std::string&, const std::string&) {
  setExport(p, f.text, "1");
}

void setZero(Parse& p, const Flag& f, const std::string&, const std::string&) {
  setExport(p, f.text, "0");
}

// horovodrun's levels (upper case there) onto kolo's.
void setLogLevel(Parse& p, const Flag& f, const std::string& flag, const std::string& v) {
  std::string level;
  for (char c : v)
    level += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (level == "trace") level = "debug";
  if (level == "fatal") level = "error";
  if (level != "debug" && level != "info" && level != "warning" && level != "error") {
    throw UsageError(
        flag + " expects TRACE, DEBUG, INFO, WARNING, ERROR or FATAL, got '" + v + "'");
  }
  setExport(p, f.text, level);
}

// ---- flags that ask for what kolo does anyway, or that kolo cannot honour --------

// Asks for kolo's own behaviour: nothing to do.
void honoured(Parse&, const Flag&, const std::string&, const std::string&) {}

void noEffect(Parse& p, const Flag& f, const std::string& flag, const std::string&) {
  p.options.notes.push_back(flag + " has no effect: " + f.text);
}

void noEffectCount(Parse& p, const Flag& f, const std::string& flag,
                   const std::string& v) {
  parseCount(flag, v);
  noEffect(p, f, flag, v);
}

void noEffectFraction(Parse& p, const Flag& f, const std::string& flag,
                      const std::string& v) {
  if (parseNumber(flag, v, "number") > 1) {
    throw UsageError(flag + " expects a number in [0, 1], got '" + v + "'");
  }
  noEffect(p, f, flag, v);
}

void unsupported(Parse&, const Flag& f, const std::string& flag, const std::string&) {
  throw UsageError(flag + " is not supported" + f.text);
}

constexpr char kNoTime[] = ": kolo's log lines carry no time";

const Flag kFlags[] = {
    // kolorun's own, with horovodrun's spellings.
    {"-np -n --np --num-proc", true, ranks},
    {"--servers", true, servers},
    {"--hpo", false, hpo},
    {"--min-np --min-num-proc", true, minRanks},
    {"--max-np --max-num-proc", true, maxRanks},
    {"--elastic-timeout", true, elasticTimeout},
    {"--reset-limit", true, resetLimit},
    {"--host-discovery-script", true, discoveryScript},
    {"--slots-per-host", true, slotsPerHost},
    {"--blacklist-cooldown-range", true, blacklistCooldown},
    {"--validators", true, validators},
    {"--timeout", true, jobTimeout},
    {"--output-dir --output-filename", true, outputDir},
    {"--verbose -v", false, verbose},
    {"-H --hosts -host --host", true, hostList},
    {"--hostfile -hostfile", true, hostfile},
    {"--ssh-command", true, sshCommand},
    {"-p --ssh-port", true, sshPort},
    {"-i --ssh-identity-file", true, sshIdentity},
    {"--network-interface --network-interfaces", true, networkInterfaces},
    {"--oversubscribe", false, oversubscribe},
    {"--start-timeout", true, startTimeout},
    {"--mpi", false, mpi},
    {"--gloo", false, gloo},
    {"--mpi-args", true, mpiArgs},
    {"--bind-to -bind-to", true, bindTo},
    {"--binding-args", true, bindingArgs},
    {"-x", true, exportVariable},
    {"-h --help", false, help},
    {"--version", false, version},
    // horovodrun's tuning flags.
    {"--fusion-threshold-mb", true, setMebibytes, "KOLO_FUSION_THRESHOLD"},
    {"--cycle-time-ms", true, setNumber, "KOLO_CYCLE_TIME"},
    {"--cache-capacity", true, setCount, "KOLO_CACHE_CAPACITY"},
    {"--hierarchical-allreduce", false, setOne, "KOLO_HIERARCHICAL_ALLREDUCE"},
    {"--no-hierarchical-allreduce", false, setZero, "KOLO_HIERARCHICAL_ALLREDUCE"},
    {"--autotune", false, setOne, "KOLO_AUTOTUNE"},
    {"--no-autotune", false, setZero, "KOLO_AUTOTUNE"},
    {"--autotune-log-file", true, setPath, "KOLO_AUTOTUNE_LOG"},
    {"--autotune-warmup-samples", true, setCount, "KOLO_AUTOTUNE_WARMUP_SAMPLES"},
    {"--autotune-steps-per-sample", true, setCount, "KOLO_AUTOTUNE_STEPS_PER_SAMPLE"},
    {"--timeline-filename", true, setPath, "KOLO_TIMELINE"},
    {"--timeline-mark-cycles", false, setOne, "KOLO_TIMELINE_MARK_CYCLES"},
    {"--no-timeline-mark-cycles", false, setZero, "KOLO_TIMELINE_MARK_CYCLES"},
    {"--no-stall-check", false, setOne, "KOLO_STALL_CHECK_DISABLE"},
    {"--stall-check", false, setZero, "KOLO_STALL_CHECK_DISABLE"},
    {"--stall-check-warning-time-seconds", true, setNumber, "KOLO_STALL_WARNING"},
    {"--stall-check-shutdown-time-seconds", true, setNumber, "KOLO_STALL_SHUTDOWN"},
    {"--gloo-timeout-seconds", true, setNumber, "KOLO_TIMEOUT"},
    {"--log-level", true, setLogLevel, "KOLO_LOG_LEVEL"},
    // Asking for what kolo does anyway.
    {"--no-hierarchical-allgather --no-torus-allreduce --no-mpi-threads-disable "
     "--log-without-timestamp --log-hide-timestamp",
     false, honoured},
    // Accepted, changing nothing: a note says why.
    {"--autotune-bayes-opt-max-samples", true, noEffectCount,
     "kolo's autotuner walks a fixed grid of candidates (no Bayesian optimization)"},
    {"--autotune-gaussian-process-noise", true, noEffectFraction,
     "kolo's autotuner walks a fixed grid of candidates (no Gaussian process)"},
    {"--hierarchical-allgather", false, noEffect,
     "kolo's allgather is one ring whatever the topology"},
    {"--torus-allreduce", false, noEffect,
     "an NCCL algorithm kolo does not select; --hierarchical-allreduce is the "
     "nearest"},
    {"--num-nccl-streams", true, noEffectCount,
     "kolo's NCCL path runs on the caller's stream"},
    {"--thread-affinity", true, noEffectCount, "kolo does not pin its background thread"},
    {"--tcp", false, noEffect,
     "kolo uses no InfiniBand verbs; its traffic between hosts is tcp (or MPI "
     "under --mpi)"},
    {"--disable-cache", false, noEffect, "kolorun keeps no cache of start-up checks"},
    // Not supported: an error says why.
    {"--config-file", false, unsupported,
     ": kolorun reads no YAML file; give the flags on the command line"},
    {"-cb --check-build", false, unsupported,
     ": kolorun --version names the build; docs/launching.md lists what it honours"},
    {"--jsrun", false, unsupported,
     ": inside an LSF allocation kolorun takes its hosts (without -H); or start the "
     "ranks with jsrun directly"},
    {"--mpi-threads-disable", false, unsupported,
     ": kolo's background thread calls MPI, which needs MPI_THREAD_SERIALIZED or more"},
    {"--log-with-timestamp --no-log-hide-timestamp", false, unsupported, kNoTime},
    {"-prefix-timestamp --prefix-output-with-timestamp", false, unsupported,
     ": kolorun prefixes each line with [rank] only"},
};

bool spelledAs(const char* names, std::string_view flag) {
  std::string_view rest(names);
  while (!rest.empty()) {
    const size_t end = rest.find(' ');
    if (rest.substr(0, end) == flag) return true;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return false;
}

const Flag& findFlag(const std::string& flag, const std::string& arg) {
  for (const Flag& f : kFlags) {
    if (spelledAs(f.names, flag)) return f;
  }
  throw UsageError("unknown option '" + arg + "'");
}

// The value of the flag at argv[i]: inline (--flag=v) or the next argument
// (then i moves past it); "" for a flag without a value.
std::string valueOf(const Flag& spec, const std::string& flag,
                    const std::optional<std::string>& inlineValue, int argc,
                    const char* const* argv, int& i) {
  if (!spec.takesValue) {
    if (inlineValue) throw UsageError("option " + flag + " takes no value");
    return "";
  }
  if (inlineValue) return *inlineValue;
  if (i + 1 >= argc) throw UsageError("option " + flag + " needs a value");
  return argv[++i];
}

// -p and -i become words of the ssh command (local and mpirun launches).
void applySshOptions(Parse& p) {
  if (!p.sshPort.empty()) p.options.sshCommand += " -p " + p.sshPort;
  if (!p.sshIdentity.empty()) p.options.sshCommand += " -i " + p.sshIdentity;
  if (!p.sshPort.empty() || !p.sshIdentity.empty()) p.options.sshCommandGiven = true;
}

void checkSlots(const LaunchOptions& options) {
  if (options.hosts.empty() || options.oversubscribe || options.mpi) return;
  long slots = 0;
  for (const auto& h : options.hosts) slots += h.slots;
  if (options.numRanks > slots) {
    throw UsageError("-np " + std::to_string(options.numRanks) +
                     " is more ranks than the " + std::to_string(slots) + " slots of " +
                     std::to_string(options.hosts.size()) +
                     " host(s); add hosts or slots, or pass --oversubscribe");
  }
}

void checkElastic(LaunchOptions& o) {
  ElasticOptions& e = o.elastic;
  if (!e.enabled) return;
  const std::string np = "-np " + std::to_string(o.numRanks);
  if (e.minRanks == 0) e.minRanks = 1;
  if (e.maxRanks == 0) e.maxRanks = o.numRanks;
  if (e.minRanks > o.numRanks) {
    throw UsageError("--min-np " + std::to_string(e.minRanks) + " is more than " + np +
                     " (the job starts with -np ranks)");
  }
  if (!e.discoveryScript.empty() && !o.hosts.empty()) {
    throw UsageError("give either --host-discovery-script or -H/--hostfile, not both");
  }
  if (e.maxRanks < o.numRanks) {
    throw UsageError("--max-np " + std::to_string(e.maxRanks) + " is less than " + np);
  }
  if (o.servers > 0)
    throw UsageError("--servers cannot be combined with elastic training");
  if (o.hpo) throw UsageError("--hpo cannot be combined with elastic training");
  if (o.mpi)
    throw UsageError(
        "--mpi cannot be combined with elastic training (mpirun "
        "ends the job when a rank fails)");
}

// --binding-args without --mpi: mpirun's spellings of what kolorun does.
void applyBindingArgs(Parse& p) {
  const auto& words = p.options.bindingArgs;
  if (words.empty()) return;
  if (p.bindToGiven)
    throw UsageError("give either --bind-to or --binding-args, not both");
  if (p.options.mpi) return;  // mpirun takes them as they are
  for (size_t k = 0; k < words.size(); ++k) {
    auto [flag, inlineValue] = splitInline(words[k]);
    if (flag == "-bind-to") flag = "--bind-to";
    if (flag == "-map-by") flag = "--map-by";
    if (flag != "--bind-to" && flag != "--map-by") {
      throw UsageError(
          "--binding-args: without --mpi kolorun understands only "
          "--bind-to none|core|socket and --map-by slot, got '" +
          words[k] + "'");
    }
    if (!inlineValue && k + 1 >= words.size()) {
      throw UsageError("--binding-args: " + flag + " needs a value");
    }
    const std::string value = inlineValue ? *inlineValue : words[++k];
    if (flag == "--bind-to") {
      p.options.bindTo = parseBindTo("--binding-args: --bind-to", value);
    } else if (value != "slot") {
      throw UsageError(
          "--binding-args: kolorun places ranks by slot (--map-by slot), "
          "got '--map-by " +
          value + "'");
    }
  }
}

void finish(Parse& p) {
  if (!p.haveRanks) throw UsageError("missing -np N (the number of ranks)");
  if (p.options.command.empty()) throw UsageError("missing the command to run");
  if (p.options.servers >= p.options.numRanks && p.options.servers > 0) {
    throw UsageError("--servers " + std::to_string(p.options.servers) + " with -np " +
                     std::to_string(p.options.numRanks) +
                     ": the servers must be fewer than the ranks (at least one worker)");
  }
  if (p.options.validators > 0 && p.options.servers == 0) {
    throw UsageError(
        "--validators " + std::to_string(p.options.validators) +
        " needs --servers S (validators are workers of a parameter-server job)");
  }
  if (p.options.validators > 0 &&
      p.options.validators >= p.options.numRanks - p.options.servers) {
    throw UsageError("--validators " + std::to_string(p.options.validators) +
                     " with -np " + std::to_string(p.options.numRanks) +
                     " and --servers " + std::to_string(p.options.servers) +
                     ": at least one worker must train");
  }
  if (p.gloo && p.options.mpi) throw UsageError("give either --gloo or --mpi, not both");
  if (p.options.hpo && p.options.servers > 0) {
    throw UsageError("--hpo cannot be combined with --servers");
  }
  checkElastic(p.options);
  if (!p.options.mpiArgs.empty() && !p.options.mpi) {
    throw UsageError("--mpi-args needs --mpi (they are flags of mpirun)");
  }
  applyBindingArgs(p);
  applySshOptions(p);
  checkSlots(p.options);
}

}  // namespace

LaunchOptions parseArguments(int argc, const char* const* argv) {
  Parse p;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the command starts here
    const auto [flag, inlineValue] = splitInline(arg);
    const Flag& spec = findFlag(flag, arg);
    if (spec.apply == unsupported) unsupported(p, spec, flag, "");  // before its value
    std::string value = valueOf(spec, flag, inlineValue, argc, argv, i);
    if (spec.apply == blacklistCooldown && !inlineValue) {
      if (i + 1 >= argc) throw UsageError("option " + flag + " needs two values: LO HI");
      value += std::string(" ") + argv[++i];  // horovodrun's two arguments
    }
    spec.apply(p, spec, flag, value);
    if (p.options.showHelp || p.options.showVersion) return p.options;
  }
  for (; i < argc; ++i) p.options.command.emplace_back(argv[i]);
  finish(p);
  return p.options;
}

std::string usageText() {
  return "usage: kolorun -np N [options] CMD [ARGS...]\n"
         "\n"
         "Starts N ranks of CMD on this host or on the hosts given, with the kolo\n"
         "rendezvous set up. Each output line is prefixed with [rank]. When one\n"
         "rank fails the others are ended and kolorun exits with its code (with\n"
         "--servers, a worker's failure is left to the parameter servers).\n"
         "\n"
         "options:\n"
         "  -np N, -n N         number of ranks (required, >= 1)\n"
         "  --servers S         S of the N ranks are parameter servers, one per\n"
         "                      host first (sets KOLO_SERVERS; S < N); a failed\n"
         "                      worker does not end the job, a failed server does\n"
         "  --validators V      with --servers: the last V workers validate\n"
         "                      instead of training (sets KOLO_VALIDATORS)\n"
         "  --hpo               a kolo.hpo study: a failed rank other than 0\n"
         "                      fails only its team's trial, not the job\n"
         "  -H HOST[:SLOTS],... hosts and their slots (default 1); ranks fill\n"
         "                      them in order. Without -H: the hosts of the LSF\n"
         "                      or Slurm allocation kolorun runs in, else all\n"
         "                      ranks here\n"
         "  --hostfile FILE     hosts from FILE: 'HOST slots=N' or 'HOST:N' lines\n"
         "  --ssh-command CMD   how remote ranks start: CMD HOST 'COMMAND LINE'\n"
         "                      (default: ssh -o BatchMode=yes)\n"
         "  -p PORT, -i FILE    add -p PORT / -i FILE to the ssh command\n"
         "  --network-interface IF  interface (or IPv4 address) for kolo's\n"
         "                      traffic between hosts (sets KOLO_IFACE)\n"
         "  --oversubscribe     allow more ranks than slots\n"
         "  --start-timeout S   how long a remote host may take to answer the\n"
         "                      probe before the launch (default 30)\n"
         "  --mpi               launch through mpirun instead (same options)\n"
         "  --mpi-args ARGS     with --mpi: more flags for mpirun\n"
         "  --gloo              kolo's own launch and transports (the default)\n"
         "  --timeout S         end the job after S seconds (exit 124); 0: no limit\n"
         "  --min-np A, --max-np B  elastic training (docs/elastic.md): a failed\n"
         "                      rank does not end the job; the others form a new\n"
         "                      world while at least A remain\n"
         "  --elastic-timeout S wait this long for --min-np workers (default 600)\n"
         "  --reset-limit N     fail the job at the N+1-th re-formed world\n"
         "  --host-discovery-script S  hosts from S (HOST[:SLOTS] lines), run\n"
         "                      every second: new hosts get workers (up to\n"
         "                      --max-np), hosts that vanish lose theirs\n"
         "  --slots-per-host K  slots of a discovered host without :SLOTS (1)\n"
         "  --blacklist-cooldown-range LO HI  a failed host is unused for a\n"
         "                      random LO..HI s (default: for the whole job)\n"
         "  --output-dir DIR    also write each rank's output to\n"
         "                      DIR/rank.R.stdout and DIR/rank.R.stderr\n"
         "  -x NAME[=VALUE]     export NAME (set to VALUE) to every rank\n"
         "  --bind-to none|core|socket  bind each rank to CPUs: core gives local\n"
         "                      rank i of L the CPUs [i*C/L, (i+1)*C/L) of the C\n"
         "                      kolorun may use; socket one socket each; none\n"
         "                      (default) binds nothing; with --mpi, mpirun's\n"
         "                      --bind-to X\n"
         "  --binding-args ARGS horovodrun's: with --mpi, mpirun's binding flags;\n"
         "                      else '--bind-to X [--map-by slot]'\n"
         "  -v, --verbose       say what kolorun does\n"
         "  -h, --help          this text\n"
         "  --version           print the version\n"
         "\n"
         "horovodrun's flags (each sets a KOLO_* variable of every rank;\n"
         "docs/launching.md lists them all, and those kolorun refuses):\n"
         "  --num-proc N, --output-filename DIR, --network-interfaces IF,\n"
         "  --ssh-port PORT, --ssh-identity-file FILE   as above\n"
         "  --fusion-threshold-mb MB       KOLO_FUSION_THRESHOLD (in bytes)\n"
         "  --cycle-time-ms MS             KOLO_CYCLE_TIME\n"
         "  --cache-capacity N             KOLO_CACHE_CAPACITY\n"
         "  --[no-]hierarchical-allreduce  KOLO_HIERARCHICAL_ALLREDUCE\n"
         "  --[no-]autotune                KOLO_AUTOTUNE\n"
         "  --autotune-log-file FILE       KOLO_AUTOTUNE_LOG\n"
         "  --autotune-warmup-samples N    KOLO_AUTOTUNE_WARMUP_SAMPLES\n"
         "  --autotune-steps-per-sample N  KOLO_AUTOTUNE_STEPS_PER_SAMPLE\n"
         "  --timeline-filename FILE       KOLO_TIMELINE\n"
         "  --[no-]timeline-mark-cycles    KOLO_TIMELINE_MARK_CYCLES\n"
         "  --no-stall-check               KOLO_STALL_CHECK_DISABLE=1\n"
         "  --stall-check-warning-time-seconds S   KOLO_STALL_WARNING\n"
         "  --stall-check-shutdown-time-seconds S  KOLO_STALL_SHUTDOWN\n"
         "  --gloo-timeout-seconds S       KOLO_TIMEOUT\n"
         "  --log-level LEVEL              KOLO_LOG_LEVEL (TRACE..FATAL)\n"
         "\n"
         "Each rank gets KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE,\n"
         "KOLO_CROSS_RANK, KOLO_CROSS_SIZE, KOLO_HOST_ID, KOLO_RENDEZVOUS and\n"
         "KOLO_JOB_ID. Remote ranks also get the caller's KOLO_* and HOROVOD_*\n"
         "variables and those named by -x or set by the flags above.\n";
}

}  // namespace kolo::kolorun
