// kolo::Communicator: collectives among the ranks of one job.
//
// Contract
// - Every rank calls the same collectives in the same order with matching
//   arguments (count, dtype, op, root). A disagreement is detected and thrown
//   as Error(kMismatch) on every rank, naming the ranks and values.
// - Blocking calls return when this rank's part is complete and its output
//   buffers hold the result. Async calls return a Work; buffers must stay
//   valid and untouched until Work::wait() returns.
// - Operations execute in submission order, blocking and async alike.
// - Thread safety: a Communicator may be used from several threads; calls are
//   serialised in the order they acquire it.
// - Failure: a lost peer or a timeout (KOLO_TIMEOUT) throws Error naming the
//   rank. After such an error the communicator is broken: later calls throw
//   the same error at once.
#pragma once

#include <kolo/error.h>
#include <kolo/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kolo {

struct AllreduceOptions {
  const void* send = nullptr;  // == recv for in place
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string algorithm;  // empty: the selection table (or KOLO_ALLREDUCE_ALGO)
  // Segmented form (segmentCount > 0): the vector is the segments' elements
  // one after another, as if they were packed into one buffer; send and recv
  // must be null and count must be the segments' total. Every rank may cut
  // its vector differently; only the total must agree. Segments must not
  // overlap each other's recv, and the array must stay valid like the
  // buffers. The shm algorithm reads and writes the segments directly (no
  // packing copies); the others run on a packed copy.
  const AllreduceSegment* segments = nullptr;
  size_t segmentCount = 0;
};

struct BroadcastOptions {
  void* buffer = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};

// Equal sizes: recv holds size() * count elements, rank i's block at i*count.
// Varying sizes: set counts (one per rank); send holds counts[rank()].
struct AllgatherOptions {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  std::vector<size_t> counts;  // non-empty selects the varying-size form
  DataType dtype = DataType::kFloat32;
};

// send holds size() * recvCount elements; rank i receives block i reduced.
struct ReduceScatterOptions {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t recvCount = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

// send and recv hold size() * countPerRank elements; block j of send goes to
// rank j, block i of recv came from rank i.
struct AlltoallOptions {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t countPerRank = 0;
  DataType dtype = DataType::kFloat32;
};

// Point to point: `count` elements of `dtype` to or from rank `peer` (a
// rank of this communicator; itself included). Messages from one rank to
// another with the same tag are received in the order they were sent;
// different tags never match. The receive's count and dtype must equal the
// send's: otherwise the receive fails with Error(kMismatch) naming both
// ranks and both counts and dtypes, its buffer untouched. Tags are >= 0.
// Messages match only within one channel (a namespace of tags: the C API
// gives each process set its own).
struct SendOptions {
  const void* buffer = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int peer = 0;
  int tag = 0;
  uint32_t channel = 0;
};

struct RecvOptions {
  void* buffer = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int peer = 0;
  int tag = 0;
  uint32_t channel = 0;
};

// Handle of an async collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until done; rethrows the operation's error. Idempotent.
  virtual void wait() = 0;
  // True when done (successfully or not); never blocks.
  virtual bool test() = 0;
};

// The elastic world a communicator belongs to (kolorun --min-np/--max-np,
// docs/elastic.md): its generation, numbered 1, 2, ... by the launcher (0:
// not an elastic job), and the launcher's host-update counters when it
// formed that world (later counts mean the hosts changed since).
struct ElasticWorld {
  int64_t generation = 0;
  int64_t hostUpdates = 0;
  int64_t hostAdditions = 0;
};

// How to build a communicator without reading the environment.
struct CommunicatorConfig {
  int rank = 0;
  int size = 1;
  // "tcp://host:port" (a TCP store; rank 0 hosts it unless hostStore is
  // false) or "file:///path/dir" (a file store on a shared file system).
  std::string rendezvous;
  bool hostStore = true;
  // Ranks with the same host id share memory; empty means this host's name.
  std::string hostId;
  // Prefix for rendezvous keys, so several communicators can share a store.
  std::string name = "world";
};

class Communicator {
 public:
  // Reads the layout from KOLO_*, mpirun, srun or torchrun variables.
  static std::shared_ptr<Communicator> fromEnvironment();
  static std::shared_ptr<Communicator> create(const CommunicatorConfig& config);

  virtual ~Communicator() = default;

  virtual const Layout& layout() const = 0;
  int rank() const { return layout().rank; }
  int size() const { return layout().size; }

  virtual void allreduce(const AllreduceOptions& options) = 0;
  virtual void broadcast(const BroadcastOptions& options) = 0;
  virtual void allgather(const AllgatherOptions& options) = 0;
  virtual void reduceScatter(const ReduceScatterOptions& options) = 0;
  virtual void alltoall(const AlltoallOptions& options) = 0;
  virtual void barrier() = 0;

  virtual std::shared_ptr<Work> allreduceAsync(const AllreduceOptions& options) = 0;
  virtual std::shared_ptr<Work> broadcastAsync(const BroadcastOptions& options) = 0;
  virtual std::shared_ptr<Work> allgatherAsync(const AllgatherOptions& options) = 0;
  virtual std::shared_ptr<Work> reduceScatterAsync(
      const ReduceScatterOptions& options) = 0;
  virtual std::shared_ptr<Work> alltoallAsync(const AlltoallOptions& options) = 0;
  virtual std::shared_ptr<Work> barrierAsync() = 0;

  // Point to point (SendOptions above). Not collective: only the two ranks
  // take part, and nothing is agreed beforehand.
  // - send() returns once the message has left this rank's buffer (it may
  //   not be received yet: messages are buffered by the receiver's
  //   transport); recv() once the buffer holds the message.
  // - isend()/irecv() return at once; the buffer must stay valid (and a
  //   send's unchanged) until Work::wait() returns or test() is true.
  //   Progress happens while this rank is inside a call of this
  //   communicator (a wait, a test, another operation): a rank that posts
  //   and then computes for a long time delays a large message.
  // - A receive from a rank that died fails with Error(kPeerLost) naming
  //   it, one from a rank that stays silent with Error(kTimeout) after
  //   KOLO_TIMEOUT; both break the communicator like a collective's.
  // - Bad arguments (a peer outside the communicator, a negative tag, a
  //   null buffer with a count) throw Error(kInvalidArgument) at once.
  virtual void send(const SendOptions& options) = 0;
  virtual void recv(const RecvOptions& options) = 0;
  virtual std::shared_ptr<Work> isend(const SendOptions& options) = 0;
  virtual std::shared_ptr<Work> irecv(const RecvOptions& options) = 0;

  // The elastic world this communicator was formed in (fromEnvironment in
  // an elastic job; its teams inherit it); generation 0 otherwise.
  virtual ElasticWorld elasticWorld() const { return {}; }

  // The algorithm the selection table picks for an allreduce of this size.
  virtual std::string allreduceAlgorithm(size_t bytes) const = 0;

  // A team: a communicator over some of this communicator's ranks.
  // - Collective over the listed ranks only: each member calls it with the
  //   same list and name; non-members must not call it. Blocks until every
  //   member has connected (up to KOLO_CONNECT_TIMEOUT).
  // - The result has the ranks in list order (its rank = the index of this
  //   rank in `ranks`), its own transports and its own store keys under
  //   `name`, which must be unique per job (e.g. "team/gen"). It may be used
  //   from another thread concurrently with this communicator and with
  //   other teams; it outlives this communicator if kept.
  // - Under the MPI engine a team's links are shm within a host and tcp
  //   between hosts (MPI communicators are not created per team).
  // - Errors (kInvalidArgument, thrown before any communication): an empty
  //   list, a rank out of range or listed twice, a caller not in the list,
  //   an empty name. Members that pass different lists get kMismatch naming
  //   both; a name used before gets kInvalidArgument.
  virtual std::shared_ptr<Communicator> split(const std::vector<int>& ranks,
                                              const std::string& name) = 0;
};

}  // namespace kolo
