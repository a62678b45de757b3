// Point-to-point messaging over MPI: the transport between hosts when the
// job runs on the cluster's MPI (mpirun, srun with PMI), and between every
// pair of ranks with KOLO_TRANSPORT=mpi.
//
// Built on non-blocking point-to-point (MPI_Isend / MPI_Irecv, completed by
// MPI_Testsome in progress()) over three communicators of its own, all
// duplicates of MPI_COMM_WORLD with MPI_ERRORS_RETURN: one for the
// collectives' data, one for heartbeats and abort notices, one for the
// public API's point-to-point messages (tags with kUserMessageBit). kolo
// rank r is MPI_COMM_WORLD rank r.
//
// Point-to-point messages of the public API are buffered like tcp's and
// shm's: progress() takes every such message that no posted receive
// matches (MPI_Improbe / MPI_Mrecv on their communicator) into a buffer of
// the transport, and a later receive is served from it, in order per
// (source, tag). So their sends complete once the receiving rank's
// transport makes progress (in any wait, a collective's too), whether or
// not a receive is posted; MPI alone would hold a large send (its
// rendezvous protocol) until the receiver posts a matching receive, and
// api/point_to_point.h posts a payload's receive only after it read the
// header in front of it. The collectives' tags are not buffered: their
// receives are always posted.
//
// Tags: kolo's tags are 64-bit (operation sequence * 65536 + step); MPI's
// are ints in 0..MPI_TAG_UB. A kolo tag is sent as its low B bits, where
// 2^B - 1 is the largest such mask within MPI_TAG_UB (B = 31 with OpenMPI).
// Two messages are confused only when they travel between the same two
// ranks at the same time with tags equal modulo 2^B: for the collectives
// that means operations 2^(B-16) apart (32768 with OpenMPI), while the
// agreement step of every operation keeps the ranks within a few operations
// of one another. create() requires B >= 24 (256 operations) and fails
// with Error(kInvalidArgument) naming MPI_TAG_UB otherwise.
//
// Sizes: MPI counts are ints, so a message travels as pieces of at most
// Options::maxPieceBytes bytes: floor(n / P) full pieces and one last piece
// of n mod P bytes (possibly empty), sent back to back with one tag (MPI
// keeps their order). The last piece is always shorter than a full one, so
// any difference between the sent and the posted size shows in some piece:
// a longer piece is MPI_ERR_TRUNCATE, a shorter one a short MPI_Get_count;
// both fail the receive with Error(kMismatch) naming the sender, the tag and
// both sizes (the sent size as "more than N" when MPI truncated). Pieces
// also let the silent-peer timeout see progress during one huge message.
//
// Contract (see transport.h for the shared semantics)
// - Ownership: buffers passed to isend/irecv are borrowed until their
//   request is done. The transport keeps the MPI runtime (mpi_runtime.h)
//   in use; it never initializes or finalizes MPI itself.
// - Thread safety: one thread at a time (the caller serialises), and every
//   MPI call runs under MpiRuntime::mutex(), so other kolo users of MPI in
//   the process may run on other threads.
// - Blocking: create() is collective over MPI_COMM_WORLD (every rank must
//   call it, in the same order as other collective MPI calls); isend,
//   irecv, progress never wait for a peer (progress() does take in the
//   public API messages already on their way, MPI_Mrecv of a matched
//   message: as long as their transfer takes); idle() sends due heartbeats
//   and sleeps at most 50 us (MPI offers no event to wait on, and moves
//   data only inside MPI calls).
// - Failure: an MPI error on a transfer is Error(kPeerLost) naming the
//   peer and breaks the transport (every pending and later request fails).
//   A size mismatch fails only that receive. Liveness as in tcp: while a
//   rank waits (idle()) it sends an empty heartbeat to every linked peer
//   every timeout/4 (50 ms..1 s) on the control communicator; silentFor()
//   says whether neither data nor a heartbeat came from a peer for a
//   while, so a wait times out only on a silent peer, naming it. abort()
//   sends each peer a notice (bounded, 200 ms); a peer that receives one
//   fails with that error, naming the rank really lost. A failure marks the
//   MPI runtime broken (no MPI_Finalize at exit, which would wait for the
//   lost rank). A peer whose process dies is usually reported by the
//   launcher (mpirun ends the job). isend/irecv to a rank
//   out of range or not selected by Options::connect throw
//   Error(kInvalidArgument); so does a receive from kAnySource of more than
//   one piece (the pieces of two senders could interleave). After
//   MPI_Finalize every call fails with Error(kIo).
// - Destruction: pending receives are cancelled, pending sends released,
//   the communicators freed (nothing is done once MPI is finalized).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace kolo::transport {

class MpiTransport : public Transport {
 public:
  struct Options {
    int rank = 0;  // must equal the MPI_COMM_WORLD rank
    int size = 1;  // must equal the MPI_COMM_WORLD size
    // size entries: which peers this transport carries (others: isend/irecv
    // throw kInvalidArgument); empty = all.
    std::vector<bool> connect;
    std::chrono::milliseconds timeout{30000};
    std::chrono::microseconds spin{100};
    // Largest piece of one message (see Sizes above); 1..INT_MAX.
    size_t maxPieceBytes = size_t{64} << 20;
  };

  // Collective over MPI_COMM_WORLD: acquires the MPI runtime (initializing
  // MPI if needed) and duplicates the world communicator. Throws
  // Error(kInvalidArgument) when rank/size disagree with MPI_COMM_WORLD,
  // MPI_TAG_UB is too small or maxPieceBytes is out of range; Error(kIo)
  // when MPI fails.
  static std::unique_ptr<MpiTransport> create(const Options& options);

  ~MpiTransport() override;

  int rank() const override;
  int size() const override;
  RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int src, Tag tag, void* data, size_t bytes) override;
  bool progress() override;
  void idle(std::chrono::microseconds max) override;
  std::chrono::milliseconds timeout() const override;
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const override;
  void abort(const Error& cause) override;

  // The MPI tag that carries kolo tag `tag` (its low tagBits() bits).
  int mpiTag(Tag tag) const;
  int tagBits() const;

 private:
  class Impl;
  explicit MpiTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::transport
