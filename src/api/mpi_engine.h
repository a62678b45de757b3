// Start-up under the MPI engine: Communicator::fromEnvironment's path when
// kolo is built with MPI and the job was started by mpirun or a PMI
// launcher (or KOLO_TRANSPORT=mpi asks for MPI).
//
// What MPI decides (docs/launching.md, "MPI engine")
// - Rank and size: MPI_COMM_WORLD's, checked against the launcher's
//   variables (an Error(kInvalidArgument) naming both when they differ).
// - Host identity: "mpi-node-<world rank of the node's first rank>" from
//   MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), unless KOLO_HOST_ID is set:
//   the MPI library's notion of a node (one daemon under OpenMPI), right
//   even where several "hosts" share one host name.
// - Rendezvous store: KOLO_RENDEZVOUS when set; otherwise rank 0 starts a
//   TCP store server on a free port on every interface (0.0.0.0) and
//   MPI_Bcasts "tcp://ADDRESS:PORT", where ADDRESS is KOLO_IFACE's address
//   when set, else 127.0.0.1 when every rank is on rank 0's node, else rank
//   0's first non-loopback IPv4 address on an interface that is up. No file
//   system is shared between ranks.
// Traffic is decided later by CommunicatorImpl (KOLO_TRANSPORT).
#pragma once

#include <kolo/communicator.h>

#include <memory>

#include "common/settings.h"
#include "rendezvous/environment.h"
#include "rendezvous/store.h"

namespace kolo::api {

// Whether the MPI engine runs this job. Throws Error(kInvalidArgument) for
// KOLO_TRANSPORT=mpi in a build without MPI.
bool mpiEngineWanted(const rendezvous::JobEnvironment& env, const Settings& settings);

struct MpiEngineStart {
  CommunicatorConfig config;  // rank, size, host id and rendezvous from MPI
  // The store, already open (rank 0 hosts its server); null when the
  // communicator opens config.rendezvous itself (KOLO_RENDEZVOUS given, or
  // a job of one rank).
  std::unique_ptr<rendezvous::Store> store;
};

// Initializes MPI when the program has not (mpi_runtime.h) and works out
// the above. Collective over MPI_COMM_WORLD; a check that fails on one rank
// fails on every rank. Throws Error(kInvalidArgument) for a rank/size
// disagreement or a too low MPI thread level, Error(kIo) when MPI or the
// store server fails.
MpiEngineStart startMpiEngine(const rendezvous::JobEnvironment& env,
                              const Settings& settings);

}  // namespace kolo::api
