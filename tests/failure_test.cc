// Dead and silent peers, with ranks as real processes: a rank killed with
// SIGKILL in the middle of allreduces is an error naming it on every other
// rank within 2 s; a rank stopped with SIGSTOP is an error naming it within
// the timeout. Nothing hangs. Each for shared memory and for tcp.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
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

INSTANTIATE_TEST_SUITE_P(Transports, FailureTest, ::testing::Values("auto", "tcp"));

}  // namespace
}  // namespace kolo
