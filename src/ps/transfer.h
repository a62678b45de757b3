// A parameter server's transfer in flight: the requests of one message to
// or from one worker (its header and payload segments), posted without
// waiting, so that the server keeps serving the others meanwhile.
//
// Contract
// - done() is true when every request is done; error() is the first
//   failed request's error (null when none failed).
// - failIfStalled() applies Transport::wait's timeout to a transfer the
//   server does not wait on: with heartbeats, the peer silent for the
//   transport's timeout and the transfer that old; without, also no
//   progress on the whole transport (lastProgress) for the timeout. It
//   throws Error(kTimeout) naming the peer, as wait() would have.
// - Thread safety: none; the server's thread owns it.
#pragma once

#include <chrono>
#include <exception>
#include <vector>

#include "transport/transport.h"

namespace kolo::ps {

struct Transfer {
  using Clock = std::chrono::steady_clock;

  int index = -1;         // the peer's index among the workers (or, on a client, servers)
  int rank = -1;          // the peer's rank in the transport
  bool outgoing = false;  // sent to the peer (else received from it)
  size_t bytes = 0;       // header and payload
  std::vector<transport::RequestPtr> requests;
  Clock::time_point started;

  bool done() const;
  std::exception_ptr error() const;
  void failIfStalled(const transport::Transport& t, Clock::time_point lastProgress) const;
};

}  // namespace kolo::ps
