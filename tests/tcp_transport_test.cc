// TcpTransport: ranks as threads over loopback for the messaging semantics,
// ranks as forked processes for the failure cases (SIGKILL, SIGSTOP).
#include "transport/tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <kolo/error.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/tcp_store.h"
#include "support/expect_error.h"
#include "support/tcp_ranks.h"

namespace kolo {
namespace {

using transport::kAnySource;
using transport::RequestPtr;
using transport::TcpTransport;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes that depend on (src, dst, tag, position): a misrouted or
// misplaced block shows. Filled 8 bytes at a time (64 MiB stays fast).
std::vector<uint8_t> pattern(int src, int dst, uint64_t tag, size_t n) {
  std::vector<uint8_t> v(n);
  const uint64_t seed = (src * 1000003ull + dst * 10007ull + tag * 101ull) | 1;
  const size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = (i + 1) * seed * 0x9E3779B97F4A7C15ull;
    std::memcpy(v.data() + i * 8, &w, 8);
  }
  for (size_t i = words * 8; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + seed);
  return v;
}

using test::expectError;

TEST(TcpTransport, PingPongSmallMessages) {
  constexpr int kIters = 2000;
  double usPerRoundTrip = 0;
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    uint64_t value = 0;
    // Warm up, then time.
    for (int phase = 0; phase < 2; ++phase) {
      auto start = Clock::now();
      for (int i = 0; i < kIters; ++i) {
        if (r == 0) {
          value = i * 3 + 1;
          t.send(1, 7, &value, sizeof(value));
          t.recv(1, 7, &value, sizeof(value));
          ASSERT_EQ(value, static_cast<uint64_t>(i * 3 + 2));
        } else {
          t.recv(0, 7, &value, sizeof(value));
          ASSERT_EQ(value, static_cast<uint64_t>(i * 3 + 1));
          value += 1;
          t.send(0, 7, &value, sizeof(value));
        }
      }
      if (r == 0 && phase == 1) usPerRoundTrip = secondsSince(start) * 1e6 / kIters;
    }
  });
  std::printf(
      "[ measure  ] tcp loopback 8-byte ping-pong: %.1f us round trip, %.1f us "
      "one way\n",
      usPerRoundTrip, usPerRoundTrip / 2);
}

TEST(TcpTransport, SameTagMessagesArriveInOrderPerTag) {
  constexpr int kPerTag = 200;
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    if (r == 0) {
      std::vector<RequestPtr> sends;
      std::vector<uint32_t> values(2 * kPerTag);
      for (int i = 0; i < kPerTag; ++i) {
        for (int tag = 1; tag <= 2; ++tag) {
          uint32_t& v = values[i * 2 + tag - 1];
          v = tag * 100000 + i;
          sends.push_back(t.isend(1, tag, &v, sizeof(v)));
        }
      }
      t.waitAll(sends);
    } else {
      // Receive all of tag 2 first, then tag 1: each tag keeps its order.
      std::vector<uint32_t> got(2 * kPerTag);
      std::vector<RequestPtr> recvs;
      for (int tag = 2; tag >= 1; --tag) {
        for (int i = 0; i < kPerTag; ++i) {
          recvs.push_back(t.irecv(0, tag, &got[(tag - 1) * kPerTag + i], 4));
        }
      }
      t.waitAll(recvs);
      for (int tag = 1; tag <= 2; ++tag) {
        for (int i = 0; i < kPerTag; ++i) {
          ASSERT_EQ(got[(tag - 1) * kPerTag + i],
                    static_cast<uint32_t>(tag * 100000 + i));
        }
      }
    }
  });
}

TEST(TcpTransport, ManyQueuedSendsOfMixedSizes) {
  constexpr int kMessages = 1500;
  auto sizeOf = [](int i) -> size_t { return (i * 7919) % 20011; };
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    std::vector<std::vector<uint8_t>> bufs(kMessages);
    std::vector<RequestPtr> reqs;
    if (r == 0) {
      for (int i = 0; i < kMessages; ++i) {
        bufs[i] = pattern(0, 1, i, sizeOf(i));
        reqs.push_back(t.isend(1, i % 3, bufs[i].data(), bufs[i].size()));
      }
    } else {
      std::this_thread::sleep_for(milliseconds(50));  // let some arrive first
      for (int tag = 2; tag >= 0; --tag) {
        for (int i = tag; i < kMessages; i += 3) {
          bufs[i].resize(sizeOf(i));
          reqs.push_back(t.irecv(0, tag, bufs[i].data(), bufs[i].size()));
        }
      }
    }
    t.waitAll(reqs);
    if (r == 1) {
      for (int i = 0; i < kMessages; ++i) {
        ASSERT_TRUE(bufs[i] == pattern(0, 1, i, sizeOf(i))) << "message " << i;
      }
    }
  });
}

TEST(TcpTransport, ReceiveFromAnySourceReportsTheSender) {
  constexpr int kRanks = 5;
  test::runTcpRanks(kRanks, [&](int r, TcpTransport& t) {
    if (r == 0) {
      std::set<int> seen;
      for (int i = 1; i < kRanks; ++i) {
        std::vector<uint8_t> buf(1000 + 0);
        auto req = t.irecv(kAnySource, 42, buf.data(), buf.size());
        t.wait(req);
        ASSERT_GE(req->peer, 1);
        ASSERT_LT(req->peer, kRanks);
        EXPECT_EQ(buf, pattern(req->peer, 0, 42, buf.size()));
        seen.insert(req->peer);
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(kRanks - 1));
    } else {
      auto data = pattern(r, 0, 42, 1000);
      t.send(0, 42, data.data(), data.size());
    }
  });
}

TEST(TcpTransport, MessagesSentBeforeTheReceiveIsPostedAreKept) {
  constexpr size_t kLarge = 32 << 20;
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    if (r == 0) {
      auto small = pattern(0, 1, 1, 100);
      auto medium = pattern(0, 1, 2, 300000);
      auto large = pattern(0, 1, 3, kLarge);
      uint8_t go = 1;
      std::vector<RequestPtr> sends;
      sends.push_back(t.isend(1, 1, small.data(), small.size()));
      sends.push_back(t.isend(1, 2, medium.data(), medium.size()));
      sends.push_back(t.isend(1, 9, &go, 1));  // "the first two are out"
      sends.push_back(t.isend(1, 3, large.data(), large.size()));
      sends.push_back(t.isend(1, 10, &go, 1));
      t.waitAll(sends);
    } else {
      // Tag 9 comes after tags 1 and 2 on the same connection: once it is
      // here, they are unexpected messages.
      uint8_t go = 0;
      uint8_t last = 0;
      t.recv(0, 9, &go, 1);
      // The 32 MiB message cannot fit in the socket buffers: keep a receive
      // pending (tag 10, sent last) and progress until bytes move, so that
      // it is in flight when its receive is posted.
      auto tail = t.irecv(0, 10, &last, 1);
      while (!t.progress()) {
      }
      std::vector<uint8_t> large(kLarge);
      auto bigReq = t.irecv(0, 3, large.data(), large.size());
      std::vector<uint8_t> small(100), medium(300000);
      t.recv(0, 2, medium.data(), medium.size());
      t.recv(0, 1, small.data(), small.size());
      t.wait(bigReq);
      t.wait(tail);
      EXPECT_EQ(small, pattern(0, 1, 1, 100));
      EXPECT_EQ(medium, pattern(0, 1, 2, 300000));
      EXPECT_TRUE(large == pattern(0, 1, 3, kLarge));
      EXPECT_EQ(go, 1);
      EXPECT_EQ(last, 1);
    }
  });
}

TEST(TcpTransport, SizeMismatchFailsTheReceiveNamingSenderTagAndSizes) {
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    std::vector<uint8_t> sixteen(16, 5), eight(8);
    if (r == 0) {
      t.send(1, 3, sixteen.data(), 16);  // posted receive is smaller
      uint8_t sync = 0;
      t.recv(1, 50, &sync, 1);
      t.send(1, 4, sixteen.data(), 16);  // unexpected, then a smaller receive
      t.send(1, 5, sixteen.data(), 16);  // the link still works
    } else {
      auto req = t.irecv(0, 3, eight.data(), 8);
      Error e = expectError([&] { t.wait(req); });
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_EQ(e.peer(), 0);
      std::string m = e.what();
      EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("tag 3"), std::string::npos) << m;
      EXPECT_NE(m.find("16 bytes"), std::string::npos) << m;
      EXPECT_NE(m.find("8 bytes"), std::string::npos) << m;

      uint8_t sync = 1;
      t.send(0, 50, &sync, 1);
      std::vector<uint8_t> ok(16);
      t.recv(0, 5, ok.data(), 16);  // tag 4 arrived first: now unexpected
      Error e2 = expectError([&] { t.recv(0, 4, eight.data(), 8); });
      EXPECT_EQ(e2.code(), ErrorCode::kMismatch);
      EXPECT_NE(std::string(e2.what()).find("tag 4"), std::string::npos) << e2.what();
      EXPECT_EQ(ok, sixteen);
    }
  });
}

TEST(TcpTransport, Exchange64MiBBothWays) {
  constexpr size_t kBytes = 64 << 20;
  constexpr int kIters = 5;
  double seconds = 0;
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    auto mine = pattern(r, 1 - r, 11, kBytes);
    std::vector<uint8_t> theirs(kBytes);
    t.sendRecv(1 - r, mine.data(), kBytes, 1 - r, theirs.data(), kBytes, 11);  // warm-up
    EXPECT_TRUE(theirs == pattern(1 - r, r, 11, kBytes));
    std::memset(theirs.data(), 0, kBytes);
    auto start = Clock::now();
    for (int i = 0; i < kIters; ++i) {
      t.sendRecv(1 - r, mine.data(), kBytes, 1 - r, theirs.data(), kBytes, 11);
    }
    if (r == 0) seconds = secondsSince(start) / kIters;
    EXPECT_TRUE(theirs == pattern(1 - r, r, 11, kBytes));
  });
  std::printf(
      "[ measure  ] tcp loopback 64 MiB sendRecv both ways: %.1f ms, %.2f GB/s "
      "per direction\n",
      seconds * 1e3, kBytes / seconds / 1e9);
}

TEST(TcpTransport, AllToAllForOneToEightRanks) {
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    test::runTcpRanks(n, [&](int r, TcpTransport& t) {
      ASSERT_EQ(t.rank(), r);
      ASSERT_EQ(t.size(), n);
      std::vector<std::vector<uint8_t>> out(n), in(n);
      std::vector<RequestPtr> reqs;
      auto bytesFor = [](int src, int dst) -> size_t {
        return (src * 7 + dst * 3) % 5 == 0 ? 0 : 1000 * (src + 1) + 70000 * dst;
      };
      for (int p = 0; p < n; ++p) {
        in[p].resize(bytesFor(p, r));
        reqs.push_back(t.irecv(p, 20, in[p].data(), in[p].size()));
      }
      for (int k = 0; k < n; ++k) {
        int p = (r + k) % n;  // everyone starts with a different peer
        out[p] = pattern(r, p, 20, bytesFor(r, p));
        reqs.push_back(t.isend(p, 20, out[p].data(), out[p].size()));
      }
      t.waitAll(reqs);
      for (int p = 0; p < n; ++p) {
        ASSERT_TRUE(in[p] == pattern(p, r, 20, bytesFor(p, r))) << "from " << p;
      }
    });
  }
}

TEST(TcpTransport, PeersOutsideTheConnectSetAreRejected) {
  // A ring of 4: each rank links only with its two neighbours.
  test::runTcpRanks(
      4,
      [&](int r, TcpTransport& t) {
        int right = (r + 1) % 4, left = (r + 3) % 4, across = (r + 2) % 4;
        EXPECT_TRUE(t.connected(right));
        EXPECT_FALSE(t.connected(across));
        uint32_t v = r, got = 0;
        t.sendRecv(right, &v, 4, left, &got, 4, 1);
        EXPECT_EQ(got, static_cast<uint32_t>(left));
        Error e = expectError([&] { t.isend(across, 1, &v, 4); });
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(across)),
                  std::string::npos);
        Error e2 = expectError([&] { t.irecv(9, 1, &v, 4); });
        EXPECT_EQ(e2.code(), ErrorCode::kInvalidArgument);
      },
      [](TcpTransport::Options& o) {
        o.connect.assign(4, false);
        o.connect[(o.rank + 1) % 4] = true;
        o.connect[(o.rank + 3) % 4] = true;
      });
}

TEST(TcpTransport, SendToSelf) {
  test::runTcpRanks(2, [&](int r, TcpTransport& t) {
    uint64_t a = 11 + r, b = 0, c = 0;
    t.send(r, 1, &a, 8);  // before the receive: kept as unexpected
    t.recv(r, 1, &b, 8);
    auto req = t.irecv(kAnySource, 2, &c, 8);
    t.send(r, 2, &a, 8);
    t.wait(req);
    EXPECT_EQ(b, a);
    EXPECT_EQ(c, a);
    EXPECT_EQ(req->peer, r);
  });
}

TEST(TcpTransport, OrderlyShutdownOfOnePeerDoesNotBreakTheOthers) {
  auto ts = test::makeTcpTransports(3);
  ts[2].reset();  // rank 2 leaves first, saying goodbye
  test::runOnThreads(2, [&](int r) {
    uint32_t v = r, got = 99;
    for (int i = 0; i < 50; ++i) ts[r]->sendRecv(1 - r, &v, 4, 1 - r, &got, 4, 1);
    EXPECT_EQ(got, static_cast<uint32_t>(1 - r));
    Error e = expectError([&] { ts[r]->recv(2, 1, &got, 4); });
    EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
  });
  test::destroyInParallel(ts);
}

TEST(TcpTransport, MissingRankIsAConnectTimeoutNamingIt) {
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);
  for (int present : {0, 1}) {
    SCOPED_TRACE("only rank " + std::to_string(present) + " starts");
    auto store =
        rendezvous::TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
    TcpTransport::Options o;
    o.rank = present;
    o.size = 2;
    o.connectTimeout = milliseconds(400);
    o.keyPrefix = "alone" + std::to_string(present);
    auto start = Clock::now();
    Error e = expectError([&] { TcpTransport::create(o, *store); });
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_EQ(e.peer(), 1 - present);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(1 - present)),
              std::string::npos)
        << e.what();
    EXPECT_LT(secondsSince(start), 3.0);
  }
}

TEST(TcpTransport, BadArgumentsAreRejected) {
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);
  auto store =
      rendezvous::TcpStore::connect("127.0.0.1", server->port(), milliseconds(5000));
  TcpTransport::Options o;
  o.rank = 2;
  o.size = 2;
  EXPECT_EQ(expectError([&] { TcpTransport::create(o, *store); }).code(),
            ErrorCode::kInvalidArgument);
  o.rank = 0;
  o.connect = {true};
  EXPECT_EQ(expectError([&] { TcpTransport::create(o, *store); }).code(),
            ErrorCode::kInvalidArgument);
  o.connect.clear();
  o.size = 1;
  o.advertiseAddress = "not-an-ip";
  EXPECT_EQ(expectError([&] { TcpTransport::create(o, *store); }).code(),
            ErrorCode::kInvalidArgument);
  o.advertiseAddress.clear();
  auto t = TcpTransport::create(o, *store);  // a world of one
  EXPECT_EQ(expectError([&] { t->isend(0, 1, nullptr, 4); }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(expectError([&] { t->irecv(1, 1, nullptr, 0); }).code(),
            ErrorCode::kInvalidArgument);
  uint32_t a = 5, b = 0;
  t->sendRecv(0, &a, 4, 0, &b, 4, 3);
  EXPECT_EQ(b, 5u);
}

// ------------------------------------------------------------ processes

// A forked peer, killed and reaped when the test ends.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// Forks rank 1 of a 2-rank job that runs `body` on its transport, exits 0,
// and never returns into the test framework.
template <typename Body>
pid_t forkRank1(int storePort, milliseconds timeout, Body body) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 0;
  try {
    auto store =
        rendezvous::TcpStore::connect("127.0.0.1", storePort, milliseconds(10000));
    TcpTransport::Options o;
    o.rank = 1;
    o.size = 2;
    o.timeout = timeout;
    o.connectTimeout = milliseconds(10000);
    auto t = TcpTransport::create(o, *store);
    body(*t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child rank 1: %s\n", e.what());
    code = 1;
  }
  ::_exit(code);
}

std::unique_ptr<TcpTransport> makeRank0(int storePort, milliseconds timeout) {
  auto store = rendezvous::TcpStore::connect("127.0.0.1", storePort, milliseconds(10000));
  TcpTransport::Options o;
  o.rank = 0;
  o.size = 2;
  o.timeout = timeout;
  o.connectTimeout = milliseconds(10000);
  return TcpTransport::create(o, *store);
}

// Both ranks exchange 1 MiB blocks forever (the child) or until an error
// (the parent): returns the parent's error and when it came.
TEST(TcpTransportProcess, KilledPeerIsReportedWithinTwoSeconds) {
  const int port = test::freeLoopbackPort();
  Child child(forkRank1(port, milliseconds(30000), [](TcpTransport& t) {
    std::vector<uint8_t> a(1 << 20, 1), b(1 << 20);
    for (;;) t.sendRecv(0, a.data(), a.size(), 0, b.data(), b.size(), 1);
  }));
  // Started after the fork: forking while its thread runs is unsafe.
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", port);
  auto t = makeRank0(port, milliseconds(30000));
  std::vector<uint8_t> a(1 << 20, 2), b(1 << 20);
  for (int i = 0; i < 20; ++i)
    t->sendRecv(1, a.data(), a.size(), 1, b.data(), b.size(), 1);
  ASSERT_EQ(b[0], 1);
  ::kill(child.pid(), SIGKILL);
  auto killed = Clock::now();
  Error e = expectError([&] {
    for (;;) t->sendRecv(1, a.data(), a.size(), 1, b.data(), b.size(), 1);
  });
  double s = secondsSince(killed);
  EXPECT_EQ(e.code(), ErrorCode::kPeerLost) << e.what();
  EXPECT_EQ(e.peer(), 1);
  EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  EXPECT_LT(s, 2.0);
  // Broken for good: later calls fail with the same error at once.
  Error again = expectError([&] { t->recv(1, 2, b.data(), 8); });
  EXPECT_EQ(again.code(), ErrorCode::kPeerLost);
  EXPECT_THROW(t->progress(), Error);
}

TEST(TcpTransportProcess, StoppedPeerTimesOutNamingIt) {
  const milliseconds kTimeout(1000);
  const int port = test::freeLoopbackPort();
  Child child(forkRank1(port, kTimeout, [](TcpTransport& t) {
    std::vector<uint8_t> a(64 << 10, 1), b(64 << 10);
    for (;;) t.sendRecv(0, a.data(), a.size(), 0, b.data(), b.size(), 1);
  }));
  // Started after the fork: forking while its thread runs is unsafe.
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", port);
  auto t = makeRank0(port, kTimeout);
  std::vector<uint8_t> a(64 << 10, 2), b(64 << 10);
  for (int i = 0; i < 20; ++i)
    t->sendRecv(1, a.data(), a.size(), 1, b.data(), b.size(), 1);
  ::kill(child.pid(), SIGSTOP);
  // The child may be one step ahead: drain until the exchange stalls.
  auto stopped = Clock::now();
  Error e = expectError([&] {
    for (;;) t->sendRecv(1, a.data(), a.size(), 1, b.data(), b.size(), 1);
  });
  double s = secondsSince(stopped);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_EQ(e.peer(), 1);
  EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  EXPECT_GE(s, 0.9);
  EXPECT_LT(s, 4.0);
  ::kill(child.pid(), SIGKILL);
}

TEST(TcpTransportProcess, PeerExitingNormallyMidJobIsPeerLost) {
  const int port = test::freeLoopbackPort();
  Child child(forkRank1(port, milliseconds(30000), [](TcpTransport& t) {
    uint32_t v = 0;
    t.recv(0, 1, &v, 4);
    ::_exit(3);  // gone without closing the transport
  }));
  // Started after the fork: forking while its thread runs is unsafe.
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", port);
  auto t = makeRank0(port, milliseconds(30000));
  uint32_t v = 1;
  t->send(1, 1, &v, 4);
  auto start = Clock::now();
  Error e = expectError([&] { t->recv(1, 2, &v, 4); });
  EXPECT_EQ(e.code(), ErrorCode::kPeerLost) << e.what();
  EXPECT_NE(std::string(e.what()).find("rank 1 closed its connection"), std::string::npos)
      << e.what();
  EXPECT_LT(secondsSince(start), 2.0);
}

}  // namespace
}  // namespace kolo
