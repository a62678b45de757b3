// One parameter server: owns one shard (its index among the servers) and
// serves the workers' pushes, pulls and elastic exchanges
// (docs/parameter_server.md, "Modes").
//
// Contract
// - run() blocks until every worker has sent kBye, then returns. It takes
//   the configuration from the first kConfig, seeds the shard from worker 0's
//   kSeed, and answers a pull only once the shard is seeded and at the
//   version the pull asks for (sync: the next one).
// - A malformed or out-of-order message from a worker (bad header, a config
//   that differs from the first one, a push before the config) is answered
//   with kError naming what is wrong; that worker is then no longer served.
// - kSave / kLoad write or read this shard's checkpoint file (checkpoint.h);
//   a file that cannot be written, read or does not fit is answered with
//   kError naming it, and the worker stays served.
// - A worker that dies (its link fails): with a transport that isolates
//   peer failures (shm, tcp; run() switches it on), the server logs it once
//   and, in downpour, easgd, and sync with at most backup_workers lost,
//   goes on without it; in plain sync it answers every other worker with
//   kError flagged kFlagErrorPeerLost naming the dead worker, and ends.
//   Any other transport failure (a timeout, or a loss the transport cannot
//   isolate) throws Error naming the rank; the server stops.
// - Replies are sent without waiting (ReplyQueue), so a slow worker does
//   not hold back the others; a worker that does not take its reply within
//   the transport's timeout is an Error(kTimeout) naming it, as a
//   blocking send's would be. The shard's values are copied on write while
//   a pull reply still holds them, so a reply carries the version its
//   header names.
// - Memory: the shard's values, its optimizer state, and up to
//   kReceiveBudgetBytes of payload buffers (at least one shard's, at most
//   one per worker).
// - Not thread-safe: one thread runs it, and nothing else uses the
//   transport meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ps/checkpoint.h"
#include "ps/reply_queue.h"
#include "ps/roles.h"
#include "ps/segments.h"
#include "ps/shard_map.h"
#include "ps/update_rule.h"
#include "ps/wire.h"
#include "transport/transport.h"

namespace kolo::ps {

// What the payload buffers of one server may take in all (run()).
inline constexpr uint64_t kReceiveBudgetBytes = uint64_t{1} << 30;

// One server's counters, as kStatsReply carries them.
struct ServerStats {
  uint64_t version = 0;   // updates applied to the shard (sync rounds, pushes, exchanges)
  uint64_t updates = 0;   // the same, kept apart from version for later checkpoints
  uint64_t rejected = 0;  // downpour pushes refused as too stale, late sync pushes
  uint64_t maxStaleness = 0;     // the largest staleness among applied pushes
  std::vector<uint64_t> pushes;  // per worker (pushes and exchanges)
  std::vector<uint64_t> pulls;   // per worker

  std::vector<uint8_t> encode() const;
  static ServerStats decode(const uint8_t* bytes, size_t size, uint32_t workers);
};

class Server {
 public:
  // `t` is the job's transport; this rank is roles.servers[serverIndex].
  Server(transport::Transport& t, Roles roles, int serverIndex);

  void run();

  const ServerStats& stats() const { return stats_; }

 private:
  struct PendingPull {
    int worker;
    uint64_t minVersion;
  };
  // A worker's message being received: its header, once decoded, and its
  // payload's buffer (pooled for shard payloads: isShardPayload) and receives.
  struct Inbound {
    bool receiving = false;
    Header header;
    std::vector<uint8_t> payload;
    Transfer transfer;
  };

  WireLimits limits() const;
  // Where this server's rounds over the workers start: index_ * W / S.
  int firstWorker() const;
  void postHeader(int w);
  void handle(int w, const Header& h, std::vector<uint8_t>& payload);
  void onConfig(int w, const std::vector<uint8_t>& payload);
  void checkSame(int w, const PsConfig& c) const;
  void onPush(int w, const Header& h, const float* grad);
  void onExchange(int w, const float* x);
  void onStop(int w);
  void onCheckpoint(int w, const Header& h, const std::vector<uint8_t>& payload);
  void onSave(int w, const std::vector<uint8_t>& payload);
  void onLoad(int w, const Header& h, const std::vector<uint8_t>& payload);
  void commitLoad(int w, const std::string& file, const Digest& digest);
  void applySyncRound();
  void applySyncRoundIfComplete();
  void servePulls();
  // Validators exist and every trainer has finished (kFlagTrainingOver).
  bool trainingOver() const;
  // reply() copies the payload; replyWith() sends from `data`, which
  // `owner` keeps alive and nobody changes until it is sent.
  void reply(int w, Header h, const void* data, size_t bytes);
  void replyWith(int w, Header h, std::shared_ptr<const void> owner, const void* data,
                 size_t bytes);
  void replyFailed(int w, std::exception_ptr error);
  void serveAll();
  void stopTransfers(const Error& cause);
  bool step(int w);
  bool startMessage(int w);
  void finishMessage(int w);
  bool takeBuffer(std::vector<uint8_t>* out);
  void giveBuffer(std::vector<uint8_t>&& b);
  void dropInbound(int w);
  const std::vector<float>& values() const { return *values_; }
  float* writableValues();
  bool noticeLostWorkers(const std::string& why);
  void loseWorker(int w, const std::string& why);
  void refuse(int w, const std::string& why);

  transport::Transport& t_;
  Roles roles_;
  int index_;
  int workers_;
  std::optional<PsConfig> config_;               // worker 0's
  std::vector<std::pair<int, PsConfig>> early_;  // others' that came before it
  std::string cannotServe_;  // set when worker 0 was refused before seeding
  int open_ = 0;             // workers neither finished nor refused
  int lost_ = 0;             // workers whose links failed
  std::vector<uint64_t> shardBytes_;
  std::vector<Segment> segments_;                    // how this shard's payloads travel
  std::shared_ptr<std::vector<float>> values_;       // shared with pull replies
  std::shared_ptr<std::vector<float>> exchangeOut_;  // the last exchange's reply
  std::unique_ptr<UpdateRule> rule_;
  bool seeded_ = false;
  std::vector<PendingPull> pending_;
  // A checkpoint read and checked, waiting for its commit (onLoad).
  struct Staged {
    std::string file;
    Digest digest;
    ShardState state;
  };
  std::optional<Staged> staged_;
  // Set by the first kStop: replies carry kFlagStop from this version on.
  std::optional<uint64_t> stopAt_;
  // sync: the sum of this round's gradients and who has pushed.
  std::vector<float> sum_;
  std::vector<bool> pushedThisRound_;
  int roundCount_ = 0;
  float roundLr_ = 0.0f;
  std::vector<float> scratch_;
  // Per worker: its header buffer and posted receive; done after kBye or
  // a refusal.
  std::vector<HeaderBytes> headers_;
  std::vector<transport::RequestPtr> requests_;
  std::vector<Inbound> inbound_;
  std::vector<std::vector<uint8_t>> freeBuffers_;
  int buffersOut_ = 0;
  int maxBuffers_ = 1;
  std::vector<bool> done_;
  ReplyQueue replies_;
  ServerStats stats_;
};

}  // namespace kolo::ps
