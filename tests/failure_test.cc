// Dead and silent peers, with ranks as real processes: a rank killed with
// SIGKILL in the middle of allreduces is an error naming it on every other
// rank within 2 s; a rank stopped with SIGSTOP is an error naming it within
// the timeout; ranks in different collectives fail with the mismatch. Nothing
// hangs. Each for shared memory and for tcp. And a peer that finished a
// shared-memory step before it exited is not reported dead.
#include <gtest/gtest.h>
#include <signal.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "api/communicator_impl.h"
#include "support/process_ranks.h"

namespace kolo {
namespace {

using std::chrono::milliseconds;

// Each rank: build a communicator, signal readiness through an allreduce,
// then loop 4 MiB allreduces until an error; exit with the error code and
// print the message.
int allreduceForever(int rank, int size, const std::string& rendezvous,
                     const std::string& transport, double timeoutSeconds) {
  try {
    auto c = test::connectRank(rank, size, rendezvous, timeoutSeconds, transport);
    std::vector<float> buf(1 << 20, 1.0f);
    AllreduceOptions o;
    o.send = o.recv = buf.data();
    o.count = buf.size();
    for (long i = 0;; ++i) {
      c->allreduce(o);
      if (i == 0) test::sayRank(rank, "running");
    }
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
  return 0;
}

// Every rank finished its first allreduce (and so its set-up): slow
// builds (sanitizers) and loaded machines take longer.
void waitRunning(test::ProcessRanks& ranks) {
  ASSERT_TRUE(ranks.waitForOutput("running", milliseconds(60000)))
      << "the ranks did not start their allreduce loop";
}

class FailureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FailureTest, KilledRankIsNamedOnEveryOtherRankWithinTwoSeconds) {
  const int n = 3;
  const std::string transport = GetParam();
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return allreduceForever(rank, n, address, transport, 30);
  });
  waitRunning(ranks);
  const double killedAt = ranks.elapsed();
  ranks.signal(1, SIGKILL);
  auto outcomes = ranks.waitAll(milliseconds(10000));
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  for (int r : {0, 2}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_TRUE(o.exited) << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kPeerLost)) << o.output;
    EXPECT_NE(o.output.find("rank 1"), std::string::npos) << o.output;
    EXPECT_LT(o.seconds - killedAt, 2.0) << "rank " << r << " took too long:\n"
                                         << o.output;
  }
}

TEST_P(FailureTest, StoppedRankTimesOutNamingIt) {
  const int n = 3;
  const double timeout = 2.0;
  const std::string transport = GetParam();
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return allreduceForever(rank, n, address, transport, timeout);
  });
  waitRunning(ranks);
  const double stoppedAt = ranks.elapsed();
  ranks.signal(2, SIGSTOP);
  auto outcomes = ranks.waitAll(milliseconds(static_cast<int>((timeout + 4) * 1000)));
  for (int r : {0, 1}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kTimeout)) << o.output;
    EXPECT_NE(o.output.find("rank 2"), std::string::npos) << o.output;
    EXPECT_LT(o.seconds - stoppedAt, timeout + 3.0) << o.output;
  }
  EXPECT_TRUE(outcomes[2].hung);  // it was stopped; the harness killed it
}

// Rank 1 leaves after one allreduce (its communicator destroyed: the
// finalize path; or exit() without destroying it) while ranks 0 and 2 wait
// in the next allreduce: they fail at once, with one message naming rank 1.
int leaveEarly(int rank, int size, const std::string& rendezvous,
               const std::string& transport, bool finalize) {
  auto c = test::connectRank(rank, size, rendezvous, 20, transport);
  std::vector<float> buf(1 << 10, 1.0f);
  AllreduceOptions o;
  o.send = o.recv = buf.data();
  o.count = buf.size();
  c->allreduce(o);
  if (rank == 1) {
    if (finalize) {
      c.reset();
      return 0;
    }
    std::exit(0);  // static destructors and atexit handlers only
  }
  try {
    c->allreduce(o);
    std::printf("rank %d: no error\n", rank);
    return 0;
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
}

void expectSameDeparture(const std::vector<test::RankOutcome>& outcomes) {
  EXPECT_TRUE(outcomes[1].exited && outcomes[1].exitCode == 0) << outcomes[1].output;
  std::string messages[3];
  for (int r : {0, 2}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kPeerLost)) << o.output;
    EXPECT_NE(o.output.find("rank 1 left the job"), std::string::npos) << o.output;
    // Well under KOLO_TIMEOUT (20 s): the goodbye, not a timeout.
    EXPECT_LT(o.seconds, 10.0) << "rank " << r << ":\n" << o.output;
    auto colon = o.output.find(": ");
    messages[r] = colon == std::string::npos ? o.output : o.output.substr(colon + 2);
  }
  EXPECT_EQ(messages[0], messages[2]);
}

TEST_P(FailureTest, RankThatFinalizesEarlyFailsTheOthersAtOnce) {
  const std::string transport = GetParam();
  test::ProcessRanks ranks(3, [&](int rank, const std::string& address) {
    return leaveEarly(rank, 3, address, transport, true);
  });
  expectSameDeparture(ranks.waitAll(milliseconds(30000)));
}

TEST_P(FailureTest, RankThatExitsEarlyFailsTheOthersAtOnce) {
  const std::string transport = GetParam();
  test::ProcessRanks ranks(3, [&](int rank, const std::string& address) {
    return leaveEarly(rank, 3, address, transport, false);
  });
  expectSameDeparture(ranks.waitAll(milliseconds(30000)));
}

// Rank 0 calls allreduce while the others call barrier: every rank fails
// with the mismatch naming both calls, over tcp as over shared memory (the
// barrier is its descriptor exchange, which rank 0's allreduce meets),
// instead of waiting for messages of tags the other side never sends.
TEST_P(FailureTest, BarrierAgainstAllreduceIsAMismatchNamingBoth) {
  const std::string transport = GetParam();
  const int n = 3;
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    auto c = test::connectRank(rank, n, address, 60, transport);
    try {
      if (rank == 0) {
        std::vector<float> buf(16, 1.0f);
        AllreduceOptions o;
        o.send = o.recv = buf.data();
        o.count = buf.size();
        c->allreduce(o);
      } else {
        c->barrier();
      }
    } catch (const Error& e) {
      test::exitWithError(rank, e);
    }
    std::printf("rank %d: no error\n", rank);
    std::fflush(stdout);
    _exit(0);
    return 0;
  });
  // Far below KOLO_TIMEOUT (60 s): only the mismatch ends the ranks.
  auto outcomes = ranks.waitAll(milliseconds(20000));
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.hung) << "rank " << o.rank << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kMismatch)) << o.output;
    EXPECT_NE(o.output.find("rank 0 called allreduce"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("rank 1 called barrier"), std::string::npos) << o.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, FailureTest, ::testing::Values("auto", "tcp"));

// True once `pid` has exited (a zombie: the test has not reaped it yet).
bool exited(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

// A peer that completed a shared-memory step and then exited (as ranks do
// after the closing barrier) is not "dead during the step" for a rank that
// was slow to wake up: rank 1 waits in a barrier and is stopped; rank 0
// arrives, completes the barrier and exits; rank 1, continued, finds rank 0
// dead and its step published, and passes.
TEST(ShmStepTest, PeerThatPublishedThenExitedIsNotLost) {
  const std::string go =
      ::testing::TempDir() + "failure_test_go_" + std::to_string(getpid());
  std::filesystem::remove(go);
  test::ProcessRanks ranks(2, [&](int rank, const std::string& address) {
    auto c = test::connectRank(rank, 2, address, 30, "auto");
    try {
      c->barrier();
      test::sayRank(rank, "ready");
      if (rank == 0) {
        while (!std::filesystem::exists(go)) {
          std::this_thread::sleep_for(milliseconds(5));
        }
      }
      c->barrier();
    } catch (const Error& e) {
      test::exitWithError(rank, e);
    }
    test::sayRank(rank, "passed");
    _exit(0);  // no closing step: rank 0 is gone
    return 0;
  });
  ASSERT_TRUE(ranks.waitForOutput("ready", milliseconds(60000)));
  // Rank 1 is asleep in the barrier's wait by now; stopped there, it cannot
  // see rank 0's step before rank 0 is gone.
  std::this_thread::sleep_for(milliseconds(300));
  ranks.signal(1, SIGSTOP);
  std::ofstream(go) << "go\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!exited(ranks.pid(0)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_TRUE(exited(ranks.pid(0)));
  // Past the waiter's 100 ms between liveness checks.
  std::this_thread::sleep_for(milliseconds(200));
  ranks.signal(1, SIGCONT);
  auto outcomes = ranks.waitAll(milliseconds(20000));
  std::filesystem::remove(go);
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.hung) << "rank " << o.rank << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, 0) << "rank " << o.rank << ":\n" << o.output;
    EXPECT_NE(o.output.find("passed"), std::string::npos) << o.output;
  }
}

// A rank stopped while the others work on a team split from the world (as
// the runtime's team is): they time out on the team, then release the
// world, whose closing step does not wait another KOLO_TIMEOUT for the rank
// they already found silent (a stopped elastic worker is left after
// KOLO_TIMEOUT + the join window, docs/elastic.md). Had it waited, the
// step would have failed with a "shutdown barrier failed" warning.
TEST(FamilyLossTest, WorldClosesWithoutWaitingForThePeerItsTeamLost) {
  const double timeout = 2.0;
  test::ProcessRanks ranks(3, [&](int rank, const std::string& address) {
    auto world = test::connectRank(rank, 3, address, timeout, "auto");
    try {
      auto team = world->split({0, 1, 2}, "work");
      std::vector<float> buf(1024, 1.0f);
      AllreduceOptions o;
      o.send = o.recv = buf.data();
      o.count = buf.size();
      for (long i = 0;; ++i) {
        team->allreduce(o);
        if (i == 0) test::sayRank(rank, "running");
      }
    } catch (const Error& e) {
      std::printf("rank %d: the team failed: %s\n", rank, e.what());
    }
    world.reset();  // the closing step
    test::sayRank(rank, "closed");
    return 0;
  });
  waitRunning(ranks);
  ranks.signal(2, SIGSTOP);
  // Each survivor: the team's timeout, then the world's release; 15 s is
  // far more than one KOLO_TIMEOUT (2 s) but lets a waiting closing step
  // end and say so.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!(exited(ranks.pid(0)) && exited(ranks.pid(1))) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ranks.signal(2, SIGKILL);
  auto outcomes = ranks.waitAll(milliseconds(5000));
  for (int r : {0, 1}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, 0) << o.output;
    EXPECT_NE(o.output.find("the team failed"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("closed"), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("shutdown barrier failed"), std::string::npos) << o.output;
  }
}

}  // namespace
}  // namespace kolo
