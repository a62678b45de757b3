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

// Bytes of count elements, or an error naming the overflow.
size_t checkedBytes(size_t count, DataType dtype, const char* what) {
  const size_t es = elementSize(dtype);
  constexpr size_t kMax = size_t{1} << 62;
  if (count > kMax / es) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": count " << count << " of "
                                                 << toString(dtype)
                                                 << " overflows the addressable size");
  }
  return count * es;
}

// `count` elements for each of `ranks` ranks must be addressable.
void checkedPerRank(size_t count, int ranks, DataType dtype, const char* what,
                    const char* name) {
  if (count > (size_t{1} << 62) / ranks) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": " << name << " " << count
                                                 << " times " << ranks
                                                 << " ranks overflows");
  }
  checkedBytes(count * ranks, dtype, what);
}

// With one rank the result is the input.
void copyIfDistinct(const void* send, void* recv, size_t count, DataType dtype) {
  if (count > 0 && recv != send) std::memmove(recv, send, count * elementSize(dtype));
}

void checkDtype(DataType dtype, const char* what) {
  if (!isValid(dtype)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown dtype value " << static_cast<int>(dtype));
  }
}

void checkOp(ReduceOp op, const char* what) {
  if (!isValid(op)) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": unknown reduction op value " << static_cast<int>(op));
  }
}

void checkBuffer(const void* p, size_t count, const char* what, const char* name) {
  if (p == nullptr && count > 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": " << name << " buffer is null but count is " << count);
  }
}

// A segmented allreduce's arguments: send and recv unused, the segments'
// buffers set, their counts adding up to `count`.
void checkSegments(const AllreduceOptions& o, const char* what) {
  if (o.segments == nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": segments is null but segmentCount is " << o.segmentCount);
  }
  if (o.send != nullptr || o.recv != nullptr) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               what << ": send and recv must be null when segments are given");
  }
  size_t total = 0;
  for (size_t i = 0; i < o.segmentCount; ++i) {
    const AllreduceSegment& s = o.segments[i];
    if ((s.send == nullptr || s.recv == nullptr) && s.count > 0) {
      KOLO_THROW(ErrorCode::kInvalidArgument, what
                                                  << ": segment " << i << " has a null "
                                                  << (s.send == nullptr ? "send" : "recv")
                                                  << " buffer but count " << s.count);
    }
    if (s.count > std::numeric_limits<size_t>::max() - total) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << ": the segments' counts overflow at segment " << i);
    }
    total += s.count;
  }
  if (total != o.count) {
    KOLO_THROW(ErrorCode::kInvalidArgument, what << ": the " << o.segmentCount
                                                 << " segments hold " << total
                                                 << " elements, count is " << o.count);
  }
}

uint64_t hashCounts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t c : counts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (c >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h | 1;  // never 0: 0 means "equal counts"
}

// Runs validation; returns the error instead of throwing, so the rank still
// takes part in the agreement step.
template <typename Checks>
std::exception_ptr validate(const Checks& checks) {
  try {
    checks();
  } catch (const Error&) {
    return std::current_exception();
  }
  return nullptr;
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

void CommunicatorImpl::guarded(const std::function<void()>& op) {
  if (broken_) std::rethrow_exception(broken_);
  try {
    op();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout ||
        e.code() == ErrorCode::kIo || e.code() == ErrorCode::kInternal) {
      broken_ = std::current_exception();
      if (!everyoneKnows_ &&
          (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout)) {
        familyLost_->store(true);
      }
      // Tell the others why, so they name the rank really lost; unless they
      // all found it in the same descriptors (a departed rank), when a
      // notice could only race their own identical error.
      try {
        if (!everyoneKnows_) world_->abort(e);
      } catch (...) {
      }
    }
    throw;
  }
}

collectives::Context CommunicatorImpl::nextContext() {
  collectives::Context ctx{*world_, topology_.layout};
  ctx.local = local_.get();
  ctx.cross = cross_.get();
  ctx.shm = shm_.get();
  ctx.stores = &stagingStores_;
  ctx.selector = selector_.get();
  ctx.tag = ++sequence_ * collectives::kTagsPerOp;
  return ctx;
}

void CommunicatorImpl::agree(const collectives::Context& ctx, const OpDescriptor& d,
                             std::exception_ptr localError) {
  if (!agreed_) return exchange(ctx, d, localError);
  if (layout().size > 1) skipped_.fetch_add(1, std::memory_order_relaxed);
  if (!localError) return;
  try {
    std::rethrow_exception(localError);
  } catch (const Error& e) {
    KOLO_THROW(ErrorCode::kInternal,
               "rank " << rank() << ": " << e.what()
                       << " in a collective its caller had agreed on (collective #"
                       << sequence_ << "); the other ranks could not be told in an "
                       << "agreement step, so the communicator is broken");
  }
}

void CommunicatorImpl::exchange(const collectives::Context& ctx, OpDescriptor d,
                                std::exception_ptr localError) {
  d.sequence = sequence_;
  d.invalid = localError ? 1 : 0;
  try {
    if (layout().size == 1) {
      // nothing to agree with
    } else if (allLocalShm_) {
      exchanged_.fetch_add(1, std::memory_order_relaxed);
      collectives::exchangeAndVerify(*shm_, d, topology_.localRanks());
    } else {
      exchanged_.fetch_add(1, std::memory_order_relaxed);
      collectives::Context checkCtx = ctx;
      checkCtx.tag += collectives::kTagsPerOp / 2;  // clear of the op's own tags
      collectives::exchangeAndVerify(checkCtx, d);
    }
  } catch (const Error& e) {
    if (localError) std::rethrow_exception(localError);
    // A rank that left is seen by every rank in the same descriptors.
    everyoneKnows_ = collectives::isDeparture(e);
    throw;
  }
  if (localError) std::rethrow_exception(localError);
}

// ---- allreduce -------------------------------------------------------------

void CommunicatorImpl::doAllreduce(const AllreduceOptions& o) {
  const char* what = "allreduce";
  size_t bytes = 0;
  const bool segmented = o.segmentCount > 0;
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkOp(o.op, what);
    bytes = checkedBytes(o.count, o.dtype, what);
    if (segmented) {
      checkSegments(o, what);
    } else {
      checkBuffer(o.send, o.count, what, "send");
      checkBuffer(o.recv, o.count, what, "recv");
    }
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kAllreduce;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.op = static_cast<uint8_t>(o.op);
  d.count = o.count;

  collectives::Context ctx = nextContext();
  const collectives::AllreduceAlgorithm* algo = nullptr;
  if (!error) {
    try {
      const std::string_view name =
          !o.algorithm.empty() ? std::string_view(o.algorithm) : forcedAllreduce(ctx);
      algo = name.empty() ? &collectives::selectAllreduce(bytes, ctx)
                          : &collectives::findAllreduce(name, ctx);
    } catch (const Error&) {
      error = std::current_exception();
    }
  }
  d.sequence = sequence_;
  if (error || !algo->checksArguments) {
    agree(ctx, d, error);
  } else {
    ctx.check = &d;
  }
  const size_t es = elementSize(o.dtype);
  const collectives::SegmentView contiguous(o.send, o.recv, o.count, es);
  const collectives::SegmentView pieces(o.segments, o.segmentCount, es);
  const collectives::SegmentView& v = segmented ? pieces : contiguous;
  const ReduceOp op = o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op;
  if (size() == 1) {
    v.forEach(0, o.count, [&](const uint8_t* send, uint8_t* recv, size_t, size_t n) {
      copyIfDistinct(send, recv, n, o.dtype);
    });
    return;
  }
  // An average's division: inside the algorithm when it offers it, else
  // one pass over the result afterwards.
  const int divisor = o.op == ReduceOp::kAverage ? size() : 1;
  const bool divides = divisor > 1 && algo->dividesResult;
  if (!segmented || algo->takesSegments) {
    collectives::AllreduceArgs args{o.send, o.recv, o.count, o.dtype, op};
    if (segmented) {  // send and recv are null then
      args.segments = o.segments;
      args.segmentCount = o.segmentCount;
    }
    if (divides) args.divisor = divisor;
    algo->run(ctx, args);
  } else {
    // Packed: the segments into one buffer, in place, and back out.
    if (packed_.size() < bytes) packed_.resize(bytes);
    v.gatherSend(packed_.data(), 0, o.count);
    algo->run(ctx, {packed_.data(), packed_.data(), o.count, o.dtype, op});
    v.scatterRecv(packed_.data(), 0, o.count);
  }
  if (divisor > 1 && !divides && o.count > 0) {
    v.forEach(0, o.count, [&](const uint8_t*, uint8_t* recv, size_t, size_t n) {
      collectives::divideInPlace(recv, n, o.dtype, divisor);
    });
  }
}

std::string CommunicatorImpl::allreduceAlgorithm(size_t bytes) const {
  collectives::Context ctx{*world_, topology_.layout};
  ctx.local = local_.get();
  ctx.cross = cross_.get();
  ctx.shm = shm_.get();
  ctx.selector = selector_.get();
  const std::string_view forced = forcedAllreduce(ctx);
  if (!forced.empty()) return std::string(collectives::findAllreduce(forced, ctx).name);
  return std::string(collectives::selectAllreduce(bytes, ctx).name);
}

std::string_view CommunicatorImpl::forcedAllreduce(
    const collectives::Context& ctx) const {
  if (!settings_.allreduceAlgorithm.empty()) return settings_.allreduceAlgorithm;
  if (!settings_.algorithm.empty()) return settings_.algorithm;  // KOLO_ALGORITHM
  // Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE: ignored on one host.
  if (settings_.hierarchicalAllreduce != 0 && collectives::allreduceUsable("hier", ctx)) {
    return "hier";
  }
  return {};
}

// ---- split (teams) -----------------------------------------------------------

namespace {

std::string listText(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i > 0 ? "," : "") << ranks[i];
  os << "]";
  return os.str();
}

std::vector<uint8_t> encodeRanks(const std::vector<int>& ranks) {
  const std::string text = listText(ranks);
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace

// A team is a new CommunicatorImpl over the members, meeting through the
// parent's store under "<parent name>/split/<name>/". Before building it the
// members check, through the store, that the name is fresh (a counter that
// only the first use brings to the team's size) and that they all passed
// the same list. Nothing here touches the parent's transports, so split()
// may run while the parent is busy on another thread.
std::shared_ptr<Communicator> CommunicatorImpl::split(const std::vector<int>& ranks,
                                                      const std::string& name) {
  const int n = size();
  const int me = rank();
  if (name.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "split on rank " << me << ": empty team name");
  }
  if (ranks.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "split '" << name << "' on rank " << me << ": empty rank list");
  }
  std::vector<bool> seen(n, false);
  int teamRank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= n) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "split '" << name << "' on rank " << me << ": rank " << r << " in "
                           << listText(ranks) << " is not a rank of a communicator of "
                           << n);
    }
    if (seen[r]) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "split '" << name << "' on rank " << me << ": rank " << r
                           << " is listed twice in " << listText(ranks));
    }
    seen[r] = true;
    if (r == me) teamRank = static_cast<int>(i);
  }
  if (teamRank < 0) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "split '" << name << "' called on rank " << me << ", which is not in "
                         << listText(ranks) << " (only members call it)");
  }

  CommunicatorConfig config;
  config.rank = teamRank;
  config.size = static_cast<int>(ranks.size());
  config.rendezvous = config_.rendezvous;
  config.hostStore = false;
  config.hostId = layout().hostId;
  config.name = config_.name + "/split/" + name;
  Settings settings = settings_;
  // MPI transports are created over MPI_COMM_WORLD, collectively: a subset
  // of ranks cannot make one. A team uses shm within a host, tcp between.
  if (settings.transport == "mpi") settings.transport = "auto";

  if (config.size > 1) {
    KOLO_CHECK(store_ != nullptr);
    rendezvous::PrefixStore store(config.name, *store_);
    const auto timeout = toMillis(settings_.connectTimeoutSeconds);
    if (store.add("split/uses", 1) > config.size) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "split '" << name << "' on rank " << me
                           << ": the team name was used before in this job (names "
                              "must be unique)");
    }
    const std::vector<uint8_t> mine = encodeRanks(ranks);
    // Keyed by this communicator's ranks: members with different lists
    // still read each other's.
    store.set("split/ranks/" + std::to_string(me), mine);
    for (int i = 0; i < config.size; ++i) {
      if (i == teamRank) continue;
      const std::vector<uint8_t> theirs =
          store.get("split/ranks/" + std::to_string(ranks[i]), timeout);
      if (theirs != mine) {
        KOLO_THROW(ErrorCode::kMismatch,
                   "split '" << name << "': rank " << me << " lists ranks "
                             << listText(ranks) << " but rank " << ranks[i] << " lists "
                             << std::string(theirs.begin(), theirs.end()));
      }
    }
  }
  auto team = std::make_shared<CommunicatorImpl>(config, settings, store_, familyLost_);
  team->elastic_ = elastic_;
  return team;
}

// ---- broadcast -------------------------------------------------------------

void CommunicatorImpl::doBroadcast(const BroadcastOptions& o) {
  const char* what = "broadcast";
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkedBytes(o.count, o.dtype, what);
    checkBuffer(o.buffer, o.count, what, "data");
    if (o.root < 0 || o.root >= size()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << ": root " << o.root << " is not a rank of a job of " << size());
    }
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kBroadcast;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.count = o.count;
  d.root = o.root;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return;
  collectives::broadcastBinomial(ctx, {o.buffer, o.count, o.dtype, o.root});
}

// ---- allgather -------------------------------------------------------------

void CommunicatorImpl::doAllgather(const AllgatherOptions& o) {
  const char* what = "allgather";
  const bool varying = !o.counts.empty();
  std::vector<size_t> counts = varying ? o.counts : std::vector<size_t>(size(), o.count);
  size_t total = 0;
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    if (varying && static_cast<int>(o.counts.size()) != size()) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << ": " << o.counts.size() << " per-rank counts given for a job of "
                      << size() << " ranks");
    }
    for (size_t c : counts) {
      checkedBytes(c, o.dtype, what);
      if (total + c < total)
        KOLO_THROW(ErrorCode::kInvalidArgument, what << ": total count overflows");
      total += c;
    }
    checkedBytes(total, o.dtype, what);
    checkBuffer(o.send, counts[rank()], what, "send");
    checkBuffer(o.recv, total, what, "recv");
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kAllgather;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.count = varying ? total : o.count;
  d.extra = varying ? hashCounts(counts) : 0;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return copyIfDistinct(o.send, o.recv, total, o.dtype);
  collectives::allgatherRing(ctx, {o.send, o.recv, std::move(counts), o.dtype});
}

// ---- reduce-scatter --------------------------------------------------------

void CommunicatorImpl::doReduceScatter(const ReduceScatterOptions& o) {
  const char* what = "reducescatter";
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkOp(o.op, what);
    checkedPerRank(o.recvCount, size(), o.dtype, what, "recv count");
    checkBuffer(o.send, o.recvCount, what, "send");
    checkBuffer(o.recv, o.recvCount, what, "recv");
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kReduceScatter;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.op = static_cast<uint8_t>(o.op);
  d.count = o.recvCount;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return copyIfDistinct(o.send, o.recv, o.recvCount, o.dtype);
  collectives::reduceScatterRing(ctx,
                                 {o.send, o.recv, o.recvCount, o.dtype,
                                  o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op});
  if (o.op == ReduceOp::kAverage && o.recvCount > 0) {
    collectives::divideInPlace(o.recv, o.recvCount, o.dtype, size());
  }
}

// ---- alltoall --------------------------------------------------------------

void CommunicatorImpl::doAlltoall(const AlltoallOptions& o) {
  const char* what = "alltoall";
  auto error = validate([&] {
    checkDtype(o.dtype, what);
    checkedPerRank(o.countPerRank, size(), o.dtype, what, "count per rank");
    checkBuffer(o.send, o.countPerRank, what, "send");
    checkBuffer(o.recv, o.countPerRank, what, "recv");
  });
  OpDescriptor d;
  d.kind = CollectiveKind::kAlltoall;
  d.dtype = static_cast<uint8_t>(o.dtype);
  d.count = o.countPerRank;
  collectives::Context ctx = nextContext();
  agree(ctx, d, error);
  if (size() == 1) return copyIfDistinct(o.send, o.recv, o.countPerRank, o.dtype);
  collectives::alltoallPairwise(ctx, {o.send, o.recv, o.countPerRank, o.dtype});
}

// ---- barrier ---------------------------------------------------------------

// A barrier is its descriptor exchange: every rank hears from every other
// in it (one shared-memory step, or the allgather of descriptors over the
// transport), and a rank that waits in another collective meets it there
// and fails with the mismatch naming both (descriptor_check.h) instead of
// each side waiting for messages of tags the other never sends. Only in an
// agreed scope (agreed_scope.h: no rank can be elsewhere) does a barrier
// over the transport take the dissemination rounds (log2 n, not n - 1).
void CommunicatorImpl::doBarrier() {
  if (size() == 1) return;
  collectives::Context ctx = nextContext();
  if (allLocalShm_ || !agreed_) {
    OpDescriptor d;
    d.kind = CollectiveKind::kBarrier;
    exchange(ctx, d, nullptr);
    return;
  }
  collectives::barrierDissemination(ctx);
}

// ---- blocking and async entry points -----------------------------------------

#define KOLO_ENTRY(Name, Do, Options)                                     \
  void CommunicatorImpl::Name(const Options& o) {                         \
    queue_.runBlocking([&] { guarded([&] { Do(o); }); });                 \
  }                                                                       \
  std::shared_ptr<Work> CommunicatorImpl::Name##Async(const Options& o) { \
    return queue_.submit([this, o] { guarded([&] { Do(o); }); });         \
  }

KOLO_ENTRY(allreduce, doAllreduce, AllreduceOptions)
KOLO_ENTRY(broadcast, doBroadcast, BroadcastOptions)
KOLO_ENTRY(allgather, doAllgather, AllgatherOptions)
KOLO_ENTRY(reduceScatter, doReduceScatter, ReduceScatterOptions)
KOLO_ENTRY(alltoall, doAlltoall, AlltoallOptions)
#undef KOLO_ENTRY

void CommunicatorImpl::barrier() {
  queue_.runBlocking([&] { guarded([&] { doBarrier(); }); });
}

std::shared_ptr<Work> CommunicatorImpl::barrierAsync() {
  return queue_.submit([this] { guarded([&] { doBarrier(); }); });
}

}  // namespace api
}  // namespace kolo
