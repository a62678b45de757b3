// Parameter servers under faults, each rank a process: a server that dies
// is an error on every worker naming its rank.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "api/communicator_impl.h"
#include "ps/client.h"
#include "ps/server.h"
#include "support/process_ranks.h"

namespace kolo::ps {
namespace {

using std::chrono::milliseconds;

constexpr int kRanks = 3;  // workers 0 and 1, server rank 2

int rankBody(int rank, const std::string& rendezvous) {
  try {
    auto c = test::connectRank(rank, kRanks, rendezvous, 5);
    const Roles roles = assignRoles(std::vector<int>(kRanks, 0), 1);
    if (roles.serverIndexOf(rank) == 0) {
      test::sayRank(rank, "running");
      Server(c->pointToPoint(), roles, 0).run();
      _exit(0);
    }
    PsConfig pc;
    pc.mode = Mode::kSync;
    pc.tensorElements = {1000};
    std::vector<float> params(1000, 1.0f), grads(1000, 0.5f);
    Client client(c->pointToPoint(), roles, roles.workerIndexOf(rank), pc);
    client.start({params.data()});
    for (long i = 0;; ++i) {
      client.step({params.data()}, {grads.data()}, 0.01f);
      if (i == 0) test::sayRank(rank, "running");
    }
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
  return 0;
}

TEST(PsFailure, AKilledServerIsAnErrorOnEveryWorkerNamingIt) {
  test::ProcessRanks ranks(kRanks, rankBody);
  ASSERT_TRUE(ranks.waitForOutput("running", milliseconds(60000)))
      << "the ranks did not start";
  ranks.signal(2, SIGKILL);
  auto outcomes = ranks.waitAll(milliseconds(15000));
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  for (int r : {0, 1}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "worker rank " << r << " hung; output:\n" << o.output;
    EXPECT_TRUE(o.exitCode == static_cast<int>(ErrorCode::kPeerLost) ||
                o.exitCode == static_cast<int>(ErrorCode::kTimeout))
        << o.output;
    EXPECT_NE(o.output.find("parameter servers (ranks 2)"), std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("rank 2"), std::string::npos) << o.output;
  }
}

}  // namespace
}  // namespace kolo::ps
