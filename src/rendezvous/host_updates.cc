#include "rendezvous/host_updates.h"

#include <utility>

#include "rendezvous/elastic_membership.h"

namespace kolo::rendezvous::elastic {

HostUpdates::HostUpdates(std::string address, std::chrono::milliseconds connectTimeout,
                         std::string secret)
    : address_(std::move(address)),
      connectTimeout_(connectTimeout),
      secret_(std::move(secret)) {}

// ADD 0 reads a counter without blocking (a key never added reads 0).
HostUpdates::Counts HostUpdates::read() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (!store_) store_ = openStore(address_, false, connectTimeout_, secret_);
    Counts c;
    c.updates = store_->add(kHostUpdatesKey, 0);
    c.additions = store_->add(kHostAdditionsKey, 0);
    return c;
  } catch (...) {
    store_.reset();
    throw;
  }
}

}  // namespace kolo::rendezvous::elastic
