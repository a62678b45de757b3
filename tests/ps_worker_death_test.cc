// A worker that dies (SIGKILL), each rank a process: in downpour and easgd,
// and in sync with backup_workers > 0, the server logs it once and the
// other workers go on; in plain sync every other worker fails within
// KOLO_TIMEOUT with an error naming the dead worker.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "api/communicator_impl.h"
#include "ps/client.h"
#include "ps/server.h"
#include "support/process_ranks.h"

namespace kolo::ps {
namespace {

using std::chrono::milliseconds;

constexpr int kRanks = 4;  // workers 0, 1, 2; server rank 3
constexpr int kVictim = 2;

volatile sig_atomic_t gGoOn = 0;  // SIGUSR1: the victim is dead, finish up
void onUsr1(int) {
  gGoOn = 1;
}

PsConfig gConfig;

int rankBody(int rank, const std::string& rendezvous) {
  ::signal(SIGUSR1, onUsr1);
  try {
    auto c = test::connectRank(rank, kRanks, rendezvous, 10);
    const Roles roles = assignRoles(std::vector<int>(kRanks, 0), 1);
    if (roles.serverIndexOf(rank) == 0) {
      test::sayRank(rank, "running");
      Server server(c->pointToPoint(), roles, 0);
      server.run();
      std::printf("server done: version %llu\n",
                  static_cast<unsigned long long>(server.stats().version));
      std::fflush(stdout);
      _exit(0);
    }
    std::vector<float> params(1000, 1.0f), grads(1000, 0.5f);
    ClientOptions options;
    Client client(c->pointToPoint(), roles, roles.workerIndexOf(rank), gConfig, options);
    client.start({params.data()});
    // After SIGUSR1 (the victim is dead), 5 s more of steps: longer than
    // the transports take to notice a lost peer (about 2 s), so the
    // servers go on without it while this worker still trains.
    std::chrono::steady_clock::time_point until{};
    for (long i = 0;; ++i) {
      client.step({params.data()}, {grads.data()}, 0.01f);
      if (i == 0) test::sayRank(rank, "running");
      if (gGoOn && until == std::chrono::steady_clock::time_point{}) {
        until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
      if (gGoOn && std::chrono::steady_clock::now() > until) break;
      usleep(1000);
    }
    client.bye();
    test::sayRank(rank, "survived");
  } catch (const Error& e) {
    test::exitWithError(rank, e);
  }
  _exit(0);
}

// Starts the job, kills worker 2 once all run, tells the others to finish.
std::vector<test::RankOutcome> killTheVictim() {
  test::ProcessRanks ranks(kRanks, rankBody);
  EXPECT_TRUE(ranks.waitForOutput("running", milliseconds(60000)))
      << "the ranks did not start";
  ranks.signal(kVictim, SIGKILL);
  usleep(200 * 1000);
  for (int r : {0, 1}) ranks.signal(r, SIGUSR1);
  auto outcomes = ranks.waitAll(milliseconds(40000));
  EXPECT_EQ(outcomes[kVictim].signal, SIGKILL);
  return outcomes;
}

void expectOthersGoOn() {
  auto outcomes = killTheVictim();
  for (int r : {0, 1, 3}) {
    EXPECT_FALSE(outcomes[r].hung) << "rank " << r << " hung:\n" << outcomes[r].output;
    EXPECT_TRUE(outcomes[r].exited && outcomes[r].exitCode == 0) << "rank " << r << ":\n"
                                                                 << outcomes[r].output;
  }
  EXPECT_NE(outcomes[0].output.find("rank 0 survived"), std::string::npos);
  EXPECT_NE(outcomes[1].output.find("rank 1 survived"), std::string::npos);
  EXPECT_NE(outcomes[3].output.find("server done"), std::string::npos)
      << outcomes[3].output;
  // Logged once, naming the worker and its rank.
  const std::string& log = outcomes[3].output;
  const std::string line = "worker 2 (rank 2) was lost";
  const size_t first = log.find(line);
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find(line, first + 1), std::string::npos) << "logged twice:\n" << log;
}

TEST(PsWorkerDeath, DownpourGoesOnWithoutTheDeadWorker) {
  gConfig = PsConfig{};
  gConfig.mode = Mode::kDownpour;
  gConfig.stalenessBound = 1000;
  gConfig.tensorElements = {1000};
  expectOthersGoOn();
}

TEST(PsWorkerDeath, EasgdGoesOnWithoutTheDeadWorker) {
  gConfig = PsConfig{};
  gConfig.mode = Mode::kEasgd;
  gConfig.tensorElements = {1000};
  expectOthersGoOn();
}

TEST(PsWorkerDeath, SyncWithABackupWorkerGoesOn) {
  gConfig = PsConfig{};
  gConfig.mode = Mode::kSync;
  gConfig.backupWorkers = 1;
  gConfig.tensorElements = {1000};
  expectOthersGoOn();
}

TEST(PsWorkerDeath, PlainSyncFailsEveryWorkerNamingTheDeadOne) {
  gConfig = PsConfig{};
  gConfig.mode = Mode::kSync;
  gConfig.tensorElements = {1000};
  auto outcomes = killTheVictim();
  for (int r : {0, 1}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "worker rank " << r << " hung:\n" << o.output;
    EXPECT_TRUE(o.exited && o.exitCode == static_cast<int>(ErrorCode::kPeerLost))
        << o.output;
    EXPECT_NE(o.output.find("worker 2 (rank 2) was lost"), std::string::npos) << o.output;
  }
  EXPECT_FALSE(outcomes[3].hung) << outcomes[3].output;
}

}  // namespace
}  // namespace kolo::ps
