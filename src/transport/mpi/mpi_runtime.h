// The MPI library's lifetime and the facts about MPI_COMM_WORLD that the
// MPI engine needs: one small process-wide object, because MPI itself is
// process-wide state (it can be initialized once per process, never again
// after MPI_Finalize).
//
// Ownership of MPI_Init / MPI_Finalize
// - acquire() initializes MPI when the program has not (MPI_Initialized
//   says no), asking for MPI_THREAD_MULTIPLE, and remembers that kolo did;
//   it then registers an atexit handler that calls MPI_Finalize at process
//   exit, unless an MPI transport failed (noteBroken). MPI is never
//   finalized earlier: a later kolo_init in the same process must still
//   find it usable.
// - A program that initialized MPI itself (its own MPI_Init, mpi4py) keeps
//   ownership: kolo never finalizes it, and must be finished with (its
//   Communicator destroyed, kolo_finalize called) before the program calls
//   MPI_Finalize. MPI calls after MPI_Finalize are refused with
//   Error(kIo) instead of being made.
//
// Thread safety
// - Every MPI call kolo makes runs under mutex() (one process-wide lock), so
//   MPI_THREAD_SERIALIZED is enough for kolo. acquire() fails with
//   Error(kInvalidArgument) naming the level when MPI provides less (e.g. a
//   program that called plain MPI_Init, which gives MPI_THREAD_SINGLE
//   or FUNNELED: kolo calls MPI from its own background thread). With
//   SERIALIZED the program must not call MPI while a kolo operation runs;
//   with MULTIPLE it may.
// - acquire() and the accessors may be called from any thread.
//
// This header does not include mpi.h: only the .cc files of src/transport/mpi
// see MPI's types.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace kolo::transport {

class MpiRuntime {
 public:
  // MPI_COMM_WORLD as seen by this process, computed once by acquire().
  struct World {
    int rank = 0;
    int size = 1;
    // World rank of the lowest rank that shares this node
    // (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), i.e. what the MPI
    // library calls one node: one daemon under OpenMPI's mpirun.
    int nodeLeader = 0;
    int nodeSize = 1;  // ranks on this node
    int nodes = 1;     // nodes in the job
  };

  // Initializes MPI if needed (see above) and returns the runtime.
  // Collective over MPI_COMM_WORLD the first time it is called in a process
  // (it splits the world by node); every rank must call it then. Throws
  // Error(kInvalidArgument) when the thread level is below SERIALIZED,
  // Error(kIo) when MPI fails or was already finalized.
  static MpiRuntime& acquire();

  // The lock every MPI call of kolo runs under. Lock order: taken last
  // (no other kolo lock is acquired while holding it).
  std::mutex& mutex() { return mu_; }

  bool ownsMpi() const { return owns_; }
  int threadLevel() const { return threadLevel_; }
  const char* threadLevelName() const;
  const World& world() const { return world_; }

  // Whether MPI_Finalize has run (by kolo's atexit handler or the
  // program). The caller holds mutex().
  bool finalizedLocked() const;

  // Broadcasts `text` from world rank 0 to every rank (collective over
  // MPI_COMM_WORLD; only rank 0's argument is used). Throws Error(kIo).
  std::string broadcastFromRoot(const std::string& text);

  // Called when an MPI transport fails (a lost or silent peer): the job is
  // broken, so the atexit handler leaves MPI_Finalize out (it waits for
  // every rank, and a stopped one would hold this process forever); the
  // process exits with its own status and the launcher ends the rest.
  void noteBroken() { broken_.store(true); }
  bool broken() const { return broken_.load(); }

  // Whether `ok` holds on every rank (collective over MPI_COMM_WORLD), so
  // that a check failing on some ranks fails on all instead of leaving the
  // others blocked in the next collective call. Throws Error(kIo).
  bool allAgree(bool ok);

 private:
  MpiRuntime() = default;
  void initialize();
  void discoverWorld();

  std::mutex mu_;
  bool owns_ = false;  // kolo called MPI_Init_thread and will finalize
  std::atomic<bool> broken_{false};
  int threadLevel_ = 0;
  World world_;
};

}  // namespace kolo::transport
