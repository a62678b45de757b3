// The server loop. One header receive is posted per worker (a receive from
// any source cannot span the shm and tcp parts of the job's transport); the
// loop handles whichever completes, reads its payload, answers, and posts
// the next. Pulls that ask for a version the shard has not reached wait in
// pending_ and are answered when it gets there.
#include "ps/server.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "common/check.h"
#include "common/logging.h"
#include "ps/checkpoint.h"

namespace kolo::ps {

std::vector<uint8_t> ServerStats::encode() const {
  std::vector<uint64_t> v{version, updates, rejected, maxStaleness};
  v.insert(v.end(), pushes.begin(), pushes.end());
  v.insert(v.end(), pulls.begin(), pulls.end());
  std::vector<uint8_t> b(v.size() * 8);
  for (size_t i = 0; i < v.size(); ++i) {
    for (int k = 0; k < 8; ++k) b[8 * i + k] = static_cast<uint8_t>(v[i] >> (8 * k));
  }
  return b;
}

ServerStats ServerStats::decode(const uint8_t* b, size_t size, uint32_t workers) {
  KOLO_CHECK_EQ(size, statsBytes(workers));
  std::vector<uint64_t> v(size / 8, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    for (int k = 0; k < 8; ++k) v[i] |= static_cast<uint64_t>(b[8 * i + k]) << (8 * k);
  }
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
      workers_(static_cast<int>(roles_.workers.size())) {
  KOLO_CHECK_EQ(roles_.servers.at(index_), t_.rank());
  headers_.resize(workers_);
  requests_.resize(workers_);
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
  std::vector<uint8_t> payload;
  // A worker's payload is read whole before the next worker's. Each pass
  // starts at firstWorker(), so that the servers read from different
  // workers at once rather than all from worker 0, whose link would then
  // carry every server's share while the others' idle.
  const int first = firstWorker();
  while (open_ > 0) {
    bool moved = false;
    for (int k = 0; k < workers_; ++k) {
      const int w = (first + k) % workers_;
      if (done_[w] || !requests_[w]->done()) continue;
      moved = true;
      try {
        if (requests_[w]->error) std::rethrow_exception(requests_[w]->error);
        serveOne(w, payload);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kPeerLost || !noticeLostWorkers(e.what())) throw;
      }
    }
    if (!moved && !t_.progress()) t_.idle(std::chrono::microseconds(1000));
  }
  KOLO_LOG(kInfo) << "parameter server " << index_ << ": every worker finished after "
                  << stats_.version << " updates";
}

// Worker w's header has arrived: check it, read its payload, handle it.
// A transport error propagates (run() tells a lost worker from the rest);
// any other error refuses the worker.
void Server::serveOne(int w, std::vector<uint8_t>& payload) {
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
    return;
  }
  payload.resize(h.payloadBytes);
  if (isShardPayload(h.type)) {
    // The decoder has checked the size against the shard's: segments_
    // exist and cover it.
    std::vector<transport::RequestPtr> parts;
    for (const Segment& g : segments_) {
      parts.push_back(t_.irecv(from, kPayloadTag,
                               payload.data() + g.shardOffset * sizeof(float),
                               g.count * sizeof(float)));
    }
    t_.waitAll(parts);
  } else if (h.payloadBytes > 0) {
    t_.recv(from, kPayloadTag, payload.data(), payload.size());
  }
  if (h.type == MessageType::kBye) {
    done_[w] = true;
    --open_;
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
// pushes, which the others still give). Plain sync, or more losses than
// backup workers, or worker 0 before it seeded: every other worker gets a
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
      std::memcpy(values_.data(), floats, payload.size());
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
  values_.assign(n, 0.0f);
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
    if (++roundCount_ >= trainers(c, workers_) - c.backupWorkers) applySyncRound();
    return;
  }
  rule_->apply(values_.data(), grad, h.lr);
  ++stats_.version;
  ++stats_.updates;
  stats_.maxStaleness = std::max(stats_.maxStaleness, staleness);
  r.version = stats_.version;
  reply(w, r, nullptr, 0);
  servePulls();
}

// The round's gradient is the mean of its pushes, as an averaging
// allreduce gives it; the optimizer then steps once.
void Server::applySyncRound() {
  const float inv = 1.0f / static_cast<float>(roundCount_);
  for (size_t i = 0; i < sum_.size(); ++i) {
    scratch_[i] = sum_[i] * inv;
    sum_[i] = 0.0f;
  }
  rule_->apply(values_.data(), scratch_.data(), roundLr_);
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
  easgdExchange(values_.data(), x, scratch_.data(), values_.size(), config_->easgdAlpha);
  ++stats_.version;
  ++stats_.updates;
  Header r;
  r.type = MessageType::kExchangeReply;
  r.version = stats_.version;
  reply(w, r, scratch_.data(), scratch_.size() * sizeof(float));
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
  s.values = values_;
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
                      static_cast<uint32_t>(roles_.servers.size()), values_.size());
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
    if (rule_) UpdateRule(rule_->config(), values_.size()).restore(s.rule);  // sizes
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
  values_ = std::move(s.values);
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

// The ready pulls are answered one worker at a time, starting at
// firstWorker() and going round: the servers start at different workers, so
// at any moment each worker receives from about one server and every
// server's link is busy. In the same order everywhere (worker 0 first), all
// S servers would send to one worker at once, whose link would carry S
// times its share while the servers' links idle.
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
    reply(p.worker, r, values_.data(), values_.size() * sizeof(float));
  }
  pending_.swap(later);
}

void Server::reply(int w, Header h, const void* data, size_t bytes) {
  if (stopAt_ && stats_.version >= *stopAt_) h.flags |= kFlagStop;
  if (trainingOver()) h.flags |= kFlagTrainingOver;
  h.worker = static_cast<uint32_t>(w);
  h.shard = static_cast<uint32_t>(index_);
  h.payloadBytes = bytes;
  const HeaderBytes b = encodeHeader(h);
  const int to = roles_.workers[w];
  try {
    send(to, h, b, data, bytes);
  } catch (const Error& e) {
    // A worker that died before its answer: dropped (loseWorker), not a
    // failure of this server.
    if (e.code() != ErrorCode::kPeerLost || !t_.peerLost(to)) throw;
    loseWorker(w, e.what());
  }
}

void Server::send(int to, const Header& h, const HeaderBytes& b, const void* data,
                  size_t bytes) {
  t_.send(to, kHeaderTag, b.data(), b.size());
  if (isShardPayload(h.type)) {
    std::vector<transport::RequestPtr> parts;
    const auto* floats = static_cast<const float*>(data);
    for (const Segment& g : segments_) {
      parts.push_back(
          t_.isend(to, kPayloadTag, floats + g.shardOffset, g.count * sizeof(float)));
    }
    t_.waitAll(parts);
  } else if (bytes > 0) {
    t_.send(to, kPayloadTag, data, bytes);
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
