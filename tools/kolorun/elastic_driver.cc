#include "elastic_driver.h"

#include <algorithm>
#include <sstream>

#include "rendezvous/elastic_membership.h"

namespace kolo::kolorun {

std::chrono::milliseconds joinWindowFor(double timeoutSeconds) {
  return std::chrono::milliseconds(static_cast<int64_t>((2 * timeoutSeconds + 5) * 1000));
}

namespace elastic = rendezvous::elastic;

ElasticDriver::ElasticDriver(std::unique_ptr<rendezvous::Store> store, int workers,
                             ElasticLimits limits)
    : store_(std::move(store)), limits_(limits), workers_(workers) {}

void ElasticDriver::workerExited(int worker, bool success) {
  Worker& w = workers_.at(worker);
  if (w.state == State::kLive) w.state = success ? State::kExitedOk : State::kFailed;
  finishing_ = finishing_ || success;
}

void ElasticDriver::addWorker() {
  workers_.emplace_back();
}

void ElasticDriver::publishHostChange(bool added) {
  store_->add(elastic::kHostUpdatesKey, 1);
  if (added) store_->add(elastic::kHostAdditionsKey, 1);
}

int ElasticDriver::liveWorkers() const {
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(),
                    [](const Worker& w) { return w.state == State::kLive; }));
}

void ElasticDriver::readRequests() {
  const int64_t total = store_->add(elastic::kWantTotalKey, 0);
  if (total == lastTotal_) return;
  lastTotal_ = total;
  for (size_t id = 0; id < workers_.size(); ++id) {
    Worker& w = workers_[id];
    if (w.state == State::kExitedOk || w.state == State::kFailed) continue;
    w.asked = store_->add(elastic::wantKey(static_cast<int64_t>(id)), 0);
    if (w.state == State::kRemoved && waiting(w)) {
      store_->setString(elastic::assignKey(static_cast<int64_t>(id), w.asked),
                        elastic::encodeRefusal("it did not ask for world " +
                                               std::to_string(generation_) +
                                               " in time and was removed from the job"));
      w.served = w.asked;
    }
  }
}

ElasticDriver::Outcome ElasticDriver::poll(Clock::time_point now) {
  Outcome out;
  if (failed_) return out;
  readRequests();
  int live = 0, asking = 0, membersAsking = 0;
  for (const Worker& w : workers_) {
    if (w.state != State::kLive) continue;
    ++live;
    asking += waiting(w) ? 1 : 0;
    membersAsking += waiting(w) && (w.lastRank >= 0 || generation_ == 0) ? 1 : 0;
  }
  // Too few workers left fails the job after --elastic-timeout, whether or
  // not they ask for a world (the others may all have failed but one that
  // is stopped). Not once a worker has finished: the job is ending.
  if (live < limits_.minWorkers && !finishing_) {
    if (!shortSince_) shortSince_ = now;
    if (now - *shortSince_ >= limits_.elasticTimeout) {
      std::ostringstream why;
      why << "only " << live << " worker(s) left, fewer than --min-np "
          << limits_.minWorkers << ", for --elastic-timeout "
          << limits_.elasticTimeout.count() / 1000.0 << " s";
      out.failure = why.str();
      refuseWaiting(*out.failure);
      failed_ = true;
      return out;
    }
  } else {
    shortSince_.reset();
  }
  if (asking == 0) {
    firstRequest_.reset();
    return out;
  }
  // The join window runs from the first request of a member of the last
  // world (or of anyone, for the first world).
  if (!firstRequest_ && membersAsking > 0) firstRequest_ = now;
  if (live < limits_.minWorkers) return out;  // until the timeout above
  if (asking < live) {
    if (!firstRequest_ || now - *firstRequest_ < limits_.joinWindow) return out;
    for (size_t id = 0; id < workers_.size(); ++id) {
      Worker& w = workers_[id];
      if (w.state == State::kLive && !waiting(w)) {
        w.state = State::kRemoved;
        out.remove.push_back(static_cast<int>(id));
      }
    }
    if (asking < limits_.minWorkers) return out;  // the next poll applies --min-np
  }
  form(out);
  return out;
}

void ElasticDriver::form(Outcome& out) {
  if (limits_.resetLimit && generation_ > *limits_.resetLimit) {
    std::ostringstream why;
    why << "the job reached --reset-limit " << *limits_.resetLimit << " (world "
        << generation_ << " was the last one allowed)";
    out.failure = why.str();
    refuseWaiting(*out.failure);
    failed_ = true;
    return;
  }
  std::vector<int> members;
  for (size_t id = 0; id < workers_.size(); ++id) {
    if (workers_[id].state == State::kLive && waiting(workers_[id])) {
      members.push_back(static_cast<int>(id));
    }
  }
  // Survivors keep their order; newcomers (no rank yet) follow by id.
  std::stable_sort(members.begin(), members.end(), [this](int a, int b) {
    const int ra = workers_[a].lastRank, rb = workers_[b].lastRank;
    if ((ra < 0) != (rb < 0)) return ra >= 0;
    return ra < rb;
  });
  ++generation_;
  const int size = static_cast<int>(members.size());
  const int64_t updates = store_->add(elastic::kHostUpdatesKey, 0);
  const int64_t additions = store_->add(elastic::kHostAdditionsKey, 0);
  std::ostringstream note;
  note << "elastic: world " << generation_ << " has " << size << " worker(s):";
  for (int rank = 0; rank < size; ++rank) {
    Worker& w = workers_[members[rank]];
    store_->setString(elastic::assignKey(members[rank], w.asked),
                      elastic::encode({generation_, rank, size, updates, additions}));
    w.served = w.asked;
    w.lastRank = rank;
    note << " " << members[rank] << "->" << rank;
  }
  out.notes.push_back(note.str());
  firstRequest_.reset();
}

void ElasticDriver::refuseWaiting(const std::string& reason) {
  for (size_t id = 0; id < workers_.size(); ++id) {
    Worker& w = workers_[id];
    if (w.state == State::kLive && waiting(w)) {
      store_->setString(elastic::assignKey(static_cast<int64_t>(id), w.asked),
                        elastic::encodeRefusal(reason));
      w.served = w.asked;
    }
  }
}

std::optional<ElasticDriver::Clock::time_point> ElasticDriver::nextDeadline() const {
  // Requests arrive through the store, which does not wake the supervisor:
  // poll often while the job runs.
  return Clock::now() + std::chrono::milliseconds(20);
}

}  // namespace kolo::kolorun
