// A Transport that reaches every rank through the best of several
// transports: shared memory for ranks of this host, tcp for the others.
//
// Contract: routes[r] names the part that carries traffic to and from rank r
// (the part must accept r). progress() advances all parts, so waiting on any
// request keeps every transfer moving. idle() blocks in the part that can
// sleep on an event (tcp's poll) only when no part spins on memory, else it
// yields briefly. A receive from kAnySource needs all ranks on one part;
// otherwise it throws Error(kInvalidArgument).
// A one-rank group may have no parts. Owns its parts. Thread safety: as Transport.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace kolo::transport {

class RouterTransport : public Transport {
 public:
  RouterTransport(int rank, int size, std::vector<std::unique_ptr<Transport>> parts,
                  std::vector<int> routes, std::chrono::microseconds spin,
                  std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr isend(int dst, Tag tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int src, Tag tag, void* data, size_t bytes) override;
  bool progress() override;
  void idle(std::chrono::microseconds max) override;
  std::chrono::milliseconds timeout() const override;
  bool blocksInIdle() const override {
    return parts_.size() == 1 && parts_[0]->blocksInIdle();
  }
  std::optional<bool> silentFor(int peer, std::chrono::milliseconds d) const override;
  void abort(const Error& cause) override;
  // Isolation is set on every part (each must support it); a rank's loss
  // is its part's.
  void setIsolatePeerFailures(bool on) override;
  bool isolatesPeerFailures() const override;
  bool peerLost(int peer) const override;

 private:
  Transport& partFor(int peer);

  int rank_;
  int size_;
  std::vector<std::unique_ptr<Transport>> parts_;
  std::vector<int> routes_;            // rank -> index into parts_
  std::chrono::milliseconds timeout_;  // when there are no parts (one rank)
};

}  // namespace kolo::transport
