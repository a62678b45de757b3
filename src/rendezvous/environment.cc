// Launcher detection. Reading the launchers' variables is this file's whole
// purpose, so it calls getenv directly (kolo's own knobs go through
// Settings).
//
// Decisions
// - torchrun: its own c10d store (the agent's) may already listen on
//   MASTER_PORT, so kolo's store uses MASTER_PORT + 1, hosted by rank 0.
// - srun over several nodes (SLURM_STEP_NUM_NODES or SLURM_NNODES > 1)
//   without KOLO_RENDEZVOUS: rank 0 hosts a TCP store on the first node of
//   the step's node list (Slurm places task 0 there) at a port derived from
//   the job and step ids, 20000 + (job * 16 + step) % 20000, so that
//   concurrent steps rarely meet; a port in use is a clear error on rank 0
//   and KOLO_RENDEZVOUS picks another.
// - mpirun / PMI / one-node srun / one-host jsrun without KOLO_RENDEZVOUS:
//   a file store in
//   /tmp/kolo-<job id>, which only works when every rank sees the same /tmp
//   (one host); multi-host mpirun jobs use the MPI engine (rank 0's store
//   address is broadcast over MPI) or set KOLO_RENDEZVOUS. The job id comes from
//   OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE (Open MPI), SLURM_JOB_ID and
//   SLURM_STEP_ID (srun), PMI_JOBID, or as a last resort the parent process
//   id (the launcher daemon that all ranks of one host share). jsrun over
//   several hosts (JSM_NAMESPACE_LOCAL_SIZE < JSM_NAMESPACE_SIZE) gets no
//   file store that would hang: the MPI engine, KOLO_RENDEZVOUS or kolorun.
// - The launchers are a table (kLaunchers below): one reader per launcher,
//   tried in order; a new launcher is one row and one reader.
// - KOLO_RENDEZVOUS given to a non-kolo launcher: a tcp:// address is hosted
//   by rank 0 (there is no kolorun to host it). Under kolorun (source
//   "kolo") the launcher hosts the store, so no rank does.
#include "rendezvous/environment.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"
#include "rendezvous/slurm_lists.h"

namespace kolo::rendezvous {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool present(const char* name) {
  return env(name) != nullptr;
}

int parseNonNegative(const char* name, const char* text) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < 0 || v > (1L << 30)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               name << "='" << text << "' is not a non-negative integer");
  }
  return static_cast<int>(v);
}

std::optional<int> optionalInt(const char* name) {
  const char* v = env(name);
  if (v == nullptr) return std::nullopt;
  return parseNonNegative(name, v);
}

// The first of `names` that is set, parsed; `what` names them in the error.
int requiredInt(std::initializer_list<const char*> names, const char* source) {
  for (const char* n : names) {
    if (auto v = optionalInt(n)) return *v;
  }
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string(n);
  KOLO_THROW(ErrorCode::kInvalidArgument,
             source << " launch detected but " << list << " is not set");
}

std::optional<int> firstInt(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = optionalInt(n)) return v;
  }
  return std::nullopt;
}

// Slurm's task count of node `node` ("2(x3),1": nodes 0-2 run 2, node 3
// runs 1).
int slurmTasksOnNode(const char* name, const std::string& text, int node) {
  const std::vector<int> counts = expandSlurmCounts(name, text);
  if (node >= static_cast<int>(counts.size())) {
    KOLO_THROW(ErrorCode::kInvalidArgument, name << "='" << text << "' lists "
                                                 << counts.size()
                                                 << " nodes but SLURM_NODEID=" << node);
  }
  return counts[node];
}

// tcp://FIRST-NODE:PORT for an srun step over several nodes, or "" when the
// step runs on one node (or Slurm does not say).
std::string slurmTcpRendezvous() {
  const char* nodesVar =
      present("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const int nodes = optionalInt(nodesVar).value_or(1);
  if (nodes <= 1) return "";
  const char* listVar = present("SLURM_STEP_NODELIST")  ? "SLURM_STEP_NODELIST"
                        : present("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST"
                                                        : "SLURM_NODELIST";
  const char* list = env(listVar);
  if (list == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "srun launch over " << nodesVar << "=" << nodes
                                   << " nodes but no SLURM_STEP_NODELIST or "
                                      "SLURM_JOB_NODELIST; set KOLO_RENDEZVOUS");
  }
  const long job = optionalInt("SLURM_JOB_ID").value_or(0);
  const long step = firstInt({"SLURM_STEP_ID", "SLURM_STEPID"}).value_or(0);
  const long port = 20000 + (job * 16 + step) % 20000;
  return "tcp://" + expandSlurmHostList(listVar, list).front() + ":" +
         std::to_string(port);
}

std::string sanitize(std::string id) {
  for (char& c : id) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  return id;
}

std::string jobId() {
  if (const char* v = env("OMPI_MCA_ess_base_jobid")) return v;
  if (const char* v = env("PMIX_NAMESPACE")) return v;
  if (const char* v = env("SLURM_JOB_ID")) {
    const char* step = env("SLURM_STEP_ID");
    if (step == nullptr) step = env("SLURM_STEPID");
    return std::string(v) + "." + (step != nullptr ? step : "0");
  }
  if (const char* v = env("PMI_JOBID")) return v;
  return "ppid" + std::to_string(::getppid());
}

void validate(JobEnvironment& job, const char* rankVar, const char* sizeVar,
              const char* localRankVar, const char* localSizeVar) {
  if (job.size < 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               sizeVar << "=" << job.size << " must be >= 1");
  }
  if (job.rank >= job.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, rankVar << "=" << job.rank << " is not below "
                                                    << sizeVar << "=" << job.size);
  }
  if (job.localSize == 0 || job.localSize > job.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, localSizeVar << "=" << job.localSize
                                                         << " must be in 1.." << sizeVar
                                                         << "=" << job.size);
  }
  if (job.localRank >= 0 && job.localSize > 0 && job.localRank >= job.localSize) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               localRankVar << "=" << job.localRank << " is not below " << localSizeVar
                            << "=" << job.localSize);
  }
}

bool isTcp(const char* address) {
  return address != nullptr && std::string(address).starts_with("tcp://");
}

// ---- the launchers, one reader each ----------------------------------------------
//
// A reader fills rank, size, local rank and size (validated) and the
// rendezvous of its launcher. `override` is KOLO_RENDEZVOUS (already checked
// to be tcp:// or file://), nullptr when unset.

// mpirun, PMI, one-host jsrun: KOLO_RENDEZVOUS (hosted by rank 0 when tcp),
// else a file store named after the job.
void sharedStore(JobEnvironment& job, const char* override) {
  if (override != nullptr) {
    job.rendezvous = override;
    job.hostStore = isTcp(override) && job.rank == 0;
  } else if (job.size > 1) {
    job.rendezvous = "file:///tmp/kolo-" + sanitize(jobId());
  }
}

// The four counts of launchers that name one variable each: rank and size
// required, the local ones optional (-1), then validated together.
void readCounts(JobEnvironment& job, const char* launcher, const char* rankVar,
                const char* sizeVar, const char* localRankVar, const char* localSizeVar) {
  job.rank = requiredInt({rankVar}, launcher);
  job.size = requiredInt({sizeVar}, launcher);
  job.localRank = optionalInt(localRankVar).value_or(-1);
  job.localSize = optionalInt(localSizeVar).value_or(-1);
  validate(job, rankVar, sizeVar, localRankVar, localSizeVar);
}

void readKolo(JobEnvironment& job, const char* override) {
  readCounts(job, "kolo", "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE");
  if (override != nullptr) {
    job.rendezvous = override;
  } else if (job.size > 1) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_SIZE=" << job.size
                            << " but KOLO_RENDEZVOUS is not set (kolorun sets it; by "
                               "hand use tcp://HOST:PORT or file:///DIRECTORY)");
  }
  job.hostStore = false;  // kolorun (or whoever set KOLO_*) hosts the store
  if (present("KOLO_ELASTIC_WORKER")) {
    job.elasticWorker =
        parseNonNegative("KOLO_ELASTIC_WORKER", env("KOLO_ELASTIC_WORKER"));
    job.elasticTimeoutSeconds =
        present("KOLO_ELASTIC_TIMEOUT")
            ? parseNonNegative("KOLO_ELASTIC_TIMEOUT", env("KOLO_ELASTIC_TIMEOUT"))
            : 600;
  }
}

void readMpirun(JobEnvironment& job, const char* override) {
  readCounts(job, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
             "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  sharedStore(job, override);
}

// jsrun's own variables (without IBM Spectrum MPI's OMPI_COMM_WORLD_*, which
// the mpirun row reads first). Ranks on one host share a file store; over
// several hosts there is no address every rank knows before the job
// starts, so the rendezvous stays empty (the MPI engine needs none; without
// it the communicator asks for KOLO_RENDEZVOUS).
void readJsrun(JobEnvironment& job, const char* override) {
  readCounts(job, "jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE",
             "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_LOCAL_SIZE");
  const bool severalHosts = job.localSize > 0 && job.localSize < job.size;
  if (override != nullptr || !severalHosts) sharedStore(job, override);
}

void readPmi(JobEnvironment& job, const char* override) {
  job.rank = requiredInt({"PMI_RANK"}, "PMI");
  job.size = requiredInt({"PMI_SIZE"}, "PMI");
  job.localRank = firstInt({"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}).value_or(-1);
  job.localSize = firstInt({"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}).value_or(-1);
  validate(job, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  sharedStore(job, override);
}

void readSrun(JobEnvironment& job, const char* override) {
  job.rank = requiredInt({"SLURM_PROCID"}, "srun");
  // An srun step sets SLURM_STEP_NUM_TASKS; a batch script only the
  // allocation's SLURM_NTASKS.
  const char* sizeVar = present("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                        : present("SLURM_NTASKS")       ? "SLURM_NTASKS"
                                                        : "SLURM_NPROCS";
  job.size = requiredInt({sizeVar}, "srun");
  job.localRank = optionalInt("SLURM_LOCALID").value_or(-1);
  const char* listVar = present("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                             : "SLURM_TASKS_PER_NODE";
  if (const char* list = env(listVar)) {
    int node = optionalInt("SLURM_NODEID").value_or(0);
    job.localSize = slurmTasksOnNode(listVar, list, node);
  }
  validate(job, "SLURM_PROCID", sizeVar, "SLURM_LOCALID", listVar);
  std::string tcp;
  if (override == nullptr && job.size > 1) tcp = slurmTcpRendezvous();
  if (!tcp.empty()) {
    job.rendezvous = tcp;
    job.hostStore = job.rank == 0;
  } else {
    sharedStore(job, override);
  }
}

void readTorchrun(JobEnvironment& job, const char* override) {
  readCounts(job, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (override != nullptr) {
    job.rendezvous = override;
    job.hostStore = isTcp(override) && job.rank == 0;
    return;
  }
  const char* addr = env("MASTER_ADDR");
  const char* portText = env("MASTER_PORT");
  if (addr == nullptr || portText == nullptr) {
    if (job.size == 1) return;
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "torchrun launch detected (RANK, WORLD_SIZE) but "
                   << (addr == nullptr ? "MASTER_ADDR" : "MASTER_PORT") << " is not set");
  }
  int port = parseNonNegative("MASTER_PORT", portText);
  if (port < 1 || port >= 65535) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        "MASTER_PORT='" << portText
                        << "' must be in 1..65534 (kolo's store uses MASTER_PORT+1)");
  }
  std::string host = addr;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  job.rendezvous = "tcp://" + host + ":" + std::to_string(port + 1);
  job.hostStore = job.rank == 0;
}

// The launchers in the order they are tried: the first whose variables are
// set started this process. kolorun's own come first (it may run under any
// of the others); Open MPI's before jsrun's, since IBM Spectrum MPI under
// jsrun sets both and its MPI library agrees with OMPI_COMM_WORLD_*; RANK
// alone is too common a name, so torchrun needs WORLD_SIZE as well.
struct Launcher {
  const char* source;  // JobEnvironment::source
  bool (*detected)();
  void (*read)(JobEnvironment& job, const char* override);
};

const Launcher kLaunchers[] = {
    {"kolo", [] { return present("KOLO_RANK") || present("KOLO_SIZE"); }, readKolo},
    {"mpirun",
     [] { return present("OMPI_COMM_WORLD_RANK") || present("OMPI_COMM_WORLD_SIZE"); },
     readMpirun},
    {"jsrun",
     [] { return present("JSM_NAMESPACE_RANK") || present("JSM_NAMESPACE_SIZE"); },
     readJsrun},
    {"pmi", [] { return present("PMI_RANK") || present("PMI_SIZE"); }, readPmi},
    {"srun", [] { return present("SLURM_PROCID"); }, readSrun},
    {"torchrun", [] { return present("RANK") && present("WORLD_SIZE"); }, readTorchrun},
};

}  // namespace

JobEnvironment detectJobEnvironment() {
  const char* override = env("KOLO_RENDEZVOUS");
  if (override != nullptr && !std::string(override).starts_with("tcp://") &&
      !std::string(override).starts_with("file://")) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_RENDEZVOUS='" << override
                                   << "' is not tcp://HOST:PORT or file:///DIRECTORY");
  }
  JobEnvironment job;
  for (const Launcher& launcher : kLaunchers) {
    if (!launcher.detected()) continue;
    job.source = launcher.source;
    launcher.read(job, override);
    return job;
  }
  job.source = "none";
  if (override != nullptr) job.rendezvous = override;
  return job;
}

}  // namespace kolo::rendezvous
