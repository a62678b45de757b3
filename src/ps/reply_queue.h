// A parameter server's replies on their way to the workers
// (docs/parameter_server.md, "The server loop"). A reply is posted, not
// waited on: a slow worker does not hold back the others' answers, and a
// server sends its pull replies to every worker at once, so the links
// share the bytes whatever the order the replies were made in (sent one
// after the other, servers that drift apart end up sending to one worker
// together while other workers' links idle).
//
// Contract
// - post() sends the header, then the payload: as the shard's segments
//   (shard payloads) or as one message. `owner` keeps the payload's memory
//   alive until the transport is done with it, and nobody may change that
//   memory meanwhile (the server copies its values on write while a reply
//   still holds them).
// - Messages to one worker leave in the order posted (the transport keeps
//   one tag's order between two ranks).
// - reap() drops the finished replies and hands each failed one to
//   onFailed(worker, error); it returns whether any reply finished.
// - releaseSent() drops the finished replies' hold on their payloads
//   (the rest of them stays for reap()).
// - failIfStalled() throws Error(kTimeout) for a reply its worker has not
//   taken within the transport's timeout (Transfer::failIfStalled).
// - Thread safety: none; the server's thread owns it.
#pragma once

#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <vector>

#include "ps/segments.h"
#include "ps/transfer.h"
#include "ps/wire.h"
#include "transport/transport.h"

namespace kolo::ps {

class ReplyQueue {
 public:
  explicit ReplyQueue(transport::Transport& t) : t_(t) {}

  void post(int worker, int rank, const HeaderBytes& header, bool shardPayload,
            const std::vector<Segment>& segments, std::shared_ptr<const void> owner,
            const void* data, size_t bytes);

  bool reap(const std::function<void(int worker, std::exception_ptr error)>& onFailed);

  void failIfStalled(Transfer::Clock::time_point lastProgress) const;

  // Lets go of the payloads of the replies the transport has finished
  // (reap() drops them later), so that the server does not copy its values
  // for a reply that is already sent.
  void releaseSent();

  bool empty() const { return replies_.empty(); }

 private:
  struct Reply {
    HeaderBytes header;
    std::shared_ptr<const void> owner;
    Transfer transfer;
  };

  transport::Transport& t_;
  std::list<Reply> replies_;  // a node's header stays put while it is sent
};

}  // namespace kolo::ps
