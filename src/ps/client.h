// kolo::ps::Client: a worker's side of the parameter servers; the C++ API
// that kolo.torch.ps mirrors (docs/parameter_server.md).
//
// Contract
// - Parameters are given as one float pointer per tensor, in the order and
//   with the sizes of config.tensorElements; the pointers must stay valid
//   during each call. Every call talks to every server at once (all sends
//   and receives posted, then waited on together).
// - start(): sends the configuration to every server; worker 0 then seeds
//   the servers with `params`; every worker pulls, so all start from worker
//   0's values. Collective in effect: the servers need every worker's
//   configuration, and they must agree (else Error(kMismatch)).
// - step(): the mode's step after the local gradient is in `grads`.
//   sync: push, then pull the next version (blocks until the round has
//   applied). downpour: push every push_period-th call (gradients summed
//   in between), pull every pull_period-th call and whenever a server
//   refused a push as too stale. easgd: grads are not used (the wrapped
//   optimizer has already stepped on the worker); every easgd_period-th
//   call the elastic exchange updates `params`.
// - A server's refusal (kError) is Error(kInvalidArgument or kMismatch)
//   with the server's text; a lost server is Error(kPeerLost or kTimeout)
//   naming its rank, within KOLO_TIMEOUT.
// - Not thread-safe; one client per worker, over the job's transport, used
//   by nothing else meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ps/checkpoint.h"
#include "ps/roles.h"
#include "ps/segments.h"
#include "ps/server.h"
#include "ps/shard_map.h"
#include "ps/wire.h"
#include "transport/transport.h"

namespace kolo::ps {

struct ClientOptions {
  int pushPeriod = 1;   // downpour
  int pullPeriod = 1;   // downpour
  int easgdPeriod = 1;  // easgd
};

class Client {
 public:
  // Validates config and options (kInvalidArgument naming the value).
  Client(transport::Transport& t, Roles roles, int workerIndex, PsConfig config,
         ClientOptions options = {});

  void start(const std::vector<float*>& params);
  void step(const std::vector<float*>& params, const std::vector<const float*>& grads,
            float lr);

  // The servers' current parameters (easgd: the center) into params.
  void pull(const std::vector<float*>& params);
  // Pushes `grads` to every shard; returns how many shards refused it as
  // too stale.
  int push(const std::vector<const float*>& grads, float lr);
  // One elastic exchange with every shard: params -= alpha * (params - c).
  void exchange(const std::vector<float*>& params);
  // Checkpoints (checkpoint.h). save(): every server writes its shard,
  // version and optimizer state into `dir` (created when missing), then
  // this worker writes the manifest, the commit point; returns it. load():
  // checks the manifest against this job (naming every difference), has
  // every server read and check its file, then pulls into `params`. Both
  // act on the servers as they are when each request arrives: call them
  // while the other workers wait (kolo.torch.ps.save/load do, between
  // steps), and after load() every other worker must pull before its next
  // step. Errors name the file and what is wrong; a failed load leaves the
  // servers as they were.
  Manifest save(const std::string& dir);
  void load(const std::string& dir, const std::vector<float*>& params);
  // Asks every server to stop the training (a validator's decision): from
  // then on (sync: from the next version, so every worker stops after the
  // same step) the servers' replies carry kFlagStop, and stopRequested()
  // turns true on every worker at its next exchange with them.
  void requestStop();
  bool stopRequested() const { return stopRequested_; }
  // On a validator: every trainer has finished (seen at the last exchange
  // with the servers, e.g. a pull).
  bool trainingOver() const { return trainingOver_; }
  // The smallest of the versions of this worker's parameters over the
  // shards (the version they have all reached).
  uint64_t version() const;
  // Every server's counters, by server index.
  std::vector<ServerStats> stats();
  // Tells every server this worker is done. Idempotent.
  void bye();

  // The largest staleness of the last push among the shards that applied it.
  uint64_t staleness() const { return staleness_; }
  uint64_t steps() const { return steps_; }
  const ShardMap& shardMap() const { return map_; }
  size_t tensorCount() const { return config_.tensorElements.size(); }

 private:
  struct Reply {
    Header header;
    std::vector<uint8_t> payload;
  };
  // Sends (type, payload[s]) to every server s, then receives one reply
  // from each, checking its type.
  // payloads[s]: shard s's floats, or empty for no payload; versions[s]:
  // the header's version for shard s.
  // `tensors`: the tensors whose shards are the payloads (empty: none);
  // `into`: where a kPullReply's values go (else shard payloads of replies
  // land in buffers_).
  std::vector<Reply> roundTrip(MessageType type, const std::vector<const float*>& tensors,
                               float lr, const std::vector<uint64_t>& versions,
                               MessageType expect,
                               const std::vector<float*>* into = nullptr);
  // The same with payloads of any size: bytes[s] (null: none) of sizes[s],
  // or, with `tensors`, the shards of those tensors.
  std::vector<Reply> roundTripBytes(MessageType type,
                                    const std::vector<const uint8_t*>& bytes,
                                    const std::vector<uint64_t>& sizes, float lr,
                                    const std::vector<uint64_t>& versions,
                                    MessageType expect, uint16_t flags = 0,
                                    const std::vector<const float*>* tensors = nullptr,
                                    const std::vector<float*>* into = nullptr);
  void postShardSends(int s, const std::vector<const float*>& tensors,
                      std::vector<transport::RequestPtr>& requests);
  void postShardRecvs(int s, const std::vector<float*>* into,
                      std::vector<transport::RequestPtr>& requests);
  void scatterPacked(int s, const std::vector<float*>& into) const;
  void awaitEach(const std::vector<transport::RequestPtr>& requests,
                 const std::function<void(int)>& onDone);
  // Posts header (and payload) sends to every server, without replies.
  void sendAll(MessageType type, const std::vector<const uint8_t*>& payloads,
               const std::vector<uint64_t>& bytes, const std::vector<uint64_t>& versions,
               float lr, std::vector<transport::RequestPtr>& requests,
               std::vector<HeaderBytes>& headers, uint16_t flags = 0,
               bool headersOnly = false);
  // Rethrows a transport error naming the parameter servers.
  [[noreturn]] void lost(const Error& e) const;
  void pullAtLeast(const std::vector<float*>& params,
                   const std::vector<uint64_t>& minVersion);

  transport::Transport& t_;
  Roles roles_;
  int worker_;
  PsConfig config_;
  ClientOptions options_;
  ShardMap map_;
  WireLimits limits_;
  std::vector<uint64_t> shardBytes_;
  std::vector<uint64_t> versions_;  // per shard: the version of our parameters
  std::vector<std::vector<Segment>> segments_;   // per shard
  std::vector<std::vector<float>> buffers_;      // per shard: packed segments, replies
  std::vector<std::vector<float>> accumulated_;  // downpour, push_period > 1
  uint64_t steps_ = 0;
  uint64_t staleness_ = 0;
  bool mustPull_ = false;
  bool saidBye_ = false;
  bool stopRequested_ = false;
  bool trainingOver_ = false;
};

}  // namespace kolo::ps
