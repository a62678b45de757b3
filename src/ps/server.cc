// The server loop. One header receive is posted per worker (a receive from
// any source cannot span the shm and tcp parts of the job's transport).
// When a header arrives, the payload's receives are posted into a buffer of
// that worker's and the loop goes on: the workers' payloads arrive at once,
// each handled when it is complete, and the header's receive is posted
// again. Replies leave through the ReplyQueue, not waited on either. Pulls
// that ask for a version the shard has not reached wait in pending_ and are
// answered when it gets there.
//
// Shard payloads (pushes, exchanges, the seed) are received into pooled
// buffers of the shard's size, at most kReceiveBudgetBytes of them in all
// (at least one, at most one per worker); a worker whose header arrives
// when none is free waits for one, its data held by the transport.
#include "ps/server.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "common/byte_codec.h"
#include "common/check.h"
#include "common/logging.h"
#include "ps/checkpoint.h"

namespace kolo::ps {

std::vector<uint8_t> ServerStats::encode() const {
  std::vector<uint64_t> v{version, updates, rejected, maxStaleness};
  v.insert(v.end(), pushes.begin(), pushes.end());
  v.insert(v.end(), pulls.begin(), pulls.end());
  std::vector<uint8_t> b;
  ByteWriter w(b, ByteOrder::kLittle);
  for (uint64_t x : v) w.put<uint64_t>(x);
  return b;
}

ServerStats ServerStats::decode(const uint8_t* b, size_t size, uint32_t workers) {
  KOLO_CHECK_EQ(size, statsBytes(workers));
  ByteReader in(b, size, ByteOrder::kLittle);
  std::vector<uint64_t> v(size / 8, 0);
  for (uint64_t& x : v) x = in.get<uint64_t>();
  ServerStats s;
  s.version = v[0];
  s.updates = v[1];
  s.rejected = v[2];
  s.maxStaleness = v[3];
  s.pushes.assign(v.begin() + 4, v.begin() + 4 + workers);
  s.pulls.assign(v.begin() + 4 + workers, v.end());
  return s;
}

Server::Server(transport::Transport& t, Roles roles, int serverIndex)
    : t_(t),
      roles_(std::move(roles)),
      index_(serverIndex),
      workers_(static_cast<int>(roles_.workers.size())),
      replies_(t) {
  KOLO_CHECK_EQ(roles_.servers.at(index_), t_.rank());
  headers_.resize(workers_);
  requests_.resize(workers_);
  inbound_.resize(workers_);
  done_.assign(workers_, false);
  pushedThisRound_.assign(workers_, false);
  stats_.pushes.assign(workers_, 0);
  stats_.pulls.assign(workers_, 0);
}

WireLimits Server::limits() const {
  WireLimits l;
  l.workers = static_cast<uint32_t>(workers_);
  l.shards = static_cast<uint32_t>(roles_.servers.size());
  l.shardBytes = config_ ? shardBytes_.data() : nullptr;
  return l;
}

void Server::postHeader(int w) {
  requests_[w] =
      t_.irecv(roles_.workers[w], kHeaderTag, headers_[w].data(), headers_[w].size());
}

void Server::run() {
  // A worker's death must not break the transport for the others: with
  // isolation it fails only the requests to and from that worker.
  try {
    t_.setIsolatePeerFailures(true);
  } catch (const Error& e) {
    KOLO_LOG(kInfo) << "parameter server " << index_
                    << ": the transport cannot isolate a lost worker (" << e.what()
                    << "); a worker's death stops this server";
  }
  for (int w = 0; w < workers_; ++w) postHeader(w);
  open_ = workers_;
  try {
    serveAll();
  } catch (const Error& e) {
    stopTransfers(e);
    throw;
  } catch (const std::exception& e) {
    stopTransfers(Error(ErrorCode::kInternal, e.what()));
    throw;
  }
  KOLO_LOG(kInfo) << "parameter server " << index_ << ": every worker finished after "
                  << stats_.version << " updates";
}

// A server that fails with transfers in flight aborts the transport: the
// transport must not touch the buffers this server is about to free, and
// the workers learn why at once.
void Server::stopTransfers(const Error& cause) {
  bool inFlight = !replies_.empty();
  for (const Inbound& in : inbound_) inFlight |= in.receiving;
  if (inFlight) t_.abort(cause);
}

void Server::serveAll() {
  // Each pass starts at firstWorker(), so that when payload buffers are
  // short the servers start on different workers rather than all on
  // worker 0.
  const int first = firstWorker();
  auto lastProgress = Transfer::Clock::now();
  while (open_ > 0 || !replies_.empty()) {
    bool moved = false;
    for (int k = 0; k < workers_; ++k) moved |= step((first + k) % workers_);
    moved |= replies_.reap([this](int w, std::exception_ptr e) { replyFailed(w, e); });
    if (moved || t_.progress()) {
      lastProgress = Transfer::Clock::now();
      continue;
    }
    replies_.failIfStalled(lastProgress);
    for (const Inbound& in : inbound_) {
      if (in.receiving) in.transfer.failIfStalled(t_, lastProgress);
    }
    t_.idle(std::chrono::microseconds(1000));
  }
}

// Moves worker w's message along: a header that arrived starts its
// payload, a payload complete is handled. A transport error propagates
// unless it is a lost worker's (noticeLostWorkers). Whether anything moved.
bool Server::step(int w) {
  Inbound& in = inbound_[w];
  try {
    if (done_[w]) {
      // Finished, refused or lost: its buffer back once the transport lets go.
      if (in.receiving && in.transfer.done()) dropInbound(w);
      return false;
    }
    if (!in.receiving) return requests_[w]->done() && startMessage(w);
    if (!in.transfer.done()) return false;
    finishMessage(w);
    return true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kPeerLost || !noticeLostWorkers(e.what())) throw;
    return true;
  }
}

// Worker w's header has arrived: checks it and posts the payload's
// receives. false (nothing done) while a shard payload waits for a buffer.
bool Server::startMessage(int w) {
  if (requests_[w]->error) std::rethrow_exception(requests_[w]->error);
  const int from = roles_.workers[w];
  Header h;
  try {
    h = decodeHeader(headers_[w].data(), headers_[w].size(), limits(), from);
    if (h.worker != static_cast<uint32_t>(w) ||
        h.shard != static_cast<uint32_t>(index_)) {
      KOLO_THROW(ErrorCode::kMismatch,
                 "parameter-server " << messageTypeName(h.type) << " from rank " << from
                                     << " says worker " << h.worker << ", shard "
                                     << h.shard << "; expected worker " << w << ", shard "
                                     << index_);
    }
  } catch (const Error& e) {
    refuse(w, e.what());
    return true;
  }
  Inbound& in = inbound_[w];
  const bool shard = isShardPayload(h.type);
  if (shard) {
    // The decoder has checked the size against the shard's: segments_
    // exist and cover it.
    if (!takeBuffer(&in.payload)) return false;
  } else {
    in.payload.assign(h.payloadBytes, 0);
  }
  in.header = h;
  in.receiving = true;
  Transfer& x = in.transfer;
  x.index = w;
  x.rank = from;
  x.outgoing = false;
  x.bytes = h.payloadBytes;
  x.started = Transfer::Clock::now();
  x.requests.clear();
  if (shard) {
    for (const Segment& g : segments_) {
      x.requests.push_back(t_.irecv(from, kPayloadTag,
                                    in.payload.data() + g.shardOffset * sizeof(float),
                                    g.count * sizeof(float)));
    }
  } else if (h.payloadBytes > 0) {
    x.requests.push_back(t_.irecv(from, kPayloadTag, in.payload.data(), h.payloadBytes));
  }
  return true;
}

// Worker w's payload is complete: handles the message, then waits for the
// worker's next header. Any error but a transport's refuses the worker.
void Server::finishMessage(int w) {
  Inbound& in = inbound_[w];
  const std::exception_ptr error = in.transfer.error();
  const Header h = in.header;
  std::vector<uint8_t> payload = std::move(in.payload);
  const bool pooled = isShardPayload(h.type);
  in.receiving = false;
  in.transfer.requests.clear();
  struct Return {  // the buffer goes back to the pool however this ends
    Server* s;
    std::vector<uint8_t>* b;
    bool pooled;
    ~Return() {
      if (pooled) s->giveBuffer(std::move(*b));
    }
  } back{this, &payload, pooled};
  if (error) std::rethrow_exception(error);
  if (h.type == MessageType::kBye) {
    done_[w] = true;
    --open_;
    applySyncRoundIfComplete();
    return;
  }
  try {
    handle(w, h, payload);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout) throw;
    refuse(w, e.what());
    return;
  }
  if (!done_[w]) postHeader(w);
}

bool Server::takeBuffer(std::vector<uint8_t>* out) {
  if (buffersOut_ >= maxBuffers_) return false;
  ++buffersOut_;
  if (!freeBuffers_.empty()) {
    *out = std::move(freeBuffers_.back());
    freeBuffers_.pop_back();
  } else {
    out->assign(values().size() * sizeof(float), 0);
  }
  return true;
}

void Server::giveBuffer(std::vector<uint8_t>&& b) {
  --buffersOut_;
  freeBuffers_.push_back(std::move(b));
}

void Server::dropInbound(int w) {
  Inbound& in = inbound_[w];
  in.receiving = false;
  in.transfer.requests.clear();
  if (isShardPayload(in.header.type)) giveBuffer(std::move(in.payload));
}

// A reply failed: a lost worker is dropped; anything else stops the server.
void Server::replyFailed(int w, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kPeerLost || !t_.peerLost(roles_.workers[w])) throw;
    loseWorker(w, e.what());
  }
}

// A kPeerLost: which workers' links failed? Each newly lost one is dropped
// (loseWorker); false when the loss is not a worker's (then the caller
// rethrows: a server cannot go on without its transport).
bool Server::noticeLostWorkers(const std::string& why) {
  bool any = false;
  for (int w = 0; w < workers_; ++w) {
    if (t_.peerLost(roles_.workers[w])) {
      any = true;
      loseWorker(w, why);
    }
  }
  return any;
}

// Logs the loss once. downpour, easgd, and sync while at most
// backup_workers are lost: the server goes on (the worker's pending pulls
// are dropped by servePulls; a sync round needs workers - backup_workers
// pushes, or those of every trainer left: applySyncRoundIfComplete). Plain sync, or more
// losses than backup workers, or worker 0 before it seeded: every other worker gets a
// kError flagged kFlagErrorPeerLost naming the dead worker.
void Server::loseWorker(int w, const std::string& why) {
  if (done_[w]) return;  // finished, refused or already lost
  done_[w] = true;
  --open_;
  ++lost_;
  const int rank = roles_.workers[w];
  const bool survivable =
      (w != 0 || seeded_) &&
      (!config_ || config_->mode != Mode::kSync || lost_ <= config_->backupWorkers);
  std::ostringstream what;
  what << "parameter server " << index_ << ": worker " << w << " (rank " << rank
       << ") was lost (" << why << ")";
  if (survivable) {
    KOLO_LOG(kWarning) << what.str() << "; going on without it";
    applySyncRoundIfComplete();
    return;
  }
  what << "; " << (config_ ? modeName(config_->mode) : "the")
       << " mode with backup_workers=" << (config_ ? config_->backupWorkers : 0)
       << " cannot go on without it";
  KOLO_LOG(kError) << what.str() << "; failing every worker";
  const std::string text = what.str().substr(0, limits().maxErrorBytes);
  for (int other = 0; other < workers_; ++other) {
    if (done_[other]) continue;
    done_[other] = true;
    --open_;
    Header r;
    r.type = MessageType::kError;
    r.flags = kFlagErrorPeerLost;
    reply(other, r, text.data(), text.size());
  }
}

void Server::handle(int w, const Header& h, std::vector<uint8_t>& payload) {
  const auto* floats = reinterpret_cast<const float*>(payload.data());
  const bool needsConfig =
      h.type != MessageType::kConfig && h.type != MessageType::kStats;
  if (needsConfig && !cannotServe_.empty()) {
    KOLO_THROW(ErrorCode::kInvalidArgument, cannotServe_);
  }
  // A pull may come before worker 0's configuration: it waits for the seed.
  if (needsConfig && !config_ && h.type != MessageType::kPull) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "parameter server " << index_ << ": " << messageTypeName(h.type)
                                   << " from worker " << w
                                   << " before any configuration");
  }
  switch (h.type) {
    case MessageType::kConfig: onConfig(w, payload); break;
    case MessageType::kSeed:
      if (w != 0) {
        KOLO_THROW(ErrorCode::kInvalidArgument, "parameter server "
                                                    << index_ << ": seed from worker "
                                                    << w << " (only worker 0 seeds)");
      }
      std::memcpy(writableValues(), floats, payload.size());
      seeded_ = true;
      servePulls();
      break;
    case MessageType::kPull:
      ++stats_.pulls[w];
      pending_.push_back({w, h.version});
      servePulls();
      break;
    case MessageType::kPush: onPush(w, h, floats); break;
    case MessageType::kExchange: onExchange(w, floats); break;
    case MessageType::kStop: onStop(w); break;
    case MessageType::kSave:
    case MessageType::kLoad: onCheckpoint(w, h, payload); break;
    case MessageType::kStats: {
      std::vector<uint8_t> s = stats_.encode();
      Header r;
      r.type = MessageType::kStatsReply;
      r.version = stats_.version;
      reply(w, r, s.data(), s.size());
      break;
    }
    default:
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 "parameter server " << index_ << ": unexpected "
                                     << messageTypeName(h.type) << " from worker " << w);
  }
}

// Worker 0's configuration is the job's; one that arrives earlier from
// another worker waits for it and is compared then.
void Server::onConfig(int w, const std::vector<uint8_t>& payload) {
  PsConfig c = decodeConfig(payload.data(), payload.size(), roles_.workers[w]);
  validate(c, workers_);
  if (w != 0) {
    if (config_) {
      checkSame(w, c);
    } else {
      early_.emplace_back(w, std::move(c));
    }
    return;
  }
  ShardMap map =
      ShardMap::build(c.tensorElements, static_cast<int>(roles_.servers.size()));
  for (uint64_t n : map.shardElements) shardBytes_.push_back(n * sizeof(float));
  segments_ = segmentsOf(map.shards[index_]);
  const size_t n = map.shardElements[index_];
  values_ = std::make_shared<std::vector<float>>(n, 0.0f);
  maxBuffers_ = static_cast<int>(std::clamp<uint64_t>(
      kReceiveBudgetBytes / std::max<uint64_t>(1, n * sizeof(float)), 1, workers_));
  sum_.assign(c.mode == Mode::kSync ? n : 0, 0.0f);
  scratch_.assign(n, 0.0f);
  if (c.mode != Mode::kEasgd) rule_ = std::make_unique<UpdateRule>(c.optimizer, n);
  config_ = std::move(c);
  KOLO_LOG(kInfo) << "parameter server " << index_ << ": mode " << modeName(config_->mode)
                  << ", " << n << " of the parameters' elements";
  for (auto& [other, early] : early_) {
    try {
      checkSame(other, early);
    } catch (const Error& e) {
      refuse(other, e.what());
    }
  }
  early_.clear();
}

void Server::checkSame(int w, const PsConfig& c) const {
  if (c == *config_) return;
  KOLO_THROW(ErrorCode::kMismatch,
             "parameter server "
                 << index_ << ": worker " << w << "'s configuration (mode "
                 << modeName(c.mode) << ", " << c.tensorElements.size()
                 << " tensors) differs from worker 0's (mode " << modeName(config_->mode)
                 << ", " << config_->tensorElements.size() << " tensors)");
}

// sync: a push for the current version joins the round; an older one (a
// backup worker's late push) is refused; the round applies once
// workers - backup_workers have pushed. downpour: applied at once when at
// most staleness_bound versions stale, else refused.
void Server::onPush(int w, const Header& h, const float* grad) {
  const PsConfig& c = *config_;
  if (c.mode == Mode::kEasgd) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "parameter server "
                   << index_ << ": push from worker " << w
                   << " in easgd mode (easgd exchanges, it does not push)");
  }
  if (h.version > stats_.version) {
    KOLO_THROW(ErrorCode::kMismatch,
               "parameter server " << index_ << ": push from worker " << w
                                   << " for version " << h.version
                                   << ", but the shard is at version " << stats_.version);
  }
  if (w >= workers_ - c.validators) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "parameter server " << index_ << ": push from worker " << w
                                   << ", a validator (validators push nothing)");
  }
  ++stats_.pushes[w];
  Header r;
  r.type = MessageType::kPushReply;
  const uint64_t staleness = stats_.version - h.version;
  const bool late =
      c.mode == Mode::kSync ? staleness > 0 : staleness > uint64_t(c.stalenessBound);
  if (late) {
    ++stats_.rejected;
    r.flags = kFlagRejectedStale;
    r.version = stats_.version;
    reply(w, r, nullptr, 0);
    return;
  }
  if (c.mode == Mode::kSync) {
    if (pushedThisRound_[w]) {
      KOLO_THROW(ErrorCode::kMismatch, "parameter server " << index_ << ": worker " << w
                                                           << " pushed twice for version "
                                                           << h.version);
    }
    pushedThisRound_[w] = true;
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += grad[i];
    roundLr_ = h.lr;
    r.version = stats_.version;
    reply(w, r, nullptr, 0);
    ++roundCount_;
    applySyncRoundIfComplete();
    return;
  }
  rule_->apply(writableValues(), grad, h.lr);
  ++stats_.version;
  ++stats_.updates;
  stats_.maxStaleness = std::max(stats_.maxStaleness, staleness);
  r.version = stats_.version;
  reply(w, r, nullptr, 0);
  servePulls();
}

// A sync round applies once workers - backup_workers trainers have pushed,
// or every trainer still training has: a trainer that has said goodbye
// pushes no more, and the others' last rounds must not wait for it.
void Server::applySyncRoundIfComplete() {
  if (!config_ || config_->mode != Mode::kSync || roundCount_ == 0) return;
  const int trainerCount = trainers(*config_, workers_);
  int training = 0;
  for (int w = 0; w < trainerCount; ++w) training += done_[w] ? 0 : 1;
  const int quorum = std::min(trainerCount - config_->backupWorkers, training);
  if (roundCount_ >= quorum) applySyncRound();
}

// The round's gradient is the mean of its pushes, as an averaging
// allreduce gives it; the optimizer then steps once.
void Server::applySyncRound() {
  const float inv = 1.0f / static_cast<float>(roundCount_);
  for (size_t i = 0; i < sum_.size(); ++i) {
    scratch_[i] = sum_[i] * inv;
    sum_[i] = 0.0f;
  }
  rule_->apply(writableValues(), scratch_.data(), roundLr_);
  ++stats_.version;
  ++stats_.updates;
  roundCount_ = 0;
  std::fill(pushedThisRound_.begin(), pushedThisRound_.end(), false);
  servePulls();
}

void Server::onExchange(int w, const float* x) {
  if (config_->mode != Mode::kEasgd) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "parameter server "
                                                << index_ << ": exchange from worker "
                                                << w << " in " << modeName(config_->mode)
                                                << " mode (only easgd exchanges)");
  }
  ++stats_.pushes[w];
  // The reply's buffer is the worker's until sent: a new one when the last
  // is still on its way.
  replies_.releaseSent();
  if (!exchangeOut_ || exchangeOut_.use_count() > 1) {
    exchangeOut_ = std::make_shared<std::vector<float>>(values().size());
  }
  easgdExchange(writableValues(), x, exchangeOut_->data(), values().size(),
                config_->easgdAlpha);
  ++stats_.version;
  ++stats_.updates;
  Header r;
  r.type = MessageType::kExchangeReply;
  r.version = stats_.version;
  replyWith(w, r, exchangeOut_, exchangeOut_->data(),
            exchangeOut_->size() * sizeof(float));
}

// sync: from the next version, which every worker pulls in the same round,
// so all stop after the same step; the other modes: now.
void Server::onStop(int w) {
  if (!stopAt_) {
    stopAt_ = stats_.version + (config_->mode == Mode::kSync ? 1 : 0);
    KOLO_LOG(kInfo) << "parameter server " << index_ << ": worker " << w
                    << " asks to stop training at version " << *stopAt_;
  }
  Header r;
  r.type = MessageType::kStopReply;
  r.version = stats_.version;
  reply(w, r, nullptr, 0);
}

// A checkpoint that cannot be written or read is this request's error, not
// the worker's: it stays served.
void Server::onCheckpoint(int w, const Header& h, const std::vector<uint8_t>& payload) {
  try {
    if (h.type == MessageType::kSave) {
      onSave(w, payload);
    } else {
      onLoad(w, h, payload);
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout) throw;
    KOLO_LOG(kWarning) << "parameter server " << index_ << ": " << messageTypeName(h.type)
                       << " for worker " << w << " failed: " << e.what();
    std::string text = std::string(e.what()).substr(0, limits().maxErrorBytes);
    Header r;
    r.type = MessageType::kError;
    reply(w, r, text.data(), text.size());
  }
}

// Writes the shard, its version and the optimizer's state to the file the
// worker names (checkpoint.h: temporary file, fsync, rename).
void Server::onSave(int w, const std::vector<uint8_t>& payload) {
  if (!seeded_) {
    KOLO_THROW(ErrorCode::kInvalidArgument, "parameter server "
                                                << index_ << ": save from worker " << w
                                                << " before worker 0 seeded the shard");
  }
  ShardState s;
  s.shard = static_cast<uint32_t>(index_);
  s.shards = static_cast<uint32_t>(roles_.servers.size());
  s.mode = config_->mode;
  s.hasRule = rule_ != nullptr;
  if (rule_) {
    s.kind = rule_->config().kind;
    s.rule = rule_->state();
  }
  s.version = stats_.version;
  s.updates = stats_.updates;
  s.values = values();
  const Digest d = writeShardFile(std::string(payload.begin(), payload.end()), s);
  Header r;
  r.type = MessageType::kSaveReply;
  r.version = stats_.version;
  reply(w, r, d.data(), d.size());
}

// Loading is two-phase, so a checkpoint that fails on one shard changes
// none: without flags, the server reads and checks its whole file and
// keeps it staged; with kFlagLoadCommit it applies the staged state (the
// same file); with kFlagLoadAbort it drops it. A sync round in progress is
// dropped on commit: the workers load together, between steps.
void Server::onLoad(int w, const Header& h, const std::vector<uint8_t>& payload) {
  if (payload.size() <= kDigestBytes) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter server " << index_
                                                         << ": load from worker " << w
                                                         << " names no file");
  }
  Digest digest;
  std::memcpy(digest.data(), payload.data(), kDigestBytes);
  const std::string file(payload.begin() + kDigestBytes, payload.end());
  Header r;
  r.type = MessageType::kLoadReply;
  if (h.flags & kFlagLoadAbort) {
    staged_.reset();
  } else if (h.flags & kFlagLoadCommit) {
    commitLoad(w, file, digest);
  } else {
    staged_.reset();
    ShardState s =
        readShardFile(file, &digest, static_cast<uint32_t>(index_),
                      static_cast<uint32_t>(roles_.servers.size()), values().size());
    const bool sameRule =
        s.hasRule == (rule_ != nullptr) && (!rule_ || s.kind == rule_->config().kind);
    if (s.mode != config_->mode || !sameRule) {
      KOLO_THROW(
          ErrorCode::kMismatch,
          "checkpoint shard file '"
              << file << "' was saved in mode " << modeName(s.mode) << " with "
              << (s.hasRule ? optimizerKindName(s.kind) : "no optimizer")
              << "; this job runs " << modeName(config_->mode) << " with "
              << (rule_ ? optimizerKindName(rule_->config().kind) : "no optimizer"));
    }
    if (rule_) UpdateRule(rule_->config(), values().size()).restore(s.rule);  // sizes
    staged_ = Staged{file, digest, std::move(s)};
  }
  r.version = stats_.version;
  reply(w, r, nullptr, 0);
  servePulls();
}

void Server::commitLoad(int w, const std::string& file, const Digest& digest) {
  if (!staged_ || staged_->file != file || staged_->digest != digest) {
    KOLO_THROW(ErrorCode::kMismatch, "parameter server "
                                         << index_ << ": commit of '" << file
                                         << "' from worker " << w
                                         << " without that file checked first");
  }
  ShardState s = std::move(staged_->state);
  staged_.reset();
  if (rule_) rule_->restore(std::move(s.rule));
  values_ = std::make_shared<std::vector<float>>(std::move(s.values));
  stats_.version = s.version;
  stats_.updates = s.updates;
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  std::fill(pushedThisRound_.begin(), pushedThisRound_.end(), false);
  roundCount_ = 0;
  seeded_ = true;
  KOLO_LOG(kInfo) << "parameter server " << index_ << ": loaded '" << file
                  << "' at version " << stats_.version;
}

bool Server::trainingOver() const {
  if (!config_ || config_->validators == 0) return false;
  for (int w = 0; w < workers_ - config_->validators; ++w) {
    if (!done_[w]) return false;
  }
  return true;
}

int Server::firstWorker() const {
  const int servers = static_cast<int>(roles_.servers.size());
  return servers > 0 ? index_ * workers_ / servers : 0;
}

// The ready pulls are answered all at once (the ReplyQueue sends them
// together), in turns starting at firstWorker(): when the links cannot take
// every reply at once, the servers' first bytes go to different workers.
void Server::servePulls() {
  if (!seeded_) return;
  auto ready = [&](const PendingPull& p) { return p.minVersion <= stats_.version; };
  const int start = firstWorker();
  auto turn = [&](const PendingPull& p) {
    return (p.worker - start + workers_) % workers_;
  };
  std::stable_sort(
      pending_.begin(), pending_.end(),
      [&](const PendingPull& a, const PendingPull& b) { return turn(a) < turn(b); });
  std::vector<PendingPull> later;
  for (const PendingPull& p : pending_) {
    if (done_[p.worker]) continue;  // refused meanwhile
    if (!ready(p)) {
      later.push_back(p);
      continue;
    }
    Header r;
    r.type = MessageType::kPullReply;
    r.version = stats_.version;
    replyWith(p.worker, r, values_, values_->data(), values_->size() * sizeof(float));
  }
  pending_.swap(later);
}

float* Server::writableValues() {
  // Replies on their way hold the values they send: an update writes to a
  // copy (copy on write), so the worker receives the version it was told.
  replies_.releaseSent();
  if (values_.use_count() > 1) values_ = std::make_shared<std::vector<float>>(*values_);
  return values_->data();
}

void Server::reply(int w, Header h, const void* data, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(data);
  auto copy = std::make_shared<std::vector<uint8_t>>(b, b + bytes);
  replyWith(w, h, copy, copy->data(), bytes);
}

void Server::replyWith(int w, Header h, std::shared_ptr<const void> owner,
                       const void* data, size_t bytes) {
  if (stopAt_ && stats_.version >= *stopAt_) h.flags |= kFlagStop;
  if (trainingOver()) h.flags |= kFlagTrainingOver;
  h.worker = static_cast<uint32_t>(w);
  h.shard = static_cast<uint32_t>(index_);
  h.payloadBytes = bytes;
  const int to = roles_.workers[w];
  try {
    replies_.post(w, to, encodeHeader(h), isShardPayload(h.type), segments_,
                  std::move(owner), data, bytes);
  } catch (const Error& e) {
    // A worker that died before its answer: dropped (loseWorker), not a
    // failure of this server.
    if (e.code() != ErrorCode::kPeerLost || !t_.peerLost(to)) throw;
    loseWorker(w, e.what());
  }
}

void Server::refuse(int w, const std::string& why) {
  KOLO_LOG(kWarning) << "parameter server " << index_ << " refuses worker " << w
                     << " (rank " << roles_.workers[w] << "): " << why;
  std::string text = why.substr(0, limits().maxErrorBytes);
  Header r;
  r.type = MessageType::kError;
  if (!done_[w]) --open_;
  done_[w] = true;
  reply(w, r, text.data(), text.size());
  // Without worker 0 the shard is never seeded: nobody can be served.
  if (w == 0 && !seeded_ && cannotServe_.empty()) {
    cannotServe_ = "parameter server " + std::to_string(index_) +
                   " cannot serve: worker 0, which seeds it, was refused: " + why;
    std::vector<PendingPull> pending;
    pending.swap(pending_);
    for (const PendingPull& p : pending) {
      if (!done_[p.worker]) refuse(p.worker, cannotServe_);
    }
  }
}

}  // namespace kolo::ps
