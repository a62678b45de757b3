#include "transport/mpi/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/logging.h"

namespace kolo::transport {
namespace {

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void checkMpi(int code, const char* call) {
  if (code != MPI_SUCCESS) {
    KOLO_THROW(ErrorCode::kIo, call << " failed: " << mpiErrorText(code));
  }
}

const char* levelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI thread level";
  }
}

// Set once by acquire(); never destroyed, so that the atexit handler and
// communicators destroyed late at exit still find it.
MpiRuntime* gRuntime = nullptr;
std::mutex gCreateMu;  // guards gRuntime's creation

// Runs at process exit when kolo initialized MPI. A communicator still
// alive at this point (never destroyed, or destroyed by a later static
// destructor) finds MPI finalized and fails its MPI calls with an error.
void finalizeAtExit() {
  if (gRuntime == nullptr) return;
  std::lock_guard<std::mutex> lock(gRuntime->mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (gRuntime->broken()) {
    KOLO_LOG(kDebug) << "MPI is not finalized at exit: the job is broken";
    return;
  }
  MPI_Finalize();
}

}  // namespace

MpiRuntime& MpiRuntime::acquire() {
  std::lock_guard<std::mutex> create(gCreateMu);
  if (gRuntime != nullptr) {
    std::lock_guard<std::mutex> lock(gRuntime->mu_);
    if (gRuntime->finalizedLocked()) {
      KOLO_THROW(ErrorCode::kIo, "MPI was already finalized; kolo cannot use it again");
    }
    return *gRuntime;
  }
  auto* rt = new MpiRuntime();
  try {
    rt->initialize();
    rt->discoverWorld();
  } catch (...) {
    // A runtime that owns MPI stays registered so that MPI is still
    // finalized at exit; otherwise nothing was changed.
    if (rt->owns_) {
      gRuntime = rt;
    } else {
      delete rt;
    }
    throw;
  }
  gRuntime = rt;
  return *rt;
}

void MpiRuntime::initialize() {
  std::lock_guard<std::mutex> lock(mu_);
  int initialized = 0;
  checkMpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) {
    if (finalizedLocked()) {
      KOLO_THROW(ErrorCode::kIo,
                 "the program already called MPI_Finalize; kolo cannot use MPI");
    }
    checkMpi(MPI_Query_thread(&threadLevel_), "MPI_Query_thread");
  } else {
    checkMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &threadLevel_),
             "MPI_Init_thread");
    owns_ = true;
    std::atexit(finalizeAtExit);  // acquire() keeps this runtime registered
  }
  KOLO_LOG(kDebug) << "MPI "
                   << (owns_ ? "initialized by kolo" : "initialized by the program")
                   << " at " << levelName(threadLevel_);
  if (threadLevel_ < MPI_THREAD_SERIALIZED) {
    KOLO_THROW(
        ErrorCode::kInvalidArgument,
        "MPI provides " << levelName(threadLevel_)
                        << " but kolo needs at least MPI_THREAD_SERIALIZED (it calls "
                           "MPI from its own thread): initialize MPI with "
                           "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  }
}

// Node grouping through MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the MPI
// library knows which ranks share a node (under OpenMPI: one daemon), which
// is right even where every "host" has the same host name (network
// namespaces of one machine). The leader is the lowest world rank of the
// node; the node count is the number of leaders.
void MpiRuntime::discoverWorld() {
  std::lock_guard<std::mutex> lock(mu_);
  checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_.rank), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &world_.size), "MPI_Comm_size");
  MPI_Comm node = MPI_COMM_NULL;
  checkMpi(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type");
  int leader = world_.rank;
  int rc = MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  int nodeSize = 1;
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &nodeSize);
  MPI_Comm_free(&node);
  checkMpi(rc, "MPI_Allreduce over the node");
  world_.nodeLeader = leader;
  world_.nodeSize = nodeSize;
  int isLeader = leader == world_.rank ? 1 : 0;
  checkMpi(MPI_Allreduce(&isLeader, &world_.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
           "MPI_Allreduce over the world");
}

const char* MpiRuntime::threadLevelName() const {
  return levelName(threadLevel_);
}

bool MpiRuntime::finalizedLocked() const {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

std::string MpiRuntime::broadcastFromRoot(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finalizedLocked()) KOLO_THROW(ErrorCode::kIo, "MPI was already finalized");
  int length = static_cast<int>(text.size());
  checkMpi(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string out =
      world_.rank == 0 ? text : std::string(static_cast<size_t>(length), '\0');
  checkMpi(MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

bool MpiRuntime::allAgree(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finalizedLocked()) KOLO_THROW(ErrorCode::kIo, "MPI was already finalized");
  int all = ok ? 1 : 0;
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD),
           "MPI_Allreduce");
  return all != 0;
}

}  // namespace kolo::transport
