// Who a timeout blames when ranks wait on each other over shared memory.
//
// Three ranks as threads of this process (each with its own transports):
// rank 2 stays alive but never calls kolo again (a stopped rank), rank 1
// waits on rank 2, and rank 0 waits on rank 1 and starts waiting first, so
// its own timeout would come first. Rank 1 is itself waiting, so its shm
// pulse keeps moving: only rank 1 times out, naming rank 2, and rank 0
// fails through rank 1's abort notice, also naming rank 2; it never blames
// rank 1. Run with rank 1 reached over shm and rank 2 over shm (one host)
// and over tcp (rank 2 on another host: rank 1 waits in the router's tcp
// part, which must still keep its shm pulse going).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/tcp_store.h"
#include "transport/router_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace kolo::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using rendezvous::TcpStore;
using rendezvous::TcpStoreServer;

constexpr auto kTimeout = 1500ms;
constexpr int kRanks = 3;

std::string uniqueJob() {
  static std::atomic<int> counter{0};
  return "silence-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

// Rank `rank`'s transport: shm among the ranks of `hosts[rank]`'s host, tcp
// to the others, under a router when both are needed.
std::unique_ptr<Transport> connect(int rank, const std::vector<int>& hosts,
                                   rendezvous::Store& store, const std::string& job) {
  std::vector<int> local;
  std::vector<bool> remote(kRanks, false);
  for (int r = 0; r < kRanks; ++r) {
    if (hosts[r] == hosts[rank])
      local.push_back(r);
    else
      remote[r] = true;
  }
  std::vector<std::unique_ptr<Transport>> parts;
  std::vector<int> routes(kRanks, 0);
  if (local.size() > 1) {
    ShmTransport::Options so;
    so.rank = rank;
    so.size = kRanks;
    so.localRanks = local;
    so.timeout = kTimeout;
    so.connectTimeout = 20s;
    so.jobName = job;
    so.keyPrefix = "shm/host" + std::to_string(hosts[rank]);
    parts.push_back(ShmTransport::create(so, store));
  }
  if (local.size() < kRanks) {
    TcpTransport::Options to;
    to.rank = rank;
    to.size = kRanks;
    to.connect = remote;
    to.timeout = kTimeout;
    to.connectTimeout = 20s;
    for (int r = 0; r < kRanks; ++r)
      if (remote[r]) routes[r] = static_cast<int>(parts.size());
    parts.push_back(TcpTransport::create(to, store));
  }
  return std::make_unique<RouterTransport>(rank, kRanks, std::move(parts), routes,
                                           std::chrono::microseconds(100), kTimeout);
}

struct Outcome {
  bool failed = false;
  ErrorCode code = ErrorCode::kInternal;
  int peer = -1;
  std::string what;
  double seconds = 0;
};

// Runs the chain 0 -> 1 -> 2 (each waits on the next) with rank r on host
// hosts[r]; returns what ranks 0 and 1 saw.
std::vector<Outcome> runChain(const std::vector<int>& hosts) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  const std::string job = uniqueJob();
  std::atomic<bool> done{false};
  std::vector<Outcome> outcomes(kRanks);
  std::vector<std::exception_ptr> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = TcpStore::connect("127.0.0.1", server->port(), 10s);
        auto t = connect(r, hosts, *store, job);
        if (r == 2) {  // alive, silent: never calls kolo again
          while (!done) std::this_thread::sleep_for(5ms);
          return;
        }
        // Rank 0 starts waiting first: without rank 1's pulse it would time
        // out (on rank 1) before rank 1 times out on rank 2.
        if (r == 1) std::this_thread::sleep_for(300ms);
        uint64_t v = 0;
        const auto start = Clock::now();
        try {
          t->recv(r + 1, 7, &v, sizeof v);
        } catch (const Error& e) {
          outcomes[r] = {true, e.code(), e.peer(), e.what(),
                         std::chrono::duration<double>(Clock::now() - start).count()};
          t->abort(e);  // as the runtime does: the peers hear why
        }
        if (r == 0) {
          done = true;
        } else {
          while (!done) std::this_thread::sleep_for(5ms);  // a failing rank lingers
        }
      } catch (...) {
        errors[r] = std::current_exception();
        done = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return outcomes;
}

void expectOnlyTheSilentRankBlamed(const std::vector<int>& hosts) {
  const auto o = runChain(hosts);
  // Rank 1 waits on the silent rank: it times out, naming it.
  ASSERT_TRUE(o[1].failed);
  EXPECT_EQ(o[1].code, ErrorCode::kTimeout) << o[1].what;
  EXPECT_EQ(o[1].peer, 2) << o[1].what;
  EXPECT_NE(o[1].what.find("waiting for rank 2 "), std::string::npos) << o[1].what;
  // Rank 0 waits on rank 1, which is itself waiting: rank 0 fails with
  // rank 1's diagnosis (its abort notice), never blaming rank 1.
  ASSERT_TRUE(o[0].failed);
  EXPECT_EQ(o[0].peer, 2) << o[0].what;
  EXPECT_EQ(o[0].what.find("waiting for rank 1 "), std::string::npos) << o[0].what;
  EXPECT_NE(o[0].what.find("waiting for rank 2 "), std::string::npos) << o[0].what;
  EXPECT_NE(o[0].what.find("(reported by rank 1)"), std::string::npos) << o[0].what;
  // Rank 0 waited past its own timeout: only rank 1's notice ended it.
  EXPECT_GT(o[0].seconds, std::chrono::duration<double>(kTimeout).count()) << o[0].what;
}

TEST(ShmSilence, APeerWaitingOverShmIsNotBlamed) {
  expectOnlyTheSilentRankBlamed({0, 0, 0});
}

TEST(ShmSilence, APeerWaitingOverTcpIsNotBlamed) {
  expectOnlyTheSilentRankBlamed({0, 0, 1});
}

// The pulse itself: a peer that waits keeps it moving; one that stops
// waiting (and calls nothing) is silent after d; silentFor answers nothing
// for itself or a rank off this host.
TEST(ShmSilence, SilentForFollowsThePulse) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  const std::string job = uniqueJob();
  std::atomic<int> phase{0};
  std::exception_ptr error;
  std::thread peer([&] {
    try {
      auto store = TcpStore::connect("127.0.0.1", server->port(), 10s);
      ShmTransport::Options o;
      o.rank = 1;
      o.size = 3;
      o.localRanks = {0, 1};
      o.jobName = job;
      auto t = ShmTransport::create(o, *store);
      while (phase == 0) t->idle(1ms);                      // waiting: pulses
      while (phase == 1) std::this_thread::sleep_for(1ms);  // silent
    } catch (...) {
      error = std::current_exception();
    }
  });
  auto store = TcpStore::connect("127.0.0.1", server->port(), 10s);
  ShmTransport::Options o;
  o.size = 3;
  o.localRanks = {0, 1};
  o.jobName = job;
  auto t = ShmTransport::create(o, *store);
  EXPECT_FALSE(t->silentFor(0, 0ms).has_value());
  EXPECT_FALSE(t->silentFor(2, 0ms).has_value());
  const auto watch = [&](std::chrono::milliseconds span) {
    bool everSilent = false;
    for (auto end = Clock::now() + span; Clock::now() < end;) {
      everSilent |= t->silentFor(1, 200ms).value_or(true);
      std::this_thread::sleep_for(5ms);
    }
    return everSilent;
  };
  EXPECT_FALSE(watch(600ms)) << "a waiting peer counted as silent for 200 ms";
  phase = 1;
  std::this_thread::sleep_for(50ms);
  (void)t->silentFor(1, 200ms);  // takes in the peer's last beats
  std::this_thread::sleep_for(250ms);
  EXPECT_TRUE(t->silentFor(1, 200ms).value_or(false));
  EXPECT_FALSE(t->silentFor(1, 5s).value_or(true));
  phase = 2;
  peer.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace
}  // namespace kolo::transport
