// The elastic launcher's host-update counters (elastic_membership.h,
// kHostUpdatesKey and kHostAdditionsKey) as a worker reads them: through a
// store connection of its own, opened at the first read and kept (one
// round trip per read after that).
//
// A worker compares them with the ones its world was formed with
// (Communicator::elasticWorld): a larger update count means the hosts
// changed since; an unchanged addition count means every change only
// removed hosts.
//
// Contract
// - read() blocks for one round trip (the first also connects, up to the
//   connect timeout); throws kolo::Error from the store (kIo, kTimeout, ...)
//   and then drops the connection, so the next read connects afresh.
// - Thread-safe: reads are serialised.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "rendezvous/store.h"

namespace kolo::rendezvous::elastic {

class HostUpdates {
 public:
  struct Counts {
    int64_t updates = 0;    // every change of the hosts
    int64_t additions = 0;  // the changes that added a host
  };

  // The store at `address` (the job's rendezvous, hosted by the launcher),
  // reached with `secret` (empty: none).
  HostUpdates(std::string address, std::chrono::milliseconds connectTimeout,
              std::string secret);
  HostUpdates(const HostUpdates&) = delete;
  HostUpdates& operator=(const HostUpdates&) = delete;

  Counts read();

 private:
  const std::string address_;
  const std::chrono::milliseconds connectTimeout_;
  const std::string secret_;
  std::mutex mu_;
  std::unique_ptr<Store> store_;  // guarded by mu_; null until the first read
};

}  // namespace kolo::rendezvous::elastic
