#include "ps/reply_queue.h"

namespace kolo::ps {

void ReplyQueue::post(int worker, int rank, const HeaderBytes& header, bool shardPayload,
                      const std::vector<Segment>& segments,
                      std::shared_ptr<const void> owner, const void* data, size_t bytes) {
  Reply& r = replies_.emplace_back();
  r.header = header;
  r.owner = std::move(owner);
  Transfer& x = r.transfer;
  x.index = worker;
  x.rank = rank;
  x.outgoing = true;
  x.bytes = header.size() + bytes;
  x.started = Transfer::Clock::now();
  x.requests.push_back(t_.isend(rank, kHeaderTag, r.header.data(), r.header.size()));
  if (shardPayload) {
    const auto* floats = static_cast<const float*>(data);
    for (const Segment& g : segments) {
      x.requests.push_back(
          t_.isend(rank, kPayloadTag, floats + g.shardOffset, g.count * sizeof(float)));
    }
  } else if (bytes > 0) {
    x.requests.push_back(t_.isend(rank, kPayloadTag, data, bytes));
  }
}

bool ReplyQueue::reap(
    const std::function<void(int worker, std::exception_ptr error)>& onFailed) {
  bool any = false;
  for (auto it = replies_.begin(); it != replies_.end();) {
    // A reply whose request failed waits for the others too (the
    // transport may still point into its header and payload); a lost
    // worker's link fails all of them.
    const Transfer& x = it->transfer;
    if (!x.done()) {
      ++it;
      continue;
    }
    const std::exception_ptr error = x.error();
    const int worker = x.index;
    it = replies_.erase(it);
    any = true;
    if (error) onFailed(worker, error);
  }
  return any;
}

void ReplyQueue::releaseSent() {
  for (Reply& r : replies_) {
    if (r.owner && r.transfer.done()) r.owner.reset();
  }
}

void ReplyQueue::failIfStalled(Transfer::Clock::time_point lastProgress) const {
  for (const Reply& r : replies_) r.transfer.failIfStalled(t_, lastProgress);
}

}  // namespace kolo::ps
