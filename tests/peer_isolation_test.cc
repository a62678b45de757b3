// Per-peer failure isolation (transport.h) with ranks as real processes:
// 3 ranks, rank 2 SIGKILLed; with isolation on, rank 0's receive from rank 2
// and its pending receive from any rank fail naming rank 2, a send to rank 2
// fails at once, and ranks 0 and 1 keep exchanging correct messages
// afterwards (any-source receives included). Without isolation the same
// loss breaks the transport for every later request. Over shared memory
// and over tcp, through the communicator's point-to-point transport (the
// router the parameter servers use).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "api/communicator_impl.h"
#include "support/process_ranks.h"

namespace kolo {
namespace {

using std::chrono::milliseconds;
using transport::kAnySource;
using transport::Tag;

constexpr Tag kReadyTag = 1;
constexpr Tag kFromTwoTag = 2;
constexpr Tag kAnyTag = 3;
constexpr Tag kRoundTag = 4;
constexpr int kRounds = 50;
constexpr int kFloats = 4096;

[[noreturn]] void fail(int rank, const std::string& what) {
  std::printf("rank %d FAILED: %s\n", rank, what.c_str());
  std::fflush(stdout);
  _exit(1);
}

// The error a request failed with, or "" when it succeeded.
std::string errorOf(transport::Transport& t, const transport::RequestPtr& r,
                    ErrorCode* code, int* peer) {
  try {
    t.wait(r);
    return "";
  } catch (const Error& e) {
    *code = e.code();
    *peer = e.peer();
    return e.what();
  }
}

void expectLostTwo(int rank, transport::Transport& t, const transport::RequestPtr& r,
                   const char* what) {
  ErrorCode code{};
  int peer = -1;
  std::string message = errorOf(t, r, &code, &peer);
  if (message.empty()) fail(rank, std::string(what) + " succeeded");
  if (code != ErrorCode::kPeerLost || peer != 2 ||
      message.find("rank 2") == std::string::npos) {
    fail(rank, std::string(what) + " failed with code " +
                   std::to_string(static_cast<int>(code)) + " naming rank " +
                   std::to_string(peer) + ": " + message);
  }
  std::printf("rank %d: %s failed as expected: %s\n", rank, what, message.c_str());
}

// Ranks 0 and 1 swap kFloats floats, kRounds times, and check every value.
void exchangeRounds(int rank, transport::Transport& t) {
  const int other = 1 - rank;
  std::vector<float> out(kFloats), in(kFloats);
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kFloats; ++i)
      out[i] = static_cast<float>(rank * 1e6 + round * 1e3 + i);
    t.sendRecv(other, out.data(), out.size() * 4, other, in.data(), in.size() * 4,
               kRoundTag);
    for (int i = 0; i < kFloats; ++i) {
      const float want = static_cast<float>(other * 1e6 + round * 1e3 + i);
      if (in[i] != want) {
        fail(rank, "round " + std::to_string(round) + " element " + std::to_string(i) +
                       " is " + std::to_string(in[i]) + ", expected " +
                       std::to_string(want));
      }
    }
  }
}

void rankZero(transport::Transport& t) {
  float dummy = 0;
  auto fromAny = t.irecv(kAnySource, kAnyTag, &dummy, sizeof(dummy));
  auto fromTwo = t.irecv(2, kFromTwoTag, &dummy, sizeof(dummy));
  expectLostTwo(0, t, fromTwo, "the receive from rank 2");
  expectLostTwo(0, t, fromAny, "the pending receive from any rank");
  if (!t.peerLost(2) || t.peerLost(1) || t.lostPeers() != std::vector<int>{2}) {
    fail(0, "peerLost/lostPeers do not say exactly rank 2");
  }
  expectLostTwo(0, t, t.isend(2, kFromTwoTag, &dummy, sizeof(dummy)), "a send to rank 2");
  exchangeRounds(0, t);
  // A receive from any rank after the loss matches the living peer.
  int value = 0;
  auto any = t.irecv(kAnySource, kAnyTag, &value, sizeof(value));
  t.wait(any);
  if (any->peer != 1 || value != 42) {
    fail(0, "any-source receive got " + std::to_string(value) + " from rank " +
                std::to_string(any->peer) + ", expected 42 from rank 1");
  }
}

int isolatedRank(int rank, const std::string& rendezvous, const std::string& mode,
                 bool isolate) {
  // Never destroyed: its closing step would need rank 2.
  api::CommunicatorImpl* c = test::connectRank(rank, 3, rendezvous, 20, mode).release();
  transport::Transport& t = c->pointToPoint();
  if (isolate) t.setIsolatePeerFailures(true);
  int one = 1;
  // Everyone linked (ready messages around the ring) before the kill.
  t.sendRecv((rank + 1) % 3, &one, sizeof(one), (rank + 2) % 3, &one, sizeof(one),
             kReadyTag);
  test::sayRank(rank, "ready");
  try {
    if (rank == 2) {
      for (;;) pause();  // until SIGKILL
    } else if (!isolate) {
      float dummy = 0;
      auto fromTwo = t.irecv(2, kFromTwoTag, &dummy, sizeof(dummy));
      t.wait(fromTwo);  // rank 1 also waits for rank 2 here
      fail(rank, "the receive from rank 2 succeeded");
    } else if (rank == 0) {
      rankZero(t);
    } else {
      exchangeRounds(1, t);
      int value = 42;
      t.send(0, kAnyTag, &value, sizeof(value));
    }
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
  test::sayRank(rank, "done");
  _exit(0);
}

class PeerIsolationTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PeerIsolationTest, SurvivorsKeepTalkingAfterAPeerIsKilled) {
  const std::string mode = GetParam();
  test::ProcessRanks ranks(3, [&](int rank, const std::string& address) {
    return isolatedRank(rank, address, mode, /*isolate=*/true);
  });
  ASSERT_TRUE(ranks.waitForOutput("ready", milliseconds(60000)));
  ranks.signal(2, SIGKILL);
  auto outcomes = ranks.waitAll(milliseconds(40000));
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  for (int r : {0, 1}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_TRUE(o.exited && o.exitCode == 0) << "rank " << r << ":\n" << o.output;
    EXPECT_NE(o.output.find("rank " + std::to_string(r) + " done"), std::string::npos)
        << o.output;
  }
  EXPECT_NE(outcomes[0].output.find("the receive from rank 2 failed as expected"),
            std::string::npos)
      << outcomes[0].output;
}

// The default: the loss of rank 2 fails the receive from it (kPeerLost
// naming it) and breaks the transport, so the survivors do not go on.
TEST_P(PeerIsolationTest, WithoutIsolationTheLossBreaksTheTransport) {
  const std::string mode = GetParam();
  test::ProcessRanks ranks(3, [&](int rank, const std::string& address) {
    return isolatedRank(rank, address, mode, /*isolate=*/false);
  });
  ASSERT_TRUE(ranks.waitForOutput("ready", milliseconds(60000)));
  ranks.signal(2, SIGKILL);
  auto outcomes = ranks.waitAll(milliseconds(40000));
  for (int r : {0, 1}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kPeerLost)) << o.output;
    EXPECT_NE(o.output.find("rank 2"), std::string::npos) << o.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerIsolationTest, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace kolo
