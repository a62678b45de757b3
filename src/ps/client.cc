// The worker's side. A shard's payload travels as segments (segments.h):
// large tensors straight from and into their memory, small ones packed.
// Every exchange posts, for each server, the reply's
// header receive first, then the sends; waits on all; then posts the
// replies' payload receives (their sizes are known from the headers, which
// the decoder has checked) and waits on those. So the shards are served in
// parallel, and a server's kError text of any length is read whole.
#include "ps/client.h"

#include <algorithm>
#include <cstring>

#include "common/backoff.h"
#include "common/check.h"
#include "common/sha256.h"
#include "ps/transfer.h"

namespace kolo::ps {

Client::Client(transport::Transport& t, Roles roles, int workerIndex, PsConfig config,
               ClientOptions options)
    : t_(t),
      roles_(std::move(roles)),
      worker_(workerIndex),
      config_(std::move(config)),
      options_(options) {
  const int workers = static_cast<int>(roles_.workers.size());
  validate(config_, workers);
  auto positive = [](const char* what, int v) {
    if (v < 1) {
      KOLO_THROW(ErrorCode::kInvalidArgument,
                 what << "=" << v << " (expected a value >= 1)");
    }
  };
  positive("push_period", options_.pushPeriod);
  positive("pull_period", options_.pullPeriod);
  positive("easgd_period", options_.easgdPeriod);
  KOLO_CHECK_EQ(roles_.workers.at(worker_), t_.rank());
  const int servers = static_cast<int>(roles_.servers.size());
  map_ = ShardMap::build(config_.tensorElements, servers);
  for (int sh = 0; sh < servers; ++sh) {
    const uint64_t n = map_.shardElements[sh];
    shardBytes_.push_back(n * sizeof(float));
    buffers_.emplace_back(n);
    segments_.push_back(segmentsOf(map_.shards[sh]));
  }
  limits_.workers = static_cast<uint32_t>(workers);
  limits_.shards = static_cast<uint32_t>(servers);
  limits_.shardBytes = shardBytes_.data();
  versions_.assign(servers, 0);
}

void Client::lost(const Error& e) const {
  std::string ranks;
  for (int r : roles_.servers) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  KOLO_THROW(e.code(), "worker " << worker_ << " and the parameter servers (ranks "
                                 << ranks << "): " << e.what());
}

void Client::sendAll(MessageType type, const std::vector<const uint8_t*>& payloads,
                     const std::vector<uint64_t>& bytes,
                     const std::vector<uint64_t>& versions, float lr,
                     std::vector<transport::RequestPtr>& requests,
                     std::vector<HeaderBytes>& headers, uint16_t flags,
                     bool headersOnly) {
  const int servers = static_cast<int>(roles_.servers.size());
  headers.resize(servers);
  for (int s = 0; s < servers; ++s) {
    Header h;
    h.type = type;
    h.flags = flags;
    h.worker = static_cast<uint32_t>(worker_);
    h.shard = static_cast<uint32_t>(s);
    h.version = versions.empty() ? 0 : versions[s];
    h.payloadBytes = payloads.empty() || payloads[s] == nullptr ? 0 : bytes[s];
    h.lr = lr;
    headers[s] = encodeHeader(h);
    const int to = roles_.servers[s];
    requests.push_back(t_.isend(to, kHeaderTag, headers[s].data(), headers[s].size()));
    if (h.payloadBytes > 0 && !headersOnly) {
      requests.push_back(t_.isend(to, kPayloadTag, payloads[s], h.payloadBytes));
    }
  }
}

std::vector<Client::Reply> Client::roundTrip(MessageType type,
                                             const std::vector<const float*>& tensors,
                                             float lr,
                                             const std::vector<uint64_t>& versions,
                                             MessageType expect,
                                             const std::vector<float*>* into) {
  return roundTripBytes(type, {}, {}, lr, versions, expect, 0,
                        tensors.empty() ? nullptr : &tensors, into);
}

// A shard's payload as its segments (segments.h): direct ones straight
// from the tensors, packed ones gathered into the shard's buffer first.
void Client::postShardSends(int s, const std::vector<const float*>& tensors,
                            std::vector<transport::RequestPtr>& requests) {
  const int to = roles_.servers[s];
  const auto& pieces = map_.shards[s];
  for (const Segment& g : segments_[s]) {
    const float* from;
    if (g.direct) {
      const Piece& p = pieces[g.firstPiece];
      from = tensors[p.tensor] + p.offset;
    } else {
      for (size_t k = g.firstPiece; k < g.firstPiece + g.pieces; ++k) {
        const Piece& p = pieces[k];
        std::memcpy(buffers_[s].data() + p.shardOffset, tensors[p.tensor] + p.offset,
                    p.count * sizeof(float));
      }
      from = buffers_[s].data() + g.shardOffset;
    }
    requests.push_back(t_.isend(to, kPayloadTag, from, g.count * sizeof(float)));
  }
}

// Receives a shard's payload: with `into`, direct segments land in the
// tensors and packed ones in the buffer (scatterPacked moves them);
// without, all of it lands in the buffer.
void Client::postShardRecvs(int s, const std::vector<float*>* into,
                            std::vector<transport::RequestPtr>& requests) {
  const int from = roles_.servers[s];
  for (const Segment& g : segments_[s]) {
    float* to = buffers_[s].data() + g.shardOffset;
    if (into != nullptr && g.direct) {
      const Piece& p = map_.shards[s][g.firstPiece];
      to = (*into)[p.tensor] + p.offset;
    }
    requests.push_back(t_.irecv(from, kPayloadTag, to, g.count * sizeof(float)));
  }
}

void Client::scatterPacked(int s, const std::vector<float*>& into) const {
  const auto& pieces = map_.shards[s];
  for (const Segment& g : segments_[s]) {
    if (g.direct) continue;
    for (size_t k = g.firstPiece; k < g.firstPiece + g.pieces; ++k) {
      const Piece& p = pieces[k];
      std::memcpy(into[p.tensor] + p.offset, buffers_[s].data() + p.shardOffset,
                  p.count * sizeof(float));
    }
  }
}

std::vector<Client::Reply> Client::roundTripBytes(
    MessageType type, const std::vector<const uint8_t*>& bytes,
    const std::vector<uint64_t>& sizes, float lr, const std::vector<uint64_t>& versions,
    MessageType expect, uint16_t flags, const std::vector<const float*>* tensors,
    const std::vector<float*>* into) {
  if (saidBye_) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "worker " << worker_ << ": " << messageTypeName(type)
                         << " after this worker said goodbye to the parameter servers "
                            "(kolo_ps_finish, ps.finish)");
  }
  const int servers = static_cast<int>(roles_.servers.size());
  std::vector<Reply> replies(servers);
  try {
    std::vector<HeaderBytes> in(servers);
    std::vector<transport::RequestPtr> requests;
    for (int s = 0; s < servers; ++s) {
      requests.push_back(
          t_.irecv(roles_.servers[s], kHeaderTag, in[s].data(), in[s].size()));
    }
    std::vector<HeaderBytes> out;
    if (tensors != nullptr) {
      std::vector<const uint8_t*> marks(servers, nullptr);
      for (int s = 0; s < servers; ++s) {
        if (shardBytes_[s] > 0) marks[s] = reinterpret_cast<const uint8_t*>(this);
      }
      sendAll(type, marks, shardBytes_, versions, lr, requests, out, flags,
              /*headersOnly=*/true);
      for (int s = 0; s < servers; ++s) postShardSends(s, *tensors, requests);
    } else {
      sendAll(type, bytes, sizes, versions, lr, requests, out, flags);
    }
    // Each server's payload receives are posted as soon as its header is
    // in: the servers answer at once, and a payload that finds no receive
    // posted waits in the transport's buffers, a copy more.
    std::vector<transport::RequestPtr> headers(requests.begin(),
                                               requests.begin() + servers);
    std::vector<transport::RequestPtr> rest(requests.begin() + servers, requests.end());
    awaitEach(headers, [&](int s) {
      Header& h = replies[s].header;
      h = decodeHeader(in[s].data(), in[s].size(), limits_, roles_.servers[s]);
      if (h.flags & kFlagStop) stopRequested_ = true;
      if (h.flags & kFlagTrainingOver) trainingOver_ = true;
      if (isShardPayload(h.type)) {
        postShardRecvs(s, h.type == MessageType::kPullReply ? into : nullptr, rest);
        return;
      }
      replies[s].payload.resize(h.payloadBytes);
      if (!replies[s].payload.empty()) {
        rest.push_back(t_.irecv(roles_.servers[s], kPayloadTag, replies[s].payload.data(),
                                replies[s].payload.size()));
      }
    });
    t_.waitAll(rest);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout) lost(e);
    throw;
  }
  for (int s = 0; s < servers; ++s) {
    const Header& h = replies[s].header;
    if (h.type == MessageType::kError) {
      std::string text(replies[s].payload.begin(), replies[s].payload.end());
      const ErrorCode code = (h.flags & kFlagErrorPeerLost) ? ErrorCode::kPeerLost
                                                            : ErrorCode::kInvalidArgument;
      KOLO_THROW(code, "parameter server " << s << " (rank " << roles_.servers[s]
                                           << ") refused worker " << worker_ << ": "
                                           << text);
    }
    if (h.type != expect) {
      KOLO_THROW(ErrorCode::kMismatch, "parameter server "
                                           << s << " (rank " << roles_.servers[s]
                                           << ") answered " << messageTypeName(type)
                                           << " with " << messageTypeName(h.type)
                                           << ", expected " << messageTypeName(expect));
    }
    if (h.type == MessageType::kPullReply && into != nullptr) scatterPacked(s, *into);
  }
  return replies;
}

// Waits for every server's request, calling onDone(s) for each as it
// completes, in any order. Transport::wait's timeout applies to each
// (Transfer::failIfStalled).
void Client::awaitEach(const std::vector<transport::RequestPtr>& requests,
                       const std::function<void(int)>& onDone) {
  std::vector<Transfer> waiting(requests.size());
  for (size_t s = 0; s < requests.size(); ++s) {
    waiting[s].index = static_cast<int>(s);
    waiting[s].rank = roles_.servers[s];
    waiting[s].bytes = kHeaderBytes;
    waiting[s].requests = {requests[s]};
    waiting[s].started = Transfer::Clock::now();
  }
  Backoff backoff;
  auto lastProgress = Transfer::Clock::now();
  while (!waiting.empty()) {
    bool moved = false;
    for (size_t k = 0; k < waiting.size();) {
      if (!waiting[k].done()) {
        ++k;
        continue;
      }
      const Transfer x = std::move(waiting[k]);
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(k));
      moved = true;
      if (const std::exception_ptr e = x.error()) std::rethrow_exception(e);
      onDone(x.index);
    }
    if (moved || t_.progress()) {
      backoff.reset();
      lastProgress = Transfer::Clock::now();
      continue;
    }
    for (const Transfer& x : waiting) x.failIfStalled(t_, lastProgress);
    if (backoff.idle()) t_.idle(backoff.sleepHint());
  }
}

void Client::start(const std::vector<float*>& params) {
  KOLO_CHECK_EQ(params.size(), config_.tensorElements.size());
  const int servers = static_cast<int>(roles_.servers.size());
  const std::vector<uint8_t> config = encodeConfig(config_);
  std::vector<transport::RequestPtr> requests;
  std::vector<HeaderBytes> headers;
  std::vector<HeaderBytes> seedHeaders;
  try {
    sendAll(MessageType::kConfig, std::vector<const uint8_t*>(servers, config.data()),
            std::vector<uint64_t>(servers, config.size()), {}, 0.0f, requests, headers);
    if (worker_ == 0) {
      const std::vector<const float*> in(params.begin(), params.end());
      std::vector<const uint8_t*> marks(servers, nullptr);
      for (int s = 0; s < servers; ++s) {
        if (shardBytes_[s] > 0) marks[s] = reinterpret_cast<const uint8_t*>(this);
      }
      sendAll(MessageType::kSeed, marks, shardBytes_, {}, 0.0f, requests, seedHeaders, 0,
              /*headersOnly=*/true);
      for (int s = 0; s < servers; ++s) postShardSends(s, in, requests);
    }
    t_.waitAll(requests);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout) lost(e);
    throw;
  }
  pull(params);
}

void Client::pullAtLeast(const std::vector<float*>& params,
                         const std::vector<uint64_t>& minVersion) {
  auto replies = roundTrip(MessageType::kPull, {}, 0.0f, minVersion,
                           MessageType::kPullReply, &params);
  for (size_t s = 0; s < replies.size(); ++s) versions_[s] = replies[s].header.version;
  mustPull_ = false;
}

void Client::pull(const std::vector<float*>& params) {
  pullAtLeast(params, std::vector<uint64_t>(versions_.size(), 0));
}

int Client::push(const std::vector<const float*>& grads, float lr) {
  auto replies =
      roundTrip(MessageType::kPush, grads, lr, versions_, MessageType::kPushReply);
  int refused = 0;
  staleness_ = 0;
  for (size_t s = 0; s < replies.size(); ++s) {
    const Header& h = replies[s].header;
    if (h.flags & kFlagRejectedStale) {
      ++refused;
      continue;
    }
    if (config_.mode == Mode::kDownpour) {
      // Applied as version h.version, on parameters of version versions_[s].
      staleness_ = std::max(staleness_, h.version - 1 - versions_[s]);
    }
  }
  return refused;
}

void Client::exchange(const std::vector<float*>& params) {
  if (config_.mode != Mode::kEasgd) {
    KOLO_THROW(ErrorCode::kInvalidArgument,
               "worker " << worker_ << ": an elastic exchange in "
                         << modeName(config_.mode) << " mode (only easgd exchanges)");
  }
  const std::vector<const float*> in(params.begin(), params.end());
  auto replies =
      roundTrip(MessageType::kExchange, in, 0.0f, versions_, MessageType::kExchangeReply);
  // x -= diff (in the shard's buffer), piece by piece in place.
  for (size_t s = 0; s < replies.size(); ++s) {
    const float* diff = buffers_[s].data();
    for (const Piece& p : map_.shards[s]) {
      float* x = params[p.tensor] + p.offset;
      for (uint64_t i = 0; i < p.count; ++i) x[i] -= diff[p.shardOffset + i];
    }
    versions_[s] = replies[s].header.version;
  }
}

void Client::step(const std::vector<float*>& params,
                  const std::vector<const float*>& grads, float lr) {
  ++steps_;
  switch (config_.mode) {
    case Mode::kSync: {
      push(grads, lr);
      std::vector<uint64_t> next = versions_;
      for (uint64_t& v : next) ++v;
      pullAtLeast(params, next);
      return;
    }
    case Mode::kDownpour: {
      if (options_.pushPeriod > 1) {
        if (accumulated_.empty()) {
          for (uint64_t n : config_.tensorElements) accumulated_.emplace_back(n, 0.0f);
        }
        for (size_t t = 0; t < grads.size(); ++t) {
          for (size_t i = 0; i < accumulated_[t].size(); ++i)
            accumulated_[t][i] += grads[t][i];
        }
      }
      if (steps_ % options_.pushPeriod == 0) {
        std::vector<const float*> g = grads;
        if (options_.pushPeriod > 1) {
          for (size_t t = 0; t < g.size(); ++t) g[t] = accumulated_[t].data();
        }
        if (push(g, lr) > 0) mustPull_ = true;
        for (auto& a : accumulated_) std::fill(a.begin(), a.end(), 0.0f);
      }
      if (mustPull_ || steps_ % options_.pullPeriod == 0) pull(params);
      return;
    }
    case Mode::kEasgd:
      if (steps_ % options_.easgdPeriod == 0) exchange(params);
      return;
  }
}

std::vector<ServerStats> Client::stats() {
  auto replies = roundTrip(MessageType::kStats, {}, 0.0f, {}, MessageType::kStatsReply);
  std::vector<ServerStats> out;
  for (auto& r : replies) {
    out.push_back(
        ServerStats::decode(r.payload.data(), r.payload.size(), limits_.workers));
  }
  return out;
}

Manifest Client::save(const std::string& dir) {
  makeCheckpointDirectory(dir);
  const int servers = static_cast<int>(roles_.servers.size());
  const std::string id = toHex(randomBytes(8).data(), 8);
  Manifest m;
  m.mode = config_.mode;
  m.optimizer =
      config_.mode == Mode::kEasgd ? "none" : optimizerKindName(config_.optimizer.kind);
  m.tensorElements = config_.tensorElements;
  std::vector<std::string> paths;
  std::vector<const uint8_t*> bytes;
  std::vector<uint64_t> sizes;
  for (int s = 0; s < servers; ++s) {
    ManifestShard sh;
    sh.file = shardFileName(s, servers, id);
    sh.elements = map_.shardElements[s];
    sh.pieces = map_.shards[s];
    m.shards.push_back(std::move(sh));
    paths.push_back(dir + "/" + m.shards[s].file);
  }
  for (const std::string& p : paths) {
    bytes.push_back(reinterpret_cast<const uint8_t*>(p.data()));
    sizes.push_back(p.size());
  }
  auto replies =
      roundTripBytes(MessageType::kSave, bytes, sizes, 0.0f, {}, MessageType::kSaveReply);
  for (int s = 0; s < servers; ++s) {
    m.shards[s].version = replies[s].header.version;
    std::memcpy(m.shards[s].digest.data(), replies[s].payload.data(), kDigestBytes);
  }
  writeManifest(dir, m);  // the commit point
  removeStaleShardFiles(dir, m);
  return m;
}

void Client::load(const std::string& dir, const std::vector<float*>& params) {
  const Manifest m = readManifest(dir);
  const int servers = static_cast<int>(roles_.servers.size());
  checkManifest(m, dir, config_, servers);
  std::vector<std::string> payloads;
  std::vector<const uint8_t*> bytes;
  std::vector<uint64_t> sizes;
  for (int s = 0; s < servers; ++s) {
    std::string p(reinterpret_cast<const char*>(m.shards[s].digest.data()), kDigestBytes);
    p += dir + "/" + m.shards[s].file;
    payloads.push_back(std::move(p));
  }
  for (const std::string& p : payloads) {
    bytes.push_back(reinterpret_cast<const uint8_t*>(p.data()));
    sizes.push_back(p.size());
  }
  // Two phases (server.cc, onLoad): every server checks and stages its
  // file; only when all have, they apply it.
  try {
    roundTripBytes(MessageType::kLoad, bytes, sizes, 0.0f, {}, MessageType::kLoadReply);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout) throw;
    roundTripBytes(MessageType::kLoad, bytes, sizes, 0.0f, {}, MessageType::kLoadReply,
                   kFlagLoadAbort);
    throw;
  }
  roundTripBytes(MessageType::kLoad, bytes, sizes, 0.0f, {}, MessageType::kLoadReply,
                 kFlagLoadCommit);
  pull(params);
}

void Client::requestStop() {
  roundTripBytes(MessageType::kStop, {}, {}, 0.0f, {}, MessageType::kStopReply);
}

uint64_t Client::version() const {
  return *std::min_element(versions_.begin(), versions_.end());
}

void Client::bye() {
  if (saidBye_) return;
  saidBye_ = true;
  std::vector<transport::RequestPtr> requests;
  std::vector<HeaderBytes> headers;
  try {
    sendAll(MessageType::kBye, {}, {}, {}, 0.0f, requests, headers);
    t_.waitAll(requests);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kPeerLost || e.code() == ErrorCode::kTimeout) lost(e);
    throw;
  }
}

}  // namespace kolo::ps
