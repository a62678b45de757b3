// CommunicatorImpl's set-up and shutdown: Communicator::fromEnvironment and
// create (the MPI engine, an elastic worker's world), the constructors and
// their steps (checking the configuration, opening the store, discovering
// the topology, connecting the transports, the host's shm group and the
// host/cross groups), and close()'s finalize step. The collective calls
// are in communicator_collectives.cc, split() in communicator_split.cc.
#include <kolo/config.h>

#include <cstring>
#include <limits>
#include <sstream>

#include "api/communicator_impl.h"
#include "api/exit_goodbye.h"
#include "api/mpi_engine.h"
#include "api/network_address.h"
#include "collectives/reduce.h"
#include "collectives/registry.h"
#include "collectives/segment_view.h"
#include "common/backoff.h"
#include "common/check.h"
#include "common/logging.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/environment.h"
#include "transport/group_transport.h"
#include "transport/router_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#if KOLO_HAVE_MPI
#include "transport/mpi/mpi_transport.h"
#endif

namespace kolo {
namespace {

// An elastic worker's world comes from the launcher: its rank, the size
// and the generation, whose name keeps each world's keys apart
// (rendezvous/elastic_membership.h).
ElasticWorld joinElasticWorld(const rendezvous::JobEnvironment& env,
                              const Settings& settings, CommunicatorConfig& config) {
  auto store = rendezvous::openStore(env.rendezvous, false,
                                     std::chrono::milliseconds(static_cast<int64_t>(
                                         settings.connectTimeoutSeconds * 1000)),
                                     settings.resolveJobSecret());
  // The launcher answers within its elastic timeout once every live worker
  // asked, and the slowest survivor asks within about KOLO_TIMEOUT.
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(
      (env.elasticTimeoutSeconds + 2 * settings.timeoutSeconds + 10) * 1000));
  const auto a = rendezvous::elastic::joinGeneration(*store, env.elasticWorker, wait);
  config.rank = a.rank;
  config.size = a.size;
  config.name = rendezvous::elastic::worldName(a.generation);
  return {a.generation, a.hostUpdates, a.hostAdditions};
}

}  // namespace

std::shared_ptr<Communicator> Communicator::fromEnvironment() {
  return api::CommunicatorImpl::fromEnvironment();
}

std::shared_ptr<Communicator> Communicator::create(const CommunicatorConfig& config) {
  return std::make_shared<api::CommunicatorImpl>(config, Settings::fromEnvironment());
}

std::shared_ptr<api::CommunicatorImpl> api::CommunicatorImpl::fromEnvironment() {
  Settings settings = Settings::fromEnvironment();
  rendezvous::JobEnvironment env = rendezvous::detectJobEnvironment();
  if (api::mpiEngineWanted(env, settings)) {
    api::MpiEngineStart start = api::startMpiEngine(env, settings);
    api::EngineOptions engine;
    engine.mpi = true;
    engine.store = std::move(start.store);
    return std::make_shared<api::CommunicatorImpl>(start.config, settings,
                                                   std::move(engine));
  }
  CommunicatorConfig config;
  config.rank = env.rank;
  config.size = env.size;
  config.rendezvous = env.rendezvous;
  config.hostStore = env.hostStore;
  if (env.elasticWorker < 0)
    return std::make_shared<api::CommunicatorImpl>(config, settings);
  // An elastic world that fails to form (a member died or was cut off
  // meanwhile) is not the end: the launcher forms the next one without it.
  // Its reset limit and elastic timeout bound the attempts.
  while (true) {
    api::EngineOptions engine;
    engine.elastic = joinElasticWorld(env, settings, config);
    try {
      return std::make_shared<api::CommunicatorImpl>(config, settings, std::move(engine));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kPeerLost && e.code() != ErrorCode::kTimeout) throw;
      KOLO_LOG(kInfo) << "elastic: " << config.name << " did not form (" << e.what()
                      << "); asking for the next world";
    }
  }
}

namespace api {
namespace {

using collectives::CollectiveKind;
using collectives::OpDescriptor;
using std::chrono::milliseconds;

milliseconds toMillis(double seconds) {
  return milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

CommunicatorImpl::CommunicatorImpl(const CommunicatorConfig& config,
                                   const Settings& settings, EngineOptions engine)
    : settings_(settings), elastic_(engine.elastic) {
  setUp(config, engine.mpi, std::move(engine.store), /*team=*/false);
  enrolForExitGoodbye(this, [this] { close(/*atExit=*/true); });
}

CommunicatorImpl::CommunicatorImpl(const CommunicatorConfig& config,
                                   const Settings& settings,
                                   std::shared_ptr<rendezvous::Store> store,
                                   std::shared_ptr<std::atomic<bool>> familyLost)
    : settings_(settings) {
  if (familyLost) familyLost_ = std::move(familyLost);
  setUp(config, /*engineMpi=*/false, std::move(store), /*team=*/true);
  enrolForExitGoodbye(this, [this] { close(/*atExit=*/true); });
}

// Set-up, in order: check the configuration, open the store (a
// generation of its own per communicator), discover the topology, connect
// the transports, create the host's shm group and the host/cross groups,
// then a barrier so everyone is connected before the first operation.
void CommunicatorImpl::setUp(const CommunicatorConfig& config, bool engineMpi,
                             std::shared_ptr<rendezvous::Store> engineStore, bool team) {
  checkConfig(config, team);
  config_ = config;
  stagingStores_ = collectives::StagingStores(
      collectives::StagingStores::parse("KOLO_SHM_STORES", settings_.shmStores));
  std::string hostId = !config.hostId.empty()      ? config.hostId
                       : !settings_.hostId.empty() ? settings_.hostId
                                                   : defaultHostId();
  config_.hostId = hostId;

  if (config.size == 1) {
    topology_.layout = Layout{0, 1, 0, 1, 0, 1, hostId};
    topology_.hosts = {{0}};
    topology_.hostOf = {0};
    world_ = std::make_unique<transport::RouterTransport>(
        0, 1, std::vector<std::unique_ptr<transport::Transport>>{}, std::vector<int>{0},
        std::chrono::microseconds(0), toMillis(settings_.timeoutSeconds));
    return;
  }
  // Every link and the store prove the job secret (docs/security.md).
  const std::string secret = settings_.resolveJobSecret();
  if (secret.empty() && !team && config.rank == 0) {
    KOLO_LOG(kInfo) << "no job secret (KOLO_JOB_SECRET, KOLO_JOB_SECRET_FILE): the "
                       "rendezvous store and the links of this job are unauthenticated "
                       "(kolorun sets one; see docs/security.md)";
  }
  openStore(config, std::move(engineStore), secret);
  rendezvous::PrefixStore store(config_.name, *store_);
  topology_ = Topology::discover(config.rank, config.size, hostId, store,
                                 toMillis(settings_.connectTimeoutSeconds));
  const Links links = connectTransports(store, engineMpi, secret);
  remoteMpi_ = links.mpi;
  if (links.shm) createShmGroup(store, config.name);
  if (topology_.layout.crossSize > 1) createHostGroups();
  createSelector(store, links);
  const Layout& l = topology_.layout;
  KOLO_LOG(kInfo) << "rank " << l.rank << "/" << l.size << " on host '" << l.hostId
                  << "' (local " << l.localRank << "/" << l.localSize << ", host "
                  << l.crossRank << "/" << l.crossSize << "), transport "
                  << (links.shm ? "shm" : "") << (links.shm && links.remote ? "+" : "")
                  << (!links.remote ? ""
                      : links.mpi   ? "mpi"
                                    : "tcp")
                  << (engineMpi ? ", engine mpi" : "")
                  << (team ? ", team '" + config.name + "'" : "");
  // Everyone connected before the first user operation.
  barrier();
}

// The log's level and rank (not for a team), the rank's range and
// KOLO_TRANSPORT.
void CommunicatorImpl::checkConfig(const CommunicatorConfig& config, bool team) {
  if (!team) setLogLevel(parseLogLevel(settings_.logLevel));
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "rank " << config.rank
                                                    << " is not within a job of "
                                                    << config.size << " ranks");
  }
  if (!team) setLogRank(config.rank);
  if (!team && config.rank == 0) {
    for (const auto& note : settings_.ignoredHorovod) KOLO_LOG(kInfo) << note;
  }
  const std::string& mode = settings_.transport;
  if (mode != "auto" && mode != "tcp" && mode != "shm" && mode != "mpi") {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_TRANSPORT='" << mode << "' (expected auto, shm, tcp or mpi)");
  }
  if (mode == "mpi" && !KOLO_HAVE_MPI) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "KOLO_TRANSPORT=mpi but this kolo was built without MPI");
  }
}

// store_ (the engine's, or the rendezvous store) and config_.name with
// this communicator's generation.
void CommunicatorImpl::openStore(const CommunicatorConfig& config,
                                 std::shared_ptr<rendezvous::Store> engineStore,
                                 const std::string& secret) {
  if (config.rendezvous.empty() && !engineStore) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "no rendezvous address for a job of "
                                                << config.size
                                                << " ranks: set KOLO_RENDEZVOUS or "
                                                   "start the job with kolorun");
  }
  if (engineStore) {
    store_ = std::move(engineStore);
  } else {
    // Rank 0's store listens where the others connect: the rendezvous host.
    store_ =
        rendezvous::openStore(config.rendezvous, config.hostStore && config.rank == 0,
                              toMillis(settings_.connectTimeoutSeconds), secret);
  }
  // Every key of this communicator lives under NAME/gN, N counted per rank:
  // the n-th communicator that a rank creates under a name on one store (a
  // kolo_init after a kolo_finalize: kolorun's store outlives them) uses
  // generation n, so an earlier world's keys (shm segment names, addresses,
  // attach counts, split names) can never be mistaken for this one's.
  config_.name = config.name + "/g" +
                 std::to_string(store_->add(
                     config.name + "/generation/" + std::to_string(config.rank), 1));
}

// world_: a router over shm for peers on this host (unless KOLO_TRANSPORT
// names one transport for all) and, for peers elsewhere, mpi under the MPI
// engine (or when asked for), else tcp. Whether the mpi transport exists is
// the same on every rank (its creation is collective over MPI_COMM_WORLD):
// with mpi, any job of more than one rank; with auto, any job across more
// than one host.
CommunicatorImpl::Links CommunicatorImpl::connectTransports(rendezvous::Store& store,
                                                            bool engineMpi,
                                                            const std::string& secret) {
  const std::string& mode = settings_.transport;
  const Layout& l = topology_.layout;
  const auto spin = Backoff::spinFor(settings_.spinMicros, l.localSize);
  Links links;
  links.shm = (mode == "auto" || mode == "shm") && l.localSize > 1;
  const bool remoteOverMpi = mode == "mpi" || (engineMpi && mode != "tcp");
  std::vector<std::unique_ptr<transport::Transport>> parts;
  std::vector<int> routes(l.size, 0);
  if (links.shm) {
    transport::ShmTransport::Options so;
    so.rank = l.rank;
    so.size = l.size;
    so.localRanks = topology_.localRanks();
    so.timeout = toMillis(settings_.timeoutSeconds);
    so.connectTimeout = toMillis(settings_.connectTimeoutSeconds);
    so.spin = spin;
    so.jobName = config_.name;
    parts.push_back(transport::ShmTransport::create(so, store));
  }
  std::vector<bool> remote(l.size, false);
  for (int r = 0; r < l.size; ++r) {
    remote[r] = r != l.rank && !(links.shm && topology_.hostOf[r] == l.crossRank);
    links.remote |= remote[r];
  }
  links.mpi = remoteOverMpi && (mode == "mpi" || l.crossSize > 1);
  if (links.mpi || links.remote) {
    const int index = static_cast<int>(parts.size());
    parts.push_back(links.mpi ? mpiTransport(remote, spin)
                              : tcpTransport(remote, store, secret, spin));
    for (int r = 0; r < l.size; ++r) {
      if (remote[r]) routes[r] = index;
    }
  }
  world_ = std::make_unique<transport::RouterTransport>(
      l.rank, l.size, std::move(parts), std::move(routes), spin,
      toMillis(settings_.timeoutSeconds));
  return links;
}

std::unique_ptr<transport::Transport> CommunicatorImpl::mpiTransport(
    const std::vector<bool>& remote, std::chrono::microseconds spin) {
#if KOLO_HAVE_MPI
  transport::MpiTransport::Options mo;
  mo.rank = topology_.layout.rank;
  mo.size = topology_.layout.size;
  mo.connect = remote;
  mo.timeout = toMillis(settings_.timeoutSeconds);
  mo.spin = spin;
  return transport::MpiTransport::create(mo);
#else
  KOLO_THROW(ErrorCode::kInternal, "the mpi transport is not built in");
#endif
}

std::unique_ptr<transport::Transport> CommunicatorImpl::tcpTransport(
    const std::vector<bool>& remote, rendezvous::Store& store, const std::string& secret,
    std::chrono::microseconds spin) {
  transport::TcpTransport::Options to;
  to.rank = topology_.layout.rank;
  to.size = topology_.layout.size;
  to.connect = remote;
  to.advertiseAddress =
      pickAdvertiseAddress(settings_.networkInterface, config_.rendezvous);
  to.timeout = toMillis(settings_.timeoutSeconds);
  to.connectTimeout = toMillis(settings_.connectTimeoutSeconds);
  to.spin = spin;
  to.socketBufferBytes = static_cast<size_t>(settings_.tcpBufferBytes);
  to.secret = secret;
  return transport::TcpTransport::create(to, store);
}

// The host's shared-memory group, named after the communicator's name as
// given (`name`) and the host's index.
void CommunicatorImpl::createShmGroup(rendezvous::Store& store, const std::string& name) {
  const Layout& l = topology_.layout;
  shm::ShmGroup::Options go;
  go.localRank = l.localRank;
  go.localSize = l.localSize;
  go.globalRanks = topology_.localRanks();
  go.slotBytes = static_cast<size_t>(settings_.shmChunkBytes);
  go.timeout = toMillis(settings_.timeoutSeconds);
  go.spin = Backoff::spinFor(settings_.spinMicros, l.localSize);
  go.name = name + "/host" + std::to_string(l.crossRank);
  shm_ = shm::ShmGroup::create(go, store);
  allLocalShm_ = l.crossSize == 1;
}

// Across hosts: this host's ranks, and the ranks of the same local index on
// every host, as groups over world_.
void CommunicatorImpl::createHostGroups() {
  local_ = std::make_unique<transport::GroupTransport>(*world_, topology_.localRanks());
  auto cross = topology_.crossRanks();
  if (!cross.empty()) {
    cross_ = std::make_unique<transport::GroupTransport>(*world_, cross);
  }
}

CommunicatorImpl::~CommunicatorImpl() {
  leaveExitGoodbye(this);
  shutdown();
}

void CommunicatorImpl::shutdown() {
  close(/*atExit=*/false);
}

void CommunicatorImpl::close(bool atExit) {
  std::lock_guard<std::mutex> lock(shutdownMu_);
  if (shut_) return;
  shut_ = true;
  // Messages still pending end now; a receive never matched cannot be.
  queue_.runBlocking([&] {
    if (p2p_) {
      p2p_->failAll(std::make_exception_ptr(Error(
          ErrorCode::kInvalidArgument, "point-to-point: the communicator of rank " +
                                           std::to_string(rank()) +
                                           " shut down while the message was pending")));
    }
  });
  if (broken_ || layout().size == 1) return;
  // A peer lost in a team of this communicator's family (the runtime's,
  // found while this one was idle) would not answer this step either.
  if (familyLost_->load()) return;
  try {
    // A rank must not close its links while a peer still receives from it:
    // the closing step is a barrier whose descriptor says "finalize", so
    // peers that wait in another collective fail at once, all with the same
    // error naming this rank (descriptor_check.h), instead of stalling.
    queue_.runBlocking([&] {
      guarded([&] {
        OpDescriptor d;
        d.kind = CollectiveKind::kFinalize;
        if (atExit) d.extra = collectives::kFinalizeAtExit;
        exchange(nextContext(), d, nullptr);
      });
    });
    // The rank that hosts the store (rank 0 without a launcher) closes it
    // between two barriers: no rank returns from here while it still
    // listens, so a kolo_init that follows at once can only reach the next
    // world's store (the client retries until it listens), never this one
    // as it goes away.
    // (Stopped explicitly: the teams split from this communicator share the
    // store object and may still be closing alongside, kolo_finalize and the
    // exit goodbye releasing them all at once.)
    if (config_.hostStore && config_.rank == 0) {
      store_->stopServing();
      store_.reset();
    }
    queue_.runBlocking([&] { guarded([&] { doBarrier(); }); });
  } catch (const std::exception& e) {
    KOLO_LOG(kWarning) << "shutdown barrier failed: " << e.what();
  }
}

}  // namespace api
}  // namespace kolo
