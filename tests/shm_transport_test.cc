// Tests of the shared-memory transport's messaging: ranks as threads of
// this process, each with its own ShmTransport (support/
// shm_transport_fixture.h): ping-pong, self and empty messages, per-tag
// order, any source, unexpected messages, size mismatches, abort notices,
// bad arguments, 64 MiB both ways, all pairs of eight ranks, and set-ups
// that fail without leaving segments. Refused segments are tested in
// shm_segment_check_test, peer death and silence (forked processes) in
// shm_transport_process_test. Every test is bounded: transports run with
// short timeouts.
#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "support/shm_transport_fixture.h"

namespace kolo::transport::shm_fixture {
namespace {

TEST_F(ShmTransportTest, PingPong) {
  runRanks(2, [](ShmTransport& t) {
    const int other = 1 - t.rank();
    for (uint64_t i = 0; i < 2000; ++i) {
      uint64_t out = i * 2 + t.rank(), in = 0;
      if (t.rank() == 0) {
        t.send(other, 5, &out, sizeof out);
        t.recv(other, 5, &in, sizeof in);
      } else {
        t.recv(other, 5, &in, sizeof in);
        t.send(other, 5, &out, sizeof out);
      }
      ASSERT_EQ(in, i * 2 + other);
    }
  });
}

// The ranks create their transports again on the same store and prefix
// (as a re-initialised job would): the second set must not pick up the
// first set's store entries.
TEST_F(ShmTransportTest, RecreateOnSameStore) {
  for (int generation = 0; generation < 3; ++generation) {
    runRanks(3, [&](ShmTransport& t) {
      uint64_t out = t.rank() * 10 + generation, in = 0;
      int next = (t.rank() + 1) % 3, prev = (t.rank() + 2) % 3;
      t.sendRecv(next, &out, 8, prev, &in, 8, 1);
      ASSERT_EQ(in, static_cast<uint64_t>(prev * 10 + generation));
    });
  }
}

TEST_F(ShmTransportTest, SelfAndZeroByteMessages) {
  runRanks(1, [](ShmTransport& t) {
    std::vector<uint8_t> big = makeMessage(0, 0, 0, 3 * kMiB), got(big.size());
    auto r = t.irecv(0, 1, got.data(), got.size());
    auto s = t.isend(0, 1, big.data(), big.size());
    auto z = t.isend(0, 2, nullptr, 0);
    auto zr = t.irecv(0, 2, nullptr, 0);
    RequestPtr all[] = {r, s, z, zr};
    t.waitAll(all);
    EXPECT_EQ(firstBad(got, 0, 0, 0), -1);
    EXPECT_EQ(zr->peer, 0);
  });
}

// Messages of one tag arrive in order even when interleaved with another
// tag that the receiver reads later (so those go through the unexpected
// path), and with sizes below and above the ring.
TEST_F(ShmTransportTest, PerTagOrdering) {
  const std::vector<size_t> sizes = {8, 1, 0, 4096, 70000, 3 * kMiB, 24, 1 * kMiB + 3};
  runRanks(
      2,
      [&](ShmTransport& t) {
        if (t.rank() == 0) {
          std::vector<std::vector<uint8_t>> bufs;
          std::vector<RequestPtr> reqs;
          for (int i = 0; i < static_cast<int>(sizes.size()); ++i) {
            for (Tag tag : {Tag(10), Tag(20)}) {
              bufs.push_back(makeMessage(0, 1, i + static_cast<int>(tag), sizes[i]));
              reqs.push_back(t.isend(1, tag, bufs.back().data(), sizes[i]));
            }
          }
          t.waitAll(reqs);
        } else {
          // All of tag 20 first, then tag 10.
          for (Tag tag : {Tag(20), Tag(10)}) {
            for (int i = 0; i < static_cast<int>(sizes.size()); ++i) {
              std::vector<uint8_t> got(sizes[i]);
              t.recv(0, tag, got.data(), got.size());
              ASSERT_EQ(firstBad(got, 0, 1, i + static_cast<int>(tag)), -1)
                  << "tag " << tag << " message " << i;
            }
          }
        }
      },
      [](ShmTransport::Options& o) { o.ringBytes = 64 << 10; });
}

TEST_F(ShmTransportTest, AnySource) {
  const int n = 4;
  runRanks(n, [&](ShmTransport& t) {
    if (t.rank() == 0) {
      std::vector<int> seen(n, 0);
      // Three messages from each sender; per sender they arrive in order.
      for (int k = 0; k < 3 * (n - 1); ++k) {
        uint64_t v = 0;
        auto r = t.irecv(kAnySource, 3, &v, sizeof v);
        t.wait(r);
        ASSERT_GE(r->peer, 1);
        ASSERT_LT(r->peer, n);
        ASSERT_EQ(v, static_cast<uint64_t>(r->peer) * 100 + seen[r->peer]);
        ++seen[r->peer];
      }
      for (int p = 1; p < n; ++p) EXPECT_EQ(seen[p], 3) << "sender " << p;
    } else {
      for (uint64_t k = 0; k < 3; ++k) {
        uint64_t v = t.rank() * 100 + k;
        t.send(0, 3, &v, sizeof v);
      }
    }
  });
}

// A large message with a tag nobody receives yet must not block a later
// message with another tag; the large one is buffered and delivered later,
// including when its receive is posted while it is still streaming in.
TEST_F(ShmTransportTest, UnexpectedMessages) {
  const size_t big = 5 * kMiB;
  runRanks(
      2,
      [&](ShmTransport& t) {
        if (t.rank() == 0) {
          auto a = makeMessage(0, 1, 1, big), b = makeMessage(0, 1, 2, 100),
               c = makeMessage(0, 1, 3, big);
          auto ra = t.isend(1, 1, a.data(), a.size());
          auto rb = t.isend(1, 2, b.data(), b.size());
          auto rc = t.isend(1, 3, c.data(), c.size());
          RequestPtr all[] = {ra, rb, rc};
          t.waitAll(all);
        } else {
          std::vector<uint8_t> b(100), a(big), c(big);
          t.recv(0, 2, b.data(), b.size());  // behind 5 MiB of tag 1
          EXPECT_EQ(firstBad(b, 0, 1, 2), -1);
          t.recv(0, 1, a.data(), a.size());  // from the unexpected buffer
          EXPECT_EQ(firstBad(a, 0, 1, 1), -1);
          // Tag 3 may be partly buffered by now; the rest streams in directly.
          t.recv(0, 3, c.data(), c.size());
          EXPECT_EQ(firstBad(c, 0, 1, 3), -1);
        }
      },
      [](ShmTransport::Options& o) { o.ringBytes = 256 << 10; });
}

TEST_F(ShmTransportTest, SizeMismatchNamesSenderTagAndSizes) {
  runRanks(2, [](ShmTransport& t) {
    if (t.rank() == 1) {
      uint8_t data[16] = {1, 2, 3};
      t.send(0, 7, data, 16);  // posted receive of the wrong size
      t.send(0, 8, data, 16);  // unexpected, then a wrong-size receive
      uint64_t v = 42;
      t.send(0, 9, &v, sizeof v);
      return;
    }
    uint8_t small[8];
    auto expectMismatch = [&](Tag tag) {
      try {
        t.recv(1, tag, small, sizeof small);
        ADD_FAILURE() << "no mismatch error for tag " << tag;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kMismatch);
        EXPECT_EQ(e.peer(), 1);
        std::string m = e.what();
        EXPECT_NE(m.find("from rank 1"), std::string::npos) << m;
        EXPECT_NE(m.find("tag " + std::to_string(tag)), std::string::npos) << m;
        EXPECT_NE(m.find("16 bytes"), std::string::npos) << m;
        EXPECT_NE(m.find("expects 8 bytes"), std::string::npos) << m;
      }
    };
    expectMismatch(7);
    // Let tag 8 arrive before its receive is posted.
    uint64_t v = 0;
    auto r9 = t.irecv(1, 9, &v, sizeof v);
    t.wait(r9);
    expectMismatch(8);
    EXPECT_EQ(v, 42u);  // the transport still works
  });
}

// A rank that fails (abort()) while a peer waits on it: the peer fails at
// once with the same diagnosis, not after KOLO_TIMEOUT.
TEST_F(ShmTransportTest, AbortNoticeFailsAWaitingPeerWithTheSameDiagnosis) {
  std::atomic<bool> done{false};
  runRanks(2, [&](ShmTransport& t) {
    if (t.rank() == 0) {
      std::this_thread::sleep_for(100ms);
      t.abort(Error(ErrorCode::kPeerLost, "rank 2 closed its connection to rank 0", 2));
      while (!done) std::this_thread::sleep_for(1ms);  // alive, as a failing rank is
      return;
    }
    uint64_t v = 0;
    try {
      t.recv(0, 3, &v, sizeof v);
      ADD_FAILURE() << "the receive from the aborted rank completed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
      EXPECT_EQ(e.peer(), 2);
      EXPECT_EQ(std::string(e.what()),
                "rank 2 closed its connection to rank 0 (reported by rank 0)");
    }
    done = true;  // (a timeout would have been kTimeout, after 20 s)
  });
}

TEST_F(ShmTransportTest, InvalidArguments) {
  runRanks(
      2,
      [](ShmTransport& t) {
        uint64_t v = 0;
        auto expectInvalid = [&](const std::function<void()>& f, const char* what) {
          try {
            f();
            ADD_FAILURE() << "no error for " << what;
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
            EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
          }
        };
        expectInvalid([&] { t.isend(2, 0, &v, 8); }, "send to a rank on another host");
        expectInvalid([&] { t.irecv(3, 0, &v, 8); },
                      "receive from a rank on another host");
        expectInvalid([&] { t.isend(9, 0, &v, 8); }, "send out of range");
        expectInvalid([&] { t.isend(1 - t.rank(), 0, nullptr, 8); }, "null send buffer");
      },
      [](ShmTransport::Options& o) {
        o.size = 4;  // ranks 2 and 3 live elsewhere
        o.localRanks = {0, 1};
      });
}

TEST_F(ShmTransportTest, Exchange64MiBBothWays) {
  const size_t bytes = 64 * kMiB;
  runRanks(2, [&](ShmTransport& t) {
    const int other = 1 - t.rank();
    auto out = makeMessage(t.rank(), other, 0, bytes);
    std::vector<uint8_t> in(bytes);
    auto start = Clock::now();
    t.sendRecv(other, out.data(), bytes, other, in.data(), bytes, 77);
    double s = seconds(Clock::now() - start);
    EXPECT_EQ(firstBad(in, other, t.rank(), 0), -1);
    if (t.rank() == 0) {
      std::printf("64 MiB sendRecv both ways (threads, first touch included): %.1f ms\n",
                  s * 1e3);
    }
  });
}

// More ranks than cores, every pair exchanging in both directions at once
// with sizes below and above the ring (256 KiB here), twice: completes (no
// starvation). Buffers are allocated once: first-touch page faults are slow
// in some virtual machines and are not what this test is about.
TEST_F(ShmTransportTest, EightRanksAllPairs) {
  const int n = 8;
  const std::vector<size_t> sizes = {8, 100 << 10, 600 << 10};
  const size_t maxBytes = sizes.back();
  auto start = Clock::now();
  runRanks(
      n,
      [&](ShmTransport& t) {
        const int me = t.rank();
        std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(maxBytes)),
            in(n, std::vector<uint8_t>(maxBytes));
        for (int round = 0; round < 2 * static_cast<int>(sizes.size()); ++round) {
          const size_t bytes = sizes[round % sizes.size()];
          std::vector<RequestPtr> reqs;
          for (int p = 0; p < n; ++p)
            reqs.push_back(t.irecv(p, round, in[p].data(), bytes));
          for (int k = 0; k < n; ++k) {
            int p = (me + k) % n;
            for (size_t i = 0; i < bytes; ++i) out[p][i] = pattern(me, p, round, i);
            reqs.push_back(t.isend(p, round, out[p].data(), bytes));
          }
          t.waitAll(reqs);
          for (int p = 0; p < n; ++p) {
            for (size_t i = 0; i < bytes; ++i) {
              ASSERT_EQ(in[p][i], pattern(p, me, round, i))
                  << "byte " << i << " from " << p << " round " << round;
            }
          }
        }
      },
      [](ShmTransport::Options& o) { o.ringBytes = 256 << 10; });
  std::printf("8 ranks all-pairs, twice (8 B, 100 KiB, 600 KiB): %.2f s\n",
              seconds(Clock::now() - start));
}

TEST_F(ShmTransportTest, MissingPeerAtConnectTimesOutAndLeavesNothing) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  auto store = TcpStore::connect("127.0.0.1", server->port(), 10s);
  auto o = optionsFor(0, 2, job_);
  o.connectTimeout = 300ms;
  auto start = Clock::now();
  try {
    ShmTransport::create(o, *store);
    FAIL() << "create succeeded without rank 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  }
  EXPECT_LT(seconds(Clock::now() - start), 5.0);
}

// A local peer killed after creating its segment but before publishing it
// (so nobody knows the name): a failed set-up removes that segment, named
// after the peer's rank and its pid, which no longer exists. The TearDown
// check finds nothing of the job left in /dev/shm.
TEST_F(ShmTransportTest, FailedSetUpRemovesTheSegmentOfADeadPeer) {
  const std::string orphan = "/kolo-" + job_ + "-shm-r1-";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string name = orphan + std::to_string(getpid()) + "-0-beef";
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    (void)!write(ready[1], "x", 1);
    _exit(fd >= 0 ? 0 : 1);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  close(ready[1]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(segmentsOf(job_).size(), 1u);
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  auto store = TcpStore::connect("127.0.0.1", server->port(), 10s);
  auto o = optionsFor(0, 2, job_);
  o.connectTimeout = 300ms;
  EXPECT_THROW(ShmTransport::create(o, *store), Error);
}

}  // namespace
}  // namespace kolo::transport::shm_fixture
