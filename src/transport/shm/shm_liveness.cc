// ShmTransport's liveness and failures: a local peer whose process died
// while we wait for it breaks the transport, or, with per-peer isolation
// (transport.h), fails only what needs it; and the pulses that tell a
// silent peer from one that is itself waiting.
#include "transport/shm/shm_transport.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "common/rank_text.h"

namespace kolo::transport {
namespace {

// True when the process is gone or a zombie (killed, not yet reaped).
bool processGone(pid_t pid, std::string* how) {
  if (kill(pid, 0) != 0 && errno == ESRCH) {
    *how = "its process no longer exists";
    return true;
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) {
    *how = "its process no longer exists";
    return true;
  }
  std::string line;
  std::getline(stat, line);
  auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  char state = line[paren + 2];
  if (state == 'Z' || state == 'X') {
    *how = "its process has exited (zombie, state " + std::string(1, state) + ")";
    return true;
  }
  return false;
}

}  // namespace

// Fails with kPeerLost when an awaited peer's process is gone: the whole
// transport, or with per-peer isolation only what needs that peer.
void ShmTransport::checkPeers() {
  const pid_t self = getpid();
  bool anySource = false;
  std::vector<bool> awaited(peers_.size(), false);
  for (const auto& r : posted_) {
    if (r.src == kAnySource)
      anySource = true;
    else
      awaited[r.src] = true;
  }
  for (size_t j = 0; j < peers_.size(); ++j) {
    Peer& p = peers_[j];
    if (p.lost || !(anySource || awaited[j] || !p.sends.empty() || p.request)) continue;
    if (auto notice = abortNoticeOf(static_cast<int>(j))) {
      // Its transport broke; with isolation, that is the loss of that peer.
      if (!isolate_) breakWith(notice);
      dropPeer(static_cast<int>(j), notice);
      continue;
    }
    if (p.pid == self || p.pid <= 0) continue;
    std::string how;
    if (processGone(p.pid, &how)) {
      std::ostringstream os;
      os << "rank " << options_.rank << " lost " << rankText(p.rank, {}, p.pid)
         << " on this host: " << how;
      auto error = std::make_exception_ptr(Error(ErrorCode::kPeerLost, os.str(), p.rank));
      if (!isolate_) breakWith(error);
      dropPeer(static_cast<int>(j), error);
    }
  }
}

// Isolation: fails what needs local peer j (and the receives from any rank
// pending now, the caller's notice) and ignores its rings from now on.
void ShmTransport::dropPeer(int j, std::exception_ptr error) {
  Peer& p = peers_[j];
  p.lost = error;
  for (auto& send : p.sends) send.request->fail(error);
  pendingSends_ -= p.sends.size();
  p.sends.clear();
  if (p.request) p.request->fail(error);
  p.request = nullptr;
  if (p.unexpected) {
    unexpected_.remove_if([&](const Unexpected& u) { return &u == p.unexpected; });
  }
  p.unexpected = nullptr;
  p.reading = false;
  p.dst = nullptr;
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->src == j || it->src == kAnySource) {
      it->request->fail(error);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
}

// Pulses: the shared-memory form of heartbeats. Each rank owns a counter
// in its segment's header and bumps it (beat()) in idle(), which every wait
// loop reaches within milliseconds of finding nothing to do, and whenever
// progress() moves data. A peer reads the counter only when its own wait
// found nothing to do (silentFor); a value that changed since its last
// read counts as "heard now" in a HeartbeatSchedule, so a peer is silent
// for d when its counter has not moved during the last d of watching. The
// watcher can only under-estimate how long a peer has been silent (a
// change it sees late counts as recent), so it never blames a peer early.
void ShmTransport::startPulses(std::atomic<uint64_t>* own) {
  pulse_ = own;
  pulseSeen_.resize(peerPulses_.size());
  for (size_t j = 0; j < peerPulses_.size(); ++j) {
    pulseSeen_[j] = peerPulses_[j]->load(std::memory_order_relaxed);
  }
  heard_.emplace(options_.timeout, static_cast<int>(peerPulses_.size()));
}

std::optional<bool> ShmTransport::silentFor(int peer, std::chrono::milliseconds d) const {
  const auto& local = options_.localRanks;
  auto it = std::lower_bound(local.begin(), local.end(), peer);
  if (peer == options_.rank || it == local.end() || *it != peer || !heard_) {
    return std::nullopt;
  }
  const size_t j = static_cast<size_t>(it - local.begin());
  const auto now = HeartbeatSchedule::Clock::now();
  const uint64_t pulse = peerPulses_[j]->load(std::memory_order_relaxed);
  if (pulse != pulseSeen_[j]) {
    pulseSeen_[j] = pulse;
    heard_->heard(static_cast<int>(j), now);
  }
  return heard_->silentFor(static_cast<int>(j), d, now);
}

RequestPtr ShmTransport::lostRequest(Request::Kind kind, const Peer& p, Tag tag,
                                     size_t bytes) {
  auto r = std::make_shared<Request>(kind, p.rank, tag, bytes);
  r->fail(p.lost);
  return r;
}

void ShmTransport::setIsolatePeerFailures(bool on) {
  isolate_ = on;
}

bool ShmTransport::peerLost(int peer) const {
  auto it =
      std::lower_bound(options_.localRanks.begin(), options_.localRanks.end(), peer);
  if (it == options_.localRanks.end() || *it != peer) return false;
  return peers_[it - options_.localRanks.begin()].lost != nullptr;
}

void ShmTransport::breakWith(std::exception_ptr error) {
  broken_ = error;
  for (auto& r : posted_) r.request->fail(error);
  posted_.clear();
  for (auto& p : peers_) {
    for (auto& s : p.sends) s.request->fail(error);
    p.sends.clear();
    if (p.request) p.request->fail(error);
    p.request = nullptr;
  }
  pendingSends_ = 0;
  std::rethrow_exception(error);
}

}  // namespace kolo::transport
