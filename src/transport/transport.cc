#include "transport/transport.h"

#include <thread>

#include "common/check.h"

namespace kolo::transport {

void Transport::idle(std::chrono::microseconds max) {
  std::this_thread::sleep_for(max);
}

void Transport::setIsolatePeerFailures(bool on) {
  if (!on) return;
  KOLO_THROW(ErrorCode::kInvalidArgument,
             "rank " << globalRank(rank())
                     << ": this transport cannot isolate peer failures (the loss of "
                        "any peer breaks it)");
}

std::vector<int> Transport::lostPeers() const {
  std::vector<int> lost;
  for (int r = 0; r < size(); ++r) {
    if (peerLost(r)) lost.push_back(r);
  }
  return lost;
}

void Transport::wait(Request& request) {
  Backoff backoff(spin_, blocksInIdle() ? std::chrono::microseconds(0)
                                        : std::chrono::microseconds(2000));
  const auto started = Backoff::Clock::now();
  while (!request.done()) {
    if (progress()) {
      backoff.reset();
      continue;
    }
    if (request.done()) break;
    // With heartbeats the peer's own silence decides; without, a wait with
    // no progress at all on this transport for the timeout.
    std::optional<bool> silent;
    if (request.peer != kAnySource) silent = silentFor(request.peer, timeout());
    const bool timedOut = silent ? *silent && Backoff::Clock::now() - started > timeout()
                                 : backoff.idleFor() > timeout();
    if (timedOut) {
      const int peer = request.peer == kAnySource ? kAnySource : globalRank(request.peer);
      std::string who =
          peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(peer);
      KOLO_THROW_PEER(
          ErrorCode::kTimeout, peer,
          "rank " << globalRank(rank()) << " timed out after "
                  << timeout().count() / 1000.0 << " s waiting for " << who << " to "
                  << (request.kind == Request::Kind::kSend ? "receive" : "send") << " "
                  << request.bytes << " bytes (tag " << request.tag
                  << "); the peer is alive but not answering (KOLO_TIMEOUT)");
    }
    if (backoff.idle()) idle(backoff.sleepHint());
  }
  if (request.error) std::rethrow_exception(request.error);
}

void Transport::waitAll(std::span<const RequestPtr> requests) {
  for (const auto& r : requests) wait(*r);
}

void Transport::send(int dst, Tag tag, const void* data, size_t bytes) {
  wait(isend(dst, tag, data, bytes));
}

void Transport::recv(int src, Tag tag, void* data, size_t bytes) {
  wait(irecv(src, tag, data, bytes));
}

void Transport::sendRecv(int dst, const void* sendData, size_t sendBytes, int src,
                         void* recvData, size_t recvBytes, Tag tag) {
  auto r = irecv(src, tag, recvData, recvBytes);
  auto s = isend(dst, tag, sendData, sendBytes);
  wait(*r);
  wait(*s);
}

}  // namespace kolo::transport
