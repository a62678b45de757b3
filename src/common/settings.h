// Every knob of kolo, declared once: type, field, env name, default, doc.
//
// Code never calls getenv for a knob; it receives a Settings (built once by
// Settings::fromEnvironment() at init, or by hand in tests) through its
// constructor. docs/env.md is generated from this list (kolo-bench
// --list-settings prints it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo {

// X(type, field, env name, default, doc)
#define KOLO_SETTINGS(X)                                                      \
  X(double, timeoutSeconds, "KOLO_TIMEOUT", 30.0,                             \
    "Seconds a rank waits on a silent peer (alive but not answering) "        \
    "before failing with an error naming it.")                                \
  X(double, connectTimeoutSeconds, "KOLO_CONNECT_TIMEOUT", 60.0,              \
    "Seconds to wait at start-up for every rank to reach the rendezvous.")    \
  X(std::string, allreduceAlgorithm, "KOLO_ALLREDUCE_ALGO", "",               \
    "Force one allreduce algorithm: shm, ring, rhd, tree, hier or ordered "   \
    "(rank-order sums). Empty: the selection table picks by size and "        \
    "topology.")                                                              \
  X(std::string, transport, "KOLO_TRANSPORT", "auto",                         \
    "Transports between ranks: auto (shm within a host; between hosts mpi "   \
    "under the MPI engine, else tcp), shm (same as auto), tcp (tcp to every " \
    "peer) or mpi (MPI to every peer; needs a build with MPI).")              \
  X(std::string, hostId, "KOLO_HOST_ID", "",                                  \
    "Override the host identity used to group ranks into hosts; ranks "       \
    "with different ids talk tcp even on one machine (pretend hosts).")       \
  X(std::string, networkInterface, "KOLO_IFACE", "",                          \
    "Network interface (or IP address) to listen on and advertise for tcp; "  \
    "empty: the address that reaches the rendezvous.")                        \
  X(int64_t, shmChunkBytes, "KOLO_SHM_CHUNK_BYTES", 131072,                   \
    "Pipeline chunk of the shared-memory collectives, per rank.")             \
  X(std::string, shmStores, "KOLO_SHM_STORES", "auto",                        \
    "Stores that fill the shared-memory staging slots: plain, streaming "     \
    "(non-temporal), or auto (the faster of the two by the time of recent "   \
    "calls, per size).")                                                      \
  X(int64_t, spinMicros, "KOLO_SPIN_US", 100,                                 \
    "Microseconds a waiting rank busy-polls before yielding the core "        \
    "(shortened automatically when ranks outnumber cores).")                  \
  X(int64_t, tcpBufferBytes, "KOLO_TCP_BUFFER_BYTES", 4194304,                \
    "SO_SNDBUF/SO_RCVBUF for tcp links.")                                     \
  X(std::string, logLevel, "KOLO_LOG_LEVEL", "warning",                       \
    "Minimum level logged to stderr: debug, info, warning or error.")         \
  X(int64_t, fusionThresholdBytes, "KOLO_FUSION_THRESHOLD", 67108864,         \
    "Runtime: ready allreduces of one dtype and reduction are packed into "   \
    "one collective up to this many bytes (0: no fusion).")                   \
  X(double, cycleTimeMs, "KOLO_CYCLE_TIME", 1.0,                              \
    "Runtime: milliseconds a negotiation cycle gathers submissions.")         \
  X(int64_t, cacheCapacity, "KOLO_CACHE_CAPACITY", 1024,                      \
    "Runtime: operations remembered by the response cache (one bit each "     \
    "in the per-cycle exchange).")                                            \
  X(double, stallWarningSeconds, "KOLO_STALL_WARNING", 60.0,                  \
    "Runtime: seconds an operation may wait for other ranks before rank 0 "   \
    "logs which ranks it waits on.")                                          \
  X(double, stallShutdownSeconds, "KOLO_STALL_SHUTDOWN", 0.0,                 \
    "Runtime: seconds of such a wait that end the job with that message "     \
    "(0: never).")                                                            \
  X(std::string, timelinePath, "KOLO_TIMELINE", "",                           \
    "Runtime: write a Chrome-trace timeline (Perfetto) to this file; "        \
    "empty: none.")                                                           \
  X(int64_t, deterministic, "KOLO_DETERMINISTIC", 0,                          \
    "Runtime: 1 sums each element in rank order, so results do not depend "   \
    "on fusion, cycle time or algorithm.")                                    \
  X(int64_t, autotune, "KOLO_AUTOTUNE", 0,                                    \
    "Runtime: 1 tries fusion thresholds and cycle times in the first steps "  \
    "and keeps the fastest.")                                                 \
  X(double, stragglerMarginMs, "KOLO_STRAGGLER_MARGIN_MS", 5.0,               \
    "Runtime: a rank is a step's straggler only when its mean lag exceeds "   \
    "this many milliseconds (the floor under KOLO_STRAGGLER_FRACTION).")      \
  X(double, stragglerFraction, "KOLO_STRAGGLER_FRACTION", 0.25,               \
    "Runtime: a rank last in most of a step's operations by more than this "  \
    "fraction of the step time on average is that step's straggler.")         \
  X(double, stragglerWindowSeconds, "KOLO_STRAGGLER_WINDOW", 20.0,            \
    "Runtime: rank 0 names a rank in a log line when it was the straggler "   \
    "of most steps over this many seconds (and at least 10 steps).")          \
  X(double, stragglerIntervalSeconds, "KOLO_STRAGGLER_INTERVAL", 60.0,        \
    "Runtime: minimum seconds between two straggler log lines.")              \
  X(int64_t, runtimeSpinMicros, "KOLO_RUNTIME_SPIN_US", 50,                   \
    "Runtime: microseconds the background thread busy-polls in a wait for "   \
    "another rank before it sleeps until woken (at most KOLO_SPIN_US).")

struct Settings {
#define KOLO_SETTING_FIELD(type, field, env, def, doc) type field = def;
  KOLO_SETTINGS(KOLO_SETTING_FIELD)
#undef KOLO_SETTING_FIELD

  // Defaults overridden by the environment. A malformed value throws
  // Error(kInvalidArgument) naming the variable and the value.
  static Settings fromEnvironment();

  struct Description {
    std::string env;
    std::string defaultValue;
    std::string doc;
  };
  static std::vector<Description> describe();
};

}  // namespace kolo
