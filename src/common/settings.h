// Every knob of kolo, declared once: type, field, env name, default, the
// Horovod variable read as its alias, doc.
//
// Code never calls getenv for a knob; it receives a Settings (built once by
// Settings::fromEnvironment() at init, or by hand in tests) through its
// constructor. docs/env.md is generated from this list (kolo-bench
// --list-settings prints it).
//
// Horovod's variables: a setting's alias (horovod("HOROVOD_...")) is read
// when the KOLO_ variable is unset or empty, converted by its AliasForm;
// the KOLO_ variable wins when both are set. Horovod variables that no
// setting stands for are listed in KOLO_HOROVOD_UNHONOURED below: ignored
// (with the reason) or, for values kolo cannot honour, an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

// How a Horovod alias's value becomes the setting's.
enum class AliasForm {
  kNone,      // no alias
  kSame,      // same meaning and units: parsed as the setting is
  kLogLevel,  // trace..fatal, any case: trace is debug, fatal is error
  kTimeline,  // a path; DYNAMIC: no file at start (start_timeline() later)
};

struct SettingAlias {
  const char* env;
  AliasForm form;
};

inline constexpr SettingAlias kNoAlias{"", AliasForm::kNone};
constexpr SettingAlias horovod(const char* env, AliasForm form = AliasForm::kSame) {
  return {env, form};
}

// X(type, field, env name, default, Horovod alias, doc)
#define KOLO_SETTINGS(X)                                                            \
  X(double, timeoutSeconds, "KOLO_TIMEOUT", 30.0,                                   \
    horovod("HOROVOD_GLOO_TIMEOUT_SECONDS"),                                        \
    "Seconds a rank waits on a silent peer (alive but not answering) "              \
    "before failing with an error naming it.")                                      \
  X(double, connectTimeoutSeconds, "KOLO_CONNECT_TIMEOUT", 60.0, kNoAlias,          \
    "Seconds to wait at start-up for every rank to reach the rendezvous.")          \
  X(int64_t, servers, "KOLO_SERVERS", 0, kNoAlias,                                  \
    "Parameter servers among the job's ranks (kolorun --servers): on them "         \
    "kolo_init runs the server and exits; the others are the workers' world.")      \
  X(std::string, validators, "KOLO_VALIDATORS", "", kNoAlias,                       \
    "With KOLO_SERVERS: the last V workers validate instead of training "           \
    "(kolorun --validators V; kolo_ps_validators). Empty: none.")                   \
  X(std::string, allreduceAlgorithm, "KOLO_ALLREDUCE_ALGO", "", kNoAlias,           \
    "Force one allreduce algorithm: shm, ring, rhd, tree, hier or ordered "         \
    "(rank-order sums). Empty: the selection picks by size and topology with "      \
    "the scale model (docs/scale.md).")                                             \
  X(std::string, algorithm, "KOLO_ALGORITHM", "", kNoAlias,                         \
    "The same as KOLO_ALLREDUCE_ALGO (the name docs/scale.md uses); "               \
    "KOLO_ALLREDUCE_ALGO wins when both are set.")                                  \
  X(std::string, predictConstants, "KOLO_PREDICT_CONSTANTS", "", kNoAlias,          \
    "Constants file of the scale model (kolo-predict calibrate) for kolo's "        \
    "allreduce selection and kolo-predict; rank 0's is used by every rank. "        \
    "Empty: the built-in constants.")                                               \
  X(std::string, linkRate, "KOLO_LINK_RATE", "", kNoAlias,                          \
    "Each host's network link rate, each way (e.g. 10gbit, 100mbit), for kolo's "   \
    "allreduce selection (the scale model); rank 0's is used by every rank. "       \
    "Empty: links priced by the transports' constants alone.")                      \
  X(int64_t, hostCores, "KOLO_HOST_CORES", 0, kNoAlias,                             \
    "Cores the ranks of one host share, for kolo's allreduce selection (the "       \
    "scale model prices the waits for a core when ranks outnumber them); rank "     \
    "0's is used by every rank. 0: a core per rank.")                               \
  X(int64_t, hostsShareCores, "KOLO_HOSTS_SHARE_CORES", 0, kNoAlias,                \
    "1: every host of the job runs on one machine's KOLO_HOST_CORES cores "         \
    "(emulated hosts: network namespaces, containers), for kolo's allreduce "       \
    "selection; rank 0's is used by every rank.")                                   \
  X(int64_t, hierarchicalAllreduce, "KOLO_HIERARCHICAL_ALLREDUCE", 0,               \
    horovod("HOROVOD_HIERARCHICAL_ALLREDUCE"),                                      \
    "1: allreduces use hier when the job spans hosts; on one host the "             \
    "selection table (Horovod too ignores it there). KOLO_ALLREDUCE_ALGO "          \
    "wins when set.")                                                               \
  X(std::string, devicePath, "KOLO_DEVICE_PATH", "auto", kNoAlias,                  \
    "How collectives on CUDA device memory run: auto (CUDA IPC between ranks "      \
    "of a host, NCCL with one rank per GPU, hierarchical across hosts, host "       \
    "staging where none applies), staged, ipc, nccl or hier (a path that "          \
    "cannot run is an error naming why). Must be the same on every rank.")          \
  X(std::string, transport, "KOLO_TRANSPORT", "auto", kNoAlias,                     \
    "Transports between ranks: auto (shm within a host; between hosts mpi "         \
    "under the MPI engine, else tcp), shm (same as auto), tcp (tcp to every "       \
    "peer) or mpi (MPI to every peer; needs a build with MPI).")                    \
  X(std::string, hostId, "KOLO_HOST_ID", "", kNoAlias,                              \
    "Override the host identity used to group ranks into hosts; ranks "             \
    "with different ids talk tcp even on one machine (pretend hosts).")             \
  X(std::string, networkInterface, "KOLO_IFACE", "", horovod("HOROVOD_GLOO_IFACE"), \
    "Network interface (or IP address) to listen on and advertise for tcp; "        \
    "empty: the address that reaches the rendezvous.")                              \
  X(std::string, jobSecret, "KOLO_JOB_SECRET", "", kNoAlias,                        \
    "The job's secret: the store and every link prove knowledge of it, and a "      \
    "file store's entries are signed with it (docs/security.md). kolorun sets a "   \
    "fresh one per job; under another launcher every rank needs the same value "    \
    "(or KOLO_JOB_SECRET_FILE). Empty: unauthenticated (rank 0 warns once when "    \
    "its store listens beyond loopback).")                                          \
  X(std::string, jobSecretFile, "KOLO_JOB_SECRET_FILE", "", kNoAlias,               \
    "A file whose contents (trailing newline dropped) are the job secret, "         \
    "read when KOLO_JOB_SECRET is empty.")                                          \
  X(int64_t, shmChunkBytes, "KOLO_SHM_CHUNK_BYTES", 131072, kNoAlias,               \
    "Pipeline chunk of the shared-memory collectives, per rank.")                   \
  X(std::string, shmStores, "KOLO_SHM_STORES", "auto", kNoAlias,                    \
    "Stores that fill the shared-memory staging slots: plain, streaming "           \
    "(non-temporal), or auto (the faster of the two by the time of recent "         \
    "calls, per size).")                                                            \
  X(int64_t, spinMicros, "KOLO_SPIN_US", 100, kNoAlias,                             \
    "Microseconds a waiting rank busy-polls before yielding the core "              \
    "(shortened automatically when ranks outnumber cores).")                        \
  X(int64_t, tcpBufferBytes, "KOLO_TCP_BUFFER_BYTES", 4194304, kNoAlias,            \
    "SO_SNDBUF/SO_RCVBUF for tcp links.")                                           \
  X(std::string, logLevel, "KOLO_LOG_LEVEL", "warning",                             \
    horovod("HOROVOD_LOG_LEVEL", AliasForm::kLogLevel),                             \
    "Minimum level logged to stderr: debug, info, warning or error.")               \
  X(int64_t, fusionThresholdBytes, "KOLO_FUSION_THRESHOLD", 67108864,               \
    horovod("HOROVOD_FUSION_THRESHOLD"),                                            \
    "Runtime: ready allreduces of one dtype and reduction are packed into "         \
    "one collective up to this many bytes (0: no fusion).")                         \
  X(double, cycleTimeMs, "KOLO_CYCLE_TIME", 1.0, horovod("HOROVOD_CYCLE_TIME"),     \
    "Runtime: milliseconds a negotiation cycle gathers submissions.")               \
  X(int64_t, cacheCapacity, "KOLO_CACHE_CAPACITY", 1024,                            \
    horovod("HOROVOD_CACHE_CAPACITY"),                                              \
    "Runtime: operations remembered by the response cache (one bit each "           \
    "in the per-cycle exchange).")                                                  \
  X(double, stallWarningSeconds, "KOLO_STALL_WARNING", 60.0,                        \
    horovod("HOROVOD_STALL_CHECK_TIME_SECONDS"),                                    \
    "Runtime: seconds an operation may wait for other ranks before rank 0 "         \
    "logs which ranks it waits on.")                                                \
  X(double, stallShutdownSeconds, "KOLO_STALL_SHUTDOWN", 0.0,                       \
    horovod("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"),                                 \
    "Runtime: seconds of such a wait that end the job with that message "           \
    "(0: never).")                                                                  \
  X(int64_t, stallCheckDisable, "KOLO_STALL_CHECK_DISABLE", 0,                      \
    horovod("HOROVOD_STALL_CHECK_DISABLE"),                                         \
    "Runtime: 1 turns the stall check off (no KOLO_STALL_WARNING lines, no "        \
    "KOLO_STALL_SHUTDOWN).")                                                        \
  X(std::string, timelinePath, "KOLO_TIMELINE", "",                                 \
    horovod("HOROVOD_TIMELINE", AliasForm::kTimeline),                              \
    "Runtime: write a Chrome-trace timeline (Perfetto) to this file; "              \
    "empty: none.")                                                                 \
  X(int64_t, timelineMarkCycles, "KOLO_TIMELINE_MARK_CYCLES", 0,                    \
    horovod("HOROVOD_TIMELINE_MARK_CYCLES"),                                        \
    "Runtime: 1 adds an instant event CYCLE_START (track 'cycles') to the "         \
    "timeline at the start of every negotiation cycle.")                            \
  X(int64_t, deterministic, "KOLO_DETERMINISTIC", 0, kNoAlias,                      \
    "Runtime: 1 sums each element in rank order, so results do not depend "         \
    "on fusion, cycle time or algorithm.")                                          \
  X(int64_t, autotune, "KOLO_AUTOTUNE", 0, horovod("HOROVOD_AUTOTUNE"),             \
    "Runtime: 1 tries fusion thresholds and cycle times in the first steps "        \
    "and keeps the fastest.")                                                       \
  X(std::string, autotuneLogPath, "KOLO_AUTOTUNE_LOG", "",                          \
    horovod("HOROVOD_AUTOTUNE_LOG"),                                                \
    "Runtime: with KOLO_AUTOTUNE=1, rank 0 writes each candidate's score to "       \
    "this CSV file, the chosen one last; empty: none.")                             \
  X(int64_t, autotuneWarmupSamples, "KOLO_AUTOTUNE_WARMUP_SAMPLES", 2,              \
    horovod("HOROVOD_AUTOTUNE_WARMUP_SAMPLES"),                                     \
    "Runtime: autotuning drops this many samples (negotiation cycles that "         \
    "ran work) after each change of candidate.")                                    \
  X(int64_t, autotuneStepsPerSample, "KOLO_AUTOTUNE_STEPS_PER_SAMPLE", 5,           \
    horovod("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"),                                   \
    "Runtime: autotuning scores each candidate over this many samples "             \
    "(at least 1).")                                                                \
  X(double, stragglerMarginMs, "KOLO_STRAGGLER_MARGIN_MS", 5.0, kNoAlias,           \
    "Runtime: a rank is a step's straggler only when its mean lag exceeds "         \
    "this many milliseconds (the floor under KOLO_STRAGGLER_FRACTION).")            \
  X(double, stragglerFraction, "KOLO_STRAGGLER_FRACTION", 0.25, kNoAlias,           \
    "Runtime: a rank last in most of a step's operations by more than this "        \
    "fraction of the step time on average is that step's straggler.")               \
  X(double, stragglerWindowSeconds, "KOLO_STRAGGLER_WINDOW", 20.0, kNoAlias,        \
    "Runtime: rank 0 names a rank in a log line when it was the straggler "         \
    "of most steps over this many seconds (and at least 10 steps).")                \
  X(double, stragglerIntervalSeconds, "KOLO_STRAGGLER_INTERVAL", 60.0, kNoAlias,    \
    "Runtime: minimum seconds between two straggler log lines.")                    \
  X(int64_t, runtimeSpinMicros, "KOLO_RUNTIME_SPIN_US", 50, kNoAlias,               \
    "Runtime: microseconds the background thread busy-polls in a wait for "         \
    "another rank before it sleeps until woken (at most KOLO_SPIN_US).")            \
  X(std::string, joinMode, "KOLO_JOIN_MODE", "horovod", kNoAlias,                   \
    "Runtime: what a rank that called join() is to the others' operations: "        \
    "horovod (it contributes zeros: an Average divides by the team's size, "        \
    "and an allgather, alltoall, broadcast or reducescatter fails on the "          \
    "others, naming it) or absent (left out: an Average divides by the "            \
    "ranks that submitted, an allgather or alltoall has no rows of it, a "          \
    "reducescatter averages over the others).")

// Horovod variables that no setting stands for:
// H(name, accepted values, reason). Accepted: "*" any value (the variable
// is ignored); else a comma list, any case, of the values that are accepted
// and ignored; "" none. A set, non-empty value outside the list fails
// Settings::fromEnvironment() naming the variable, the value and the reason.
#define KOLO_HOROVOD_UNHONOURED(H)                                                \
  H("HOROVOD_CPU_OPERATIONS", "MPI,GLOO",                                         \
    "kolo picks its own transports (shm within a host; tcp between hosts, or "    \
    "MPI under mpirun); KOLO_TRANSPORT chooses. kolo has no oneCCL backend.")     \
  H("HOROVOD_CONTROLLER", "MPI,GLOO",                                             \
    "kolo negotiates over its own collectives, on the transports of the job.")    \
  H("HOROVOD_HIERARCHICAL_ALLGATHER", "*",                                        \
    "kolo's allgather is one ring whatever the topology.")                        \
  H("HOROVOD_TORUS_ALLREDUCE", "*",                                               \
    "An NCCL algorithm, which Horovod too ignores without NCCL; "                 \
    "KOLO_HIERARCHICAL_ALLREDUCE is the nearest.")                                \
  H("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "*",                                \
    "kolo's autotuner walks a fixed grid of candidates; it has no Bayesian "      \
    "optimization.")                                                              \
  H("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "*",                               \
    "kolo's autotuner walks a fixed grid of candidates; it has no Gaussian "      \
    "process.")                                                                   \
  H("HOROVOD_ELASTIC", "0", "kolo does not support elastic training yet.")        \
  H("HOROVOD_MPI_THREADS_DISABLE", "0",                                           \
    "kolo's background thread calls MPI: its MPI engine needs "                   \
    "MPI_THREAD_SERIALIZED or more.")                                             \
  H("HOROVOD_GLOO_RENDEZVOUS_ADDR", "",                                           \
    "horovodrun's Gloo launch: kolo cannot join its rendezvous; start the job "   \
    "with kolorun (same command line) or horovodrun --mpi.")                      \
  H("HOROVOD_DYNAMIC_PROCESS_SETS", "*",                                          \
    "kolo's add_process_set and remove_process_set work at any time.")            \
  H("HOROVOD_DISABLE_GROUP_FUSION", "*",                                          \
    "kolo places a group whole in one bucket, which other ready allreduces "      \
    "may share (docs/runtime.md); there is no switch.")                           \
  H("HOROVOD_THREAD_AFFINITY", "*",                                               \
    "kolo does not pin its background thread; the OS schedules it.")              \
  H("HOROVOD_LOG_HIDE_TIME", "*", "kolo's log lines carry no time.")              \
  H("HOROVOD_ADASUM_MPI_CHUNK_SIZE", "*", "kolo has no Adasum.")                  \
  H("HOROVOD_CCL_CACHE", "*", "kolo has no oneCCL backend.")                      \
  H("HOROVOD_NUM_NCCL_STREAMS", "*", "NCCL runs on the caller's stream.")         \
  H("HOROVOD_BATCH_D2D_MEMCOPIES", "*", "One copy per device tensor.")            \
  H("HOROVOD_ENABLE_ASYNC_COMPLETION", "*", "kolo completes on written outputs.") \
  H("HOROVOD_DISABLE_NVTX_RANGES", "*", "kolo emits no NVTX ranges.")             \
  H("HOROVOD_ENABLE_XLA_OPS", "*", "TensorFlow only; kolo has no TensorFlow binding.")

struct Settings {
#define KOLO_SETTING_FIELD(type, field, env, def, alias, doc) type field = def;
  KOLO_SETTINGS(KOLO_SETTING_FIELD)
#undef KOLO_SETTING_FIELD

  // Lines for the log (info, rank 0): each Horovod variable of
  // KOLO_HOROVOD_UNHONOURED that is set and ignored, with the reason.
  std::vector<std::string> ignoredHorovod;

  // Defaults overridden by the environment (each KOLO_ variable, else its
  // Horovod alias). A malformed value throws Error(kInvalidArgument) naming
  // the variable read and the value; so does a Horovod variable whose value
  // kolo cannot honour.
  static Settings fromEnvironment();

  struct Description {
    std::string env;
    std::string defaultValue;
    std::string doc;
    std::string alias;      // "" when none
    std::string aliasNote;  // how its value converts; "" when as is
  };
  static std::vector<Description> describe();

  struct HorovodVariable {
    std::string env;
    std::string accepted;  // as in KOLO_HOROVOD_UNHONOURED
    std::string reason;
  };
  static std::vector<HorovodVariable> describeHorovod();

  // The job secret: jobSecret, else the contents of jobSecretFile (one
  // trailing newline dropped), else "" (unauthenticated). Throws
  // Error(kInvalidArgument) naming the file when it cannot be read or is
  // empty.
  std::string resolveJobSecret() const;
};

}  // namespace kolo
