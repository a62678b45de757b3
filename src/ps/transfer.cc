#include "ps/transfer.h"

#include "common/check.h"

namespace kolo::ps {

bool Transfer::done() const {
  for (const auto& r : requests) {
    if (!r->done()) return false;
  }
  return true;
}

std::exception_ptr Transfer::error() const {
  for (const auto& r : requests) {
    if (r->done() && r->error) return r->error;
  }
  return nullptr;
}

void Transfer::failIfStalled(const transport::Transport& t,
                             Clock::time_point lastProgress) const {
  const auto now = Clock::now();
  const auto limit = t.timeout();
  if (now - started <= limit) return;
  const std::optional<bool> silent = t.silentFor(rank, limit);
  const bool stalled = silent ? *silent : now - lastProgress > limit;
  if (!stalled) return;
  const int peer = t.globalRank(rank);
  KOLO_THROW_PEER(ErrorCode::kTimeout, peer,
                  "rank " << t.globalRank(t.rank()) << " timed out after "
                          << limit.count() / 1000.0 << " s waiting for rank " << peer
                          << " to " << (outgoing ? "receive" : "send") << " " << bytes
                          << " bytes of a parameter-server message; the peer is alive "
                             "but not answering (KOLO_TIMEOUT)");
}

}  // namespace kolo::ps
