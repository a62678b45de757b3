// Tests of the shared-memory transport between forked processes (support/
// shm_transport_fixture.h): a sender or receiver killed (SIGKILL, left a
// zombie) is a lost peer within 2 s, a stopped peer (SIGSTOP) a timeout,
// and the performance between processes. Children are killed when they
// overstay.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "rendezvous/file_store.h"
#include "support/shm_transport_fixture.h"
#include "transport/shm/shm_transport.h"

namespace kolo::transport::shm_fixture {
namespace {

// --- Forked processes ------------------------------------------------------

// A child process running `body`; exits 0 when it returns, 1 on exception.
pid_t forkChild(const std::function<void()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int rc = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      rc = 1;
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  return pid;
}

// Waits up to `timeout` for the child; kills it when it overstays.
int reap(pid_t pid, std::chrono::milliseconds timeout = 20s) {
  auto deadline = Clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(1ms);
  }
  return status;
}

class ShmTransportProcessTest : public ShmTransportTest {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kolo-shm-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(pipe(ready_), 0);
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      reap(child_);
    }
    close(ready_[0]);
    close(ready_[1]);
    std::filesystem::remove_all(dir_);
    ShmTransportTest::TearDown();
  }

  std::unique_ptr<ShmTransport> connect(int rank, std::chrono::milliseconds timeout) {
    FileStore store(dir_);
    auto o = optionsFor(rank, 2, job_);
    o.timeout = timeout;
    return ShmTransport::create(o, store);
  }

  // In the child: tell the parent we reached the point of interest.
  void signalReady() {
    char c = 1;
    if (write(ready_[1], &c, 1) != 1) _exit(3);
  }

  // In the parent: drives progress() until the child signalled.
  bool awaitChild(ShmTransport& t) {
    auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
      t.progress();
      pollfd p{ready_[0], POLLIN, 0};
      if (poll(&p, 1, 1) == 1) {
        char c;
        return read(ready_[0], &c, 1) == 1;
      }
    }
    return false;
  }

  // The child (rank 1) streams part of a 64 MiB message to rank 0, or
  // receives part of one, then stops moving (pause()).
  void startChild(bool childSends) {
    child_ = forkChild([this, childSends] {
      auto t = connect(1, 20s);
      std::vector<uint8_t> buf(64 * kMiB, 0x5a);
      auto r = childSends ? t->isend(0, 1, buf.data(), buf.size())
                          : t->irecv(0, 1, buf.data(), buf.size());
      // At most ~4.5 MiB of the 64 MiB move (kBudget per call).
      for (int i = 0; i < 8; ++i) {
        t->progress();
        usleep(2000);
      }
      signalReady();
      for (;;) pause();
    });
  }

  void expectLostWithin2s(bool childSends, bool reapFirst) {
    startChild(childSends);
    auto t = connect(0, 20s);
    std::vector<uint8_t> buf(64 * kMiB, 0x33);
    auto r = childSends ? t->irecv(1, 1, buf.data(), buf.size())
                        : t->isend(1, 1, buf.data(), buf.size());
    ASSERT_TRUE(awaitChild(*t));
    ASSERT_FALSE(r->done()) << "the transfer finished before the kill";
    ASSERT_EQ(kill(child_, SIGKILL), 0);
    if (reapFirst) {
      reap(child_);
      child_ = -1;
    }
    auto start = Clock::now();
    try {
      t->wait(r);
      FAIL() << "wait returned after the peer was killed";
    } catch (const Error& e) {
      double s = seconds(Clock::now() - start);
      EXPECT_EQ(e.code(), ErrorCode::kPeerLost) << e.what();
      EXPECT_EQ(e.peer(), 1);
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
      EXPECT_LT(s, 2.0) << e.what();
      std::printf("peer lost after %.0f ms: %s\n", s * 1e3, e.what());
    }
    // The transport is broken: later requests fail with the same error.
    uint64_t v = 0;
    auto later = t->isend(1, 2, &v, sizeof v);
    try {
      t->wait(later);
      FAIL() << "a request after the loss succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
    }
  }

  std::string dir_;
  int ready_[2] = {-1, -1};
  pid_t child_ = -1;
};

TEST_F(ShmTransportProcessTest, KilledSenderIsPeerLostWithin2s) {
  expectLostWithin2s(/*childSends=*/true, /*reapFirst=*/true);
}

TEST_F(ShmTransportProcessTest, KilledZombieSenderIsPeerLostWithin2s) {
  expectLostWithin2s(/*childSends=*/true, /*reapFirst=*/false);
}

TEST_F(ShmTransportProcessTest, KilledZombieReceiverIsPeerLostWithin2s) {
  expectLostWithin2s(/*childSends=*/false, /*reapFirst=*/false);
}

TEST_F(ShmTransportProcessTest, StoppedPeerIsTimeout) {
  startChild(/*childSends=*/true);
  auto t = connect(0, 1000ms);
  std::vector<uint8_t> buf(64 * kMiB);
  auto r = t->irecv(1, 1, buf.data(), buf.size());
  ASSERT_TRUE(awaitChild(*t));
  ASSERT_EQ(kill(child_, SIGSTOP), 0);
  auto start = Clock::now();
  try {
    t->wait(r);
    FAIL() << "wait returned while the peer was stopped";
  } catch (const Error& e) {
    double s = seconds(Clock::now() - start);
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_EQ(e.peer(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_GE(s, 0.9);
    EXPECT_LT(s, 3.0);
    std::printf("timed out after %.0f ms: %s\n", s * 1e3, e.what());
  }
}

// Measures (and prints) bandwidth and latency between two processes.
// Figures only: the machine is shared, so nothing is asserted about them;
// each figure is the best of several repetitions (and the mean), and the
// ping-pong stops after about a second.
TEST_F(ShmTransportProcessTest, Performance) {
  const size_t bytes = 64 * kMiB;
  const int iters = 4;
  const uint64_t kStop = ~uint64_t(0);
  child_ = forkChild([&] {
    auto t = connect(1, 20s);
    std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
    for (int i = 0; i < iters + 1; ++i) t->send(0, 1, a.data(), bytes);  // one way
    for (int i = 0; i < iters + 1; ++i)                                  // both ways
      t->sendRecv(0, a.data(), bytes, 0, b.data(), bytes, 2);
    for (uint64_t v = 0;;) {
      t->recv(0, 3, &v, 8);
      if (v == kStop) break;
      t->send(0, 3, &v, 8);
    }
  });
  auto t = connect(0, 20s);
  std::vector<uint8_t> a(bytes, 3), b(bytes, 4), c(bytes, 5);

  // Best and mean wall seconds of `reps` runs of f, and the mean CPU
  // seconds this process spent (waiting included): bytes per CPU-second
  // shows the cost of a transfer apart from how busy the machine is.
  struct Times {
    double best = 1e9, mean = 0, cpu = 0;
  };
  auto cpuNow = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  auto measure = [&](int reps, const std::function<void()>& f) {
    Times t;
    double c0 = cpuNow();
    for (int i = 0; i < reps; ++i) {
      auto t0 = Clock::now();
      f();
      double s = seconds(Clock::now() - t0);
      t.best = std::min(t.best, s);
      t.mean += s / reps;
    }
    t.cpu = (cpuNow() - c0) / reps;
    return t;
  };
  const double gb = double(bytes) / 1e9;

  auto copy = measure(iters, [&] { std::memcpy(c.data(), a.data(), bytes); });
  t->recv(1, 1, b.data(), bytes);  // warm-up
  auto oneWay = measure(iters, [&] { t->recv(1, 1, b.data(), bytes); });
  t->sendRecv(1, a.data(), bytes, 1, b.data(), bytes, 2);
  auto both =
      measure(iters, [&] { t->sendRecv(1, a.data(), bytes, 1, b.data(), bytes, 2); });

  const int batch = 100;
  double bestRtt = 1e9, totalTime = 0;
  long pings = 0;
  for (uint64_t v = 0; pings < 100000 && totalTime < 1.0; pings += batch) {
    auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) {
      t->send(1, 3, &v, 8);
      t->recv(1, 3, &v, 8);
    }
    double s = seconds(Clock::now() - t0);
    totalTime += s;
    bestRtt = std::min(bestRtt, s / batch);
  }
  t->send(1, 3, &kStop, 8);

  // Both copies in one thread (rank 0 to itself): the CPU cost of moving a
  // byte through a ring, whatever the machine's load.
  auto self = measure(iters, [&] {
    auto r = t->irecv(0, 4, b.data(), bytes);
    t->wait(t->isend(0, 4, a.data(), bytes));
    t->wait(r);
  });

  EXPECT_EQ(reap(child_), 0);
  child_ = -1;
  std::printf(
      "shm transport, 2 processes (best / mean wall; per CPU-second of rank 0):\n"
      "  memcpy 64 MiB          %6.2f / %6.2f GB/s; %6.2f GB/cpu-s\n"
      "  64 MiB one way (recv)  %6.2f / %6.2f GB/s; %6.2f GB/cpu-s\n"
      "  64 MiB both ways       %6.2f / %6.2f GB/s per direction; %6.2f GB/cpu-s\n"
      "  8 B ping-pong one way  %6.2f / %6.2f us (%ld round trips)\n"
      "  64 MiB to itself (both copies in one thread): %6.2f GB/cpu-s\n",
      gb / copy.best, gb / copy.mean, gb / copy.cpu, gb / oneWay.best, gb / oneWay.mean,
      gb / oneWay.cpu, gb / both.best, gb / both.mean, gb / both.cpu, bestRtt * 1e6 / 2,
      totalTime / pings * 1e6 / 2, pings, gb / self.cpu);
}

}  // namespace
}  // namespace kolo::transport::shm_fixture
