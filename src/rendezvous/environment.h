// Where this process sits in the job, read from the launcher's environment.
//
// Sources, first match wins:
//   kolo      KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE,
//             KOLO_RENDEZVOUS (tcp://host:port or file:///dir)
//   mpirun    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   jsrun     JSM_NAMESPACE_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (LSF's
//             launcher; IBM Spectrum MPI's ranks also have the mpirun
//             variables, which come first)
//   PMI       PMI_RANK, PMI_SIZE (MPICH/Hydra, srun --mpi=pmi2)
//   srun      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//             MASTER_PORT
// KOLO_RENDEZVOUS, when set, overrides the address of any source. Without
// it: torchrun uses tcp://MASTER_ADDR:MASTER_PORT+1 (rank 0 hosts the store;
// torchrun's own c10d store may already listen on MASTER_PORT);
// an srun step over several nodes uses tcp://FIRST-NODE:PORT (rank 0 hosts
// the store; environment.cc says how the port is chosen); a one-host
// mpirun/srun/jsrun job uses a file store under /tmp named after the job
// id; jsrun over several hosts has none (the MPI engine needs none).
#pragma once

#include <cstdint>
#include <string>

namespace kolo::rendezvous {

struct JobEnvironment {
  std::string source;  // "kolo", "mpirun", "jsrun", "pmi", "srun", "torchrun",
                       // "none"
  int rank = 0;
  int size = 1;
  int localRank = -1;  // -1 when the launcher does not say
  int localSize = -1;
  std::string rendezvous;  // store address, may be empty when size == 1
  bool hostStore = false;  // this process must start the store server
  // Under an elastic kolorun (KOLO_ELASTIC_WORKER, KOLO_ELASTIC_TIMEOUT):
  // this worker's id, -1 otherwise; rank and size then come from the
  // launcher through the store (elastic_membership.h), not from KOLO_RANK.
  int64_t elasticWorker = -1;
  double elasticTimeoutSeconds = 0;  // how long the launcher may take to answer
};

// Throws Error(kInvalidArgument) naming the variable for malformed values
// (non-numeric, rank >= size, ...). With no launcher variables at all
// returns a one-rank job (source "none").
JobEnvironment detectJobEnvironment();

}  // namespace kolo::rendezvous
