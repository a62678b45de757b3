#include "api/mpi_engine.h"

#include <kolo/config.h>

#include <cstdlib>
#include <string>

#include "common/check.h"
#include "common/logging.h"

#if KOLO_HAVE_MPI
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include "api/network_address.h"
#include "rendezvous/tcp_store.h"
#include "transport/mpi/mpi_runtime.h"
#endif

namespace kolo::api {

bool mpiEngineWanted(const rendezvous::JobEnvironment& env, const Settings& settings) {
#if KOLO_HAVE_MPI
  return env.source == "mpirun" || env.source == "pmi" || settings.transport == "mpi";
#else
  if (settings.transport == "mpi") {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_TRANSPORT=mpi but this kolo was built without MPI (configure with "
               "-DKOLO_WITH_MPI=ON where an MPI library such as libopenmpi-dev is "
               "installed)");
  }
  return false;
#endif
}

#if KOLO_HAVE_MPI
namespace {

using transport::MpiRuntime;

// The first IPv4 address of an interface that is up and not loopback, in
// the order the kernel lists them; "" when there is none.
std::string firstExternalAddress() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (auto* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf,
              sizeof(buf));
    found = buf;
  }
  freeifaddrs(list);
  return found;
}

// Where the other ranks reach rank 0's store (see the header).
std::string storeAddress(const Settings& settings, bool oneNode) {
  if (!settings.networkInterface.empty()) {
    return pickAdvertiseAddress(settings.networkInterface, "");
  }
  if (oneNode) return "127.0.0.1";
  std::string a = firstExternalAddress();
  if (a.empty()) {
    KOLO_THROW(ErrorCode::kIo,
               "rank 0 has no IPv4 address on an interface that is up (other than "
               "loopback) for the rendezvous store of a job across nodes; set KOLO_IFACE "
               "or KOLO_RENDEZVOUS");
  }
  return a;
}

// The launcher variables that env.source read, for messages.
const char* launcherVariables(const std::string& source) {
  if (source == "mpirun") return "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE";
  if (source == "jsrun") return "JSM_NAMESPACE_RANK/JSM_NAMESPACE_SIZE";
  if (source == "pmi") return "PMI_RANK/PMI_SIZE";
  if (source == "kolo") return "KOLO_RANK/KOLO_SIZE";
  if (source == "srun") return "SLURM_PROCID/SLURM_NTASKS";
  if (source == "torchrun") return "RANK/WORLD_SIZE";
  return "launcher variables";
}

}  // namespace

MpiEngineStart startMpiEngine(const rendezvous::JobEnvironment& env,
                              const Settings& settings) {
  setLogLevel(parseLogLevel(settings.logLevel));
  MpiRuntime& rt = MpiRuntime::acquire();
  const MpiRuntime::World& w = rt.world();
  setLogRank(w.rank);

  const bool agrees = env.source == "none" || (env.rank == w.rank && env.size == w.size);
  if (!rt.allAgree(agrees)) {
    if (!agrees) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "MPI_COMM_WORLD says rank "
                     << w.rank << " of " << w.size << " but "
                     << launcherVariables(env.source) << " say rank " << env.rank
                     << " of " << env.size << " (is this process started by mpirun?)");
    }
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "another rank's launcher variables disagree with MPI_COMM_WORLD (rank "
                   << w.rank << " of " << w.size << " agrees)");
  }

  MpiEngineStart start;
  CommunicatorConfig& c = start.config;
  c.rank = w.rank;
  c.size = w.size;
  c.hostId = !settings.hostId.empty() ? settings.hostId
                                      : "mpi-node-" + std::to_string(w.nodeLeader);
  const auto connectTimeout = std::chrono::milliseconds(
      static_cast<int64_t>(settings.connectTimeoutSeconds * 1000.0));

  // KOLO_RENDEZVOUS is a launcher variable like those environment.cc reads
  // (not a setting): when the user gives one, it wins.
  const char* given = std::getenv("KOLO_RENDEZVOUS");
  if (given != nullptr && *given != '\0') {
    c.rendezvous = env.rendezvous;
    c.hostStore = env.hostStore;
  } else if (w.size > 1) {
    // Rank 0 sends either the address or "!" and why it has none, so that
    // no rank waits for a store that will never be.
    const std::string secret = settings.resolveJobSecret();
    std::unique_ptr<rendezvous::TcpStoreServer> server;
    std::string message;
    if (w.rank == 0) {
      try {
        std::string host = storeAddress(settings, w.nodes == 1);
        server = rendezvous::TcpStoreServer::start(host, 0, secret);
        rendezvous::warnWhenUnauthenticated(host, server->port(), secret);
        message = "tcp://" + host + ":" + std::to_string(server->port());
      } catch (const Error& e) {
        message = std::string("!") + e.what();
      }
    }
    message = rt.broadcastFromRoot(message);
    if (message.starts_with("!")) {
      KOLO_THROW(ErrorCode::kIo,
                 "rank 0 could not start the rendezvous store: " << message.substr(1));
    }
    c.rendezvous = message;
    c.hostStore = false;
    const size_t colon = message.rfind(':');
    const std::string host = message.substr(6, colon - 6);
    const int port = std::stoi(message.substr(colon + 1));
    auto client = rendezvous::TcpStore::connect(host, port, connectTimeout, secret);
    if (server) {
      start.store = rendezvous::withHostedServer(std::move(server), std::move(client));
    } else {
      start.store = std::move(client);
    }
  }
  KOLO_LOG(kDebug) << "MPI engine: rank " << w.rank << "/" << w.size << ", node leader "
                   << w.nodeLeader << " (" << w.nodes << " nodes), MPI "
                   << (rt.ownsMpi() ? "initialized by kolo"
                                    : "initialized by the program")
                   << " at " << rt.threadLevelName() << ", rendezvous " << c.rendezvous;
  return start;
}

#else

MpiEngineStart startMpiEngine(const rendezvous::JobEnvironment&, const Settings&) {
  KOLO_THROW(ErrorCode::kInvalidArgument, "this kolo was built without MPI");
}

#endif

}  // namespace kolo::api
