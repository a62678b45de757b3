// The implementation behind kolo::Communicator: owns the store, the
// transports, the host's shared-memory group and the operation queue, and
// turns each call into: validate -> agree (descriptor check) -> run the
// selected algorithm -> finish (e.g. divide for average).
#pragma once

#include <kolo/communicator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "api/op_queue.h"
#include "api/point_to_point.h"
#include "api/topology.h"
#include "collectives/agreement_host.h"
#include "collectives/context.h"
#include "collectives/cuda/device_collectives.h"
#include "collectives/cuda/device_path.h"
#include "collectives/descriptor_check.h"
#include "collectives/selection.h"
#include "collectives/staging_stores.h"
#include "common/settings.h"
#include "rendezvous/store.h"
#include "transport/shm/shm_group.h"
#include "transport/transport.h"

namespace kolo::collectives::cuda {
class DeviceMemory;
}

namespace kolo::api {

// What Communicator::fromEnvironment adds to a CommunicatorConfig when the
// MPI engine started the job (mpi_engine.h).
struct EngineOptions {
  // MPI_COMM_WORLD ranks are this job's ranks: with KOLO_TRANSPORT=auto,
  // peers on other hosts are reached over the mpi transport, not tcp.
  bool mpi = false;
  // The rendezvous store, already open; null: open config.rendezvous.
  std::shared_ptr<rendezvous::Store> store;
  // The elastic world the launcher assigned (generation 0: not elastic).
  ElasticWorld elastic;
};

class CommunicatorImpl : public Communicator, public collectives::AgreementHost {
 public:
  // Communicator::fromEnvironment, typed: the job's layout from KOLO_*,
  // mpirun, srun or torchrun variables; in an elastic job, the world the
  // launcher assigns (asked again while a world fails to form).
  static std::shared_ptr<CommunicatorImpl> fromEnvironment();

  // Collective over all ranks: rendezvous, topology, transports, shm group.
  // Transports by KOLO_TRANSPORT: auto/shm = shm within a host, and between
  // hosts mpi when engine.mpi, else tcp; tcp = tcp to every peer; mpi = the
  // mpi transport to every peer (needs a build with MPI and ranks that are
  // MPI_COMM_WORLD's).
  CommunicatorImpl(const CommunicatorConfig& config, const Settings& settings,
                   EngineOptions engine = {});
  // A team (split()): collective over config.size ranks that meet through
  // `store` (the parent's open store, shared) under config.name. Leaves the
  // process's log rank and level alone. `familyLost`: the parent's record
  // of a lost peer (see familyLost_), shared.
  CommunicatorImpl(const CommunicatorConfig& config, const Settings& settings,
                   std::shared_ptr<rendezvous::Store> store,
                   std::shared_ptr<std::atomic<bool>> familyLost = nullptr);
  ~CommunicatorImpl() override;

  const Layout& layout() const override { return topology_.layout; }

  void allreduce(const AllreduceOptions& o) override;
  void broadcast(const BroadcastOptions& o) override;
  void allgather(const AllgatherOptions& o) override;
  void reduceScatter(const ReduceScatterOptions& o) override;
  void alltoall(const AlltoallOptions& o) override;
  void barrier() override;

  std::shared_ptr<Work> allreduceAsync(const AllreduceOptions& o) override;
  std::shared_ptr<Work> broadcastAsync(const BroadcastOptions& o) override;
  std::shared_ptr<Work> allgatherAsync(const AllgatherOptions& o) override;
  std::shared_ptr<Work> reduceScatterAsync(const ReduceScatterOptions& o) override;
  std::shared_ptr<Work> alltoallAsync(const AlltoallOptions& o) override;
  std::shared_ptr<Work> barrierAsync() override;

  // Point to point (communicator_p2p.cc, api/point_to_point.h).
  void send(const SendOptions& o) override;
  void recv(const RecvOptions& o) override;
  std::shared_ptr<Work> isend(const SendOptions& o) override;
  std::shared_ptr<Work> irecv(const RecvOptions& o) override;
  // isend/irecv with a callback run once when the operation ends (on the
  // thread that drives it to its end; it must be quick and must not call
  // this communicator).
  std::shared_ptr<Work> isendNotify(const SendOptions& o,
                                    std::function<void(std::exception_ptr)> onDone);
  std::shared_ptr<Work> irecvNotify(const RecvOptions& o,
                                    std::function<void(std::exception_ptr)> onDone);

  std::string allreduceAlgorithm(size_t bytes) const override;
  ElasticWorld elasticWorld() const override { return elastic_; }

  std::shared_ptr<Communicator> split(const std::vector<int>& ranks,
                                      const std::string& name) override;

  // A barrier with every rank, then teardown; errors are logged, not thrown
  // from the destructor. Idempotent. A communicator still open when the
  // process exits runs it from an atexit handler (exit_goodbye.h).
  void shutdown();

  // The job's point-to-point transport, for the parameter servers
  // (src/ps/): only while no collective runs on this communicator (the
  // caller keeps it so, e.g. by using only teams split from it), from one
  // thread at a time.
  transport::Transport& pointToPoint() { return *world_; }

  // ---- the device path (communicator_device.cc, docs/gpu.md "The paths") ----
  // The path of this communicator's collectives on CUDA memory of `device`
  // (this rank's ordinal). The first call is collective: every rank calls it
  // at the same point of its order of operations, each with its own device;
  // it gathers the ranks' devices (gatherDeviceTopology) and chooses by
  // KOLO_DEVICE_PATH (collectives/cuda/device_path.h), logging the choice
  // once at debug level. Returns nullptr for host staging (no usable device,
  // nothing faster applies, or KOLO_DEVICE_PATH=staged), else the object,
  // owned by the communicator. Later calls with the same device return the
  // same answer without communication. Throws Error(kInvalidArgument) when a
  // forced path cannot run, Error(kMismatch) when the ranks' settings differ
  // (the same error on every rank); a failed first call throws its error
  // again on every later call. One device per rank and communicator: a later
  // call with another device throws Error(kInvalidArgument) naming both
  // (on that rank only). Thread-safe; not from inside this communicator's
  // operations.
  collectives::cuda::DeviceCollectives* deviceCollectives(int device);
  // The choice in words ("staged", "ipc", "nccl", "hier (ipc inside hosts,
  // tcp between)"); empty before deviceCollectives decided.
  std::string devicePathText() const;
  // Collective: every rank's record, `mine` being this rank's (for the
  // first deviceCollectives call, and tests).
  collectives::cuda::DeviceTopology gatherDeviceTopology(
      const collectives::cuda::RankDevice& mine);
  // The hierarchical composition over this communicator's hosts (hier
  // path; tests give a host double for `intra` and `memory`): `intra` serves
  // this rank's host. Host collectives run as this communicator's
  // operations (HierHost, hier_collectives.h).
  std::unique_ptr<collectives::cuda::DeviceCollectives> hierarchical(
      std::unique_ptr<collectives::cuda::DeviceCollectives> intra,
      std::unique_ptr<collectives::cuda::DeviceMemory> memory);

  // collectives::AgreementHost: an AgreedScope holds the operation queue
  // and marks the holder's operations agreed (agree() skips the exchange).
  void holdOperations() override { queue_.hold(); }
  void releaseOperations() override { queue_.release(); }
  void setAgreed(bool agreed) override { agreed_ = agreed; }

  // How many collectives exchanged their descriptors in a separate step
  // (over the transport, or a shared-memory step), and how many skipped it
  // as agreed; a descriptor checked inside the algorithm's first step (the
  // shm allreduce) counts as neither. Any thread; for tests.
  struct AgreementCounts {
    uint64_t exchanged = 0;
    uint64_t skipped = 0;
  };
  AgreementCounts agreementCounts() const {
    return {exchanged_.load(std::memory_order_relaxed),
            skipped_.load(std::memory_order_relaxed)};
  }

 private:
  // The allreduce algorithm the settings force in `ctx`: KOLO_ALLREDUCE_ALGO,
  // else hier under KOLO_HIERARCHICAL_ALLREDUCE=1 where hier can run; empty:
  // the selection table decides.
  std::string_view forcedAllreduce(const collectives::Context& ctx) const;
  // shutdown()'s body; `atExit`: the process exits without finalize (the
  // closing descriptor says so).
  void close(bool atExit);
  // The constructors' common body; `team`: built by split().
  void setUp(const CommunicatorConfig& config, bool engineMpi,
             std::shared_ptr<rendezvous::Store> store, bool team);
  // setUp's steps (communicator_setup.cc).
  struct Links {
    bool shm = false;     // peers on this host over shm
    bool remote = false;  // peers elsewhere...
    bool mpi = false;     // ...over mpi (else tcp)
  };
  void checkConfig(const CommunicatorConfig& config, bool team);
  void openStore(const CommunicatorConfig& config,
                 std::shared_ptr<rendezvous::Store> engineStore,
                 const std::string& secret);
  Links connectTransports(rendezvous::Store& store, bool engineMpi,
                          const std::string& secret);
  std::unique_ptr<transport::Transport> mpiTransport(const std::vector<bool>& remote,
                                                     std::chrono::microseconds spin);
  std::unique_ptr<transport::Transport> tcpTransport(const std::vector<bool>& remote,
                                                     rendezvous::Store& store,
                                                     const std::string& secret,
                                                     std::chrono::microseconds spin);
  void createShmGroup(rendezvous::Store& store, const std::string& name);
  void createHostGroups();
  // selector_ with rank 0's constants, handed out through `store`
  // (communicator_selection.cc).
  void createSelector(rendezvous::Store& store, const Links& links);

  void doAllreduce(const AllreduceOptions& o);
  void doBroadcast(const BroadcastOptions& o);
  void doAllgather(const AllgatherOptions& o);
  void doReduceScatter(const ReduceScatterOptions& o);
  void doAlltoall(const AlltoallOptions& o);
  void doBarrier();

  // Point to point (communicator_p2p.cc).
  class PointToPointWork;
  void checkPeer(int peer, int tag, const void* buffer, size_t count, DataType dtype,
                 const char* what) const;
  PointToPoint& pointToPointEngine();

  // Runs op with the communicator's failure rules: a lost peer or timeout
  // breaks the communicator (later calls rethrow the same error).
  void guarded(const std::function<void()>& op);
  // A fresh context with the next tag block.
  collectives::Context nextContext();
  // exchange(), unless the operation is agreed (an AgreedScope marked it):
  // then nothing to exchange, and a local validation error breaks the
  // communicator (kInternal: the peers could not be told; runtime/agreed_scope.h).
  void agree(const collectives::Context& ctx, const collectives::OpDescriptor& d,
             std::exception_ptr localError);
  // Exchanges and verifies the descriptor. Throws the local validation
  // error after the exchange when `localError` is set, so every rank fails
  // together. Barriers and the closing step call it directly: never skipped.
  void exchange(const collectives::Context& ctx, collectives::OpDescriptor d,
                std::exception_ptr localError);

  Settings settings_;
  CommunicatorConfig config_;  // as given (hostId filled in); for split()
  ElasticWorld elastic_;       // EngineOptions::elastic; the parent's in a team
  // Shared with the teams split from this communicator.
  std::shared_ptr<rendezvous::Store> store_;
  Topology topology_;
  std::unique_ptr<transport::Transport> world_;
  std::unique_ptr<transport::Transport> local_;
  std::unique_ptr<transport::Transport> cross_;
  std::unique_ptr<shm::ShmGroup> shm_;
  bool allLocalShm_ = false;  // every rank on this host and shm available
  // The shm allreduce's choice of stores, measured across calls.
  collectives::StagingStores stagingStores_;
  // The allreduce selection (model + constants + per-size cache); null on
  // one rank (the built-in constants decide, uncached).
  std::unique_ptr<collectives::AllreduceSelector> selector_;
  // A segmented allreduce packed for an algorithm that does not take
  // segments; kept across calls.
  std::vector<uint8_t> packed_;

  uint64_t sequence_ = 0;  // operations so far; runs only under the queue
  // Set and cleared by the thread holding the queue (AgreedScope), read by
  // its operations: no other thread's operation runs meanwhile.
  bool agreed_ = false;
  std::atomic<uint64_t> exchanged_{0};  // agreementCounts()
  std::atomic<uint64_t> skipped_{0};
  std::exception_ptr broken_;
  std::unique_ptr<PointToPoint> p2p_;  // made at first use, under the queue
  // Point-to-point Works hold it weakly: a Work waited after the
  // communicator is gone says so instead of touching it.
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);
  bool everyoneKnows_ = false;  // broken_ is a departure every rank saw
  // Set when this communicator, or one split from the same root (a
  // runtime's team, a process set), broke on a lost or silent peer (not a
  // departure): that peer will not come to any closing step either, so
  // close() skips its own instead of waiting KOLO_TIMEOUT for it.
  std::shared_ptr<std::atomic<bool>> familyLost_ =
      std::make_shared<std::atomic<bool>>(false);
  std::mutex shutdownMu_;
  bool shut_ = false;
  // The device path (communicator_device.cc); before queue_: destroyed
  // after it, before the transports it uses.
  bool remoteMpi_ = false;  // peers on other hosts over mpi (else tcp)
  class DeviceHost;
  struct DevicePath;
  std::unique_ptr<collectives::cuda::DeviceCollectives> buildDevicePath(
      int device, const collectives::cuda::DevicePathChoice& choice);
  mutable std::mutex deviceMu_;             // guards devicePath_; taken before the queue
  std::shared_ptr<DevicePath> devicePath_;  // null until the first choice
  std::mutex deviceHostMu_;                 // guards deviceHost_
  std::shared_ptr<DeviceHost> deviceHost_;  // HierHost of the hier path
  // With one rank (no store_): the store the device paths' factories use.
  std::shared_ptr<rendezvous::Store> localStore_;
  OpQueue queue_;  // last member: destroyed first, draining pending work
};

}  // namespace kolo::api
