// Communicator::split: teams of a 4-rank job (ranks as threads, each with a
// real communicator), each team allreducing on its own thread while the
// world communicator allreduces on another; team layouts; and the errors.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "support/comm_world.h"

namespace kolo {
namespace {

using test::testSettings;
using test::withCommunicators;

// Allreduces (sum of rank-dependent values) on `comm`, checking each result
// against the members' global ranks.
void allreduceRounds(Communicator& comm, const std::vector<int>& globalOf, int globalRank,
                     int rounds, const std::string& what) {
  for (int round = 0; round < rounds; ++round) {
    const size_t count = round % 3 == 0 ? (1 << 18) + round : 1 + round;
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) {
      data[i] = static_cast<float>(globalRank * 1000 + round + static_cast<int>(i % 7));
    }
    AllreduceOptions o;
    o.send = o.recv = data.data();
    o.count = count;
    if (round % 4 == 1) o.algorithm = "ordered";
    comm.allreduce(o);
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int g : globalOf) {
        expected += static_cast<float>(g * 1000 + round + static_cast<int>(i % 7));
      }
      if (data[i] != expected) {
        ADD_FAILURE() << what << " global rank " << globalRank << " round " << round
                      << " element " << i << ": " << data[i] << " != " << expected;
        return;
      }
    }
  }
}

void teamsWithWorld(const std::function<std::string(int)>& hostOf) {
  withCommunicators(
      4, testSettings(),
      [](Communicator& world) {
        const int g = world.rank();
        // Team "gen" lists its ranks out of order: 2 is its rank 0.
        const std::vector<int> members =
            g == 0 || g == 2 ? std::vector<int>{2, 0} : std::vector<int>{1, 3};
        const std::string name = g == 0 || g == 2 ? "team/gen" : "team/disc";
        std::shared_ptr<Communicator> team = world.split(members, name);
        ASSERT_NE(team, nullptr);
        EXPECT_EQ(team->size(), 2);
        EXPECT_EQ(team->rank(), g == 2 ? 0 : g == 0 ? 1 : g == 1 ? 0 : 1);
        // The team and the world run at the same time on two threads.
        std::thread teamThread(
            [&] { allreduceRounds(*team, members, g, 30, "team " + name); });
        allreduceRounds(world, {0, 1, 2, 3}, g, 30, "world");
        teamThread.join();
        // Afterwards both still work, from this thread.
        allreduceRounds(*team, members, g, 2, "team again");
        world.barrier();
      },
      hostOf);
}

TEST(CommunicatorSplit, TwoTeamsConcurrentWithWorld) {
  teamsWithWorld(nullptr);  // one host: shm
}

TEST(CommunicatorSplit, TwoTeamsAcrossPretendHosts) {
  // Hosts {0,1} and {2,3}: each team spans both hosts (tcp + shm world).
  teamsWithWorld([](int r) { return "host" + std::to_string(r / 2); });
}

TEST(CommunicatorSplit, TeamOfOneAndWholeWorldAndNested) {
  withCommunicators(3, testSettings("tcp"), [](Communicator& world) {
    const int g = world.rank();
    // Every rank alone.
    auto alone = world.split({g}, "alone/" + std::to_string(g));
    EXPECT_EQ(alone->size(), 1);
    EXPECT_EQ(alone->rank(), 0);
    int64_t x = g + 5;
    AllreduceOptions o;
    o.send = o.recv = &x;
    o.count = 1;
    o.dtype = DataType::kInt64;
    alone->allreduce(o);
    EXPECT_EQ(x, g + 5);
    // All ranks, reversed; then a team of that team.
    auto all = world.split({2, 1, 0}, "all");
    EXPECT_EQ(all->rank(), 2 - g);
    std::vector<int> gathered(3);
    AllgatherOptions ag;
    ag.send = &g;
    ag.recv = gathered.data();
    ag.count = 1;
    ag.dtype = DataType::kInt32;
    all->allgather(ag);
    EXPECT_EQ(gathered, (std::vector<int>{2, 1, 0}));
    if (g != 1) {
      // Team ranks 0 and 2 of "all" are world ranks 2 and 0.
      auto sub = all->split({0, 2}, "sub");
      EXPECT_EQ(sub->size(), 2);
      EXPECT_EQ(sub->rank(), g == 2 ? 0 : 1);
      int64_t v = g;
      o.send = o.recv = &v;
      sub->allreduce(o);
      EXPECT_EQ(v, 2);
    }
    world.barrier();
  });
}

// Expects split to throw `code` with all of `parts` in its message.
void expectSplitError(Communicator& comm, const std::vector<int>& ranks,
                      const std::string& name, ErrorCode code,
                      const std::vector<std::string>& parts) {
  try {
    comm.split(ranks, name);
    ADD_FAILURE() << "split '" << name << "' succeeded on rank " << comm.rank();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
    }
  }
}

TEST(CommunicatorSplit, BadArguments) {
  withCommunicators(4, testSettings("tcp"), [](Communicator& world) {
    const int g = world.rank();
    const auto bad = ErrorCode::kInvalidArgument;
    expectSplitError(world, {0, 1, 1}, "dup", bad, {"dup", "rank 1", "twice"});
    expectSplitError(world, {0, 4}, "range", bad, {"range", "rank 4", "of 4"});
    expectSplitError(world, {-1, 0}, "negative", bad, {"rank -1"});
    expectSplitError(world, {}, "empty", bad, {"empty rank list"});
    expectSplitError(world, {0, 1, 2, 3}, "", bad, {"empty team name"});
    if (g >= 2) {
      // Ranks 2 and 3 call with a list that leaves them out.
      expectSplitError(world, {0, 1}, "pair", bad,
                       {"pair", "rank " + std::to_string(g), "not in [0,1]"});
    }
    // Nothing was left half-done: the world still works, and a good split
    // follows.
    world.barrier();
    auto team = world.split({0, 1, 2, 3}, "after");
    EXPECT_EQ(team->rank(), g);
    team->barrier();
  });
}

TEST(CommunicatorSplit, MembersDisagreeOnTheList) {
  withCommunicators(3, testSettings("tcp"), [](Communicator& world) {
    const int g = world.rank();
    if (g == 2) return;  // not a member of either list
    // Rank 0 lists {0,1}; rank 1 lists {1,0}.
    const std::vector<int> list =
        g == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0};
    expectSplitError(world, list, "confused", ErrorCode::kMismatch,
                     {"confused", "[0,1]", "[1,0]"});
  });
}

TEST(CommunicatorSplit, NameUsedTwice) {
  withCommunicators(2, testSettings("tcp"), [](Communicator& world) {
    auto first = world.split({0, 1}, "once");
    first->barrier();
    expectSplitError(world, {0, 1}, "once", ErrorCode::kInvalidArgument,
                     {"once", "used before"});
  });
}

// The elastic world a communicator was formed in (Communicator::elasticWorld)
// is the communicator's own: each world reports the one it was given, its
// teams inherit it, and a communicator of no elastic job reports 0.
TEST(CommunicatorSplit, TeamsCarryTheirWorldsElasticGeneration) {
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);
  const std::string address = "tcp://127.0.0.1:" + std::to_string(server->port());
  std::vector<std::thread> threads;
  std::vector<ElasticWorld> world(2), team(2);
  std::atomic<int> failures{0};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommunicatorConfig config;
        config.rank = r;
        config.size = 2;
        config.rendezvous = address;
        config.hostStore = false;
        config.name = "world/e7";
        api::EngineOptions engine;
        engine.elastic = {7, 3, 1};
        api::CommunicatorImpl comm(config, testSettings(), std::move(engine));
        world[r] = comm.elasticWorld();
        team[r] = comm.split({1, 0}, "team/elastic")->elasticWorld();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  for (int r = 0; r < 2; ++r) {
    for (const ElasticWorld& w : {world[r], team[r]}) {
      EXPECT_EQ(w.generation, 7) << "rank " << r;
      EXPECT_EQ(w.hostUpdates, 3) << "rank " << r;
      EXPECT_EQ(w.hostAdditions, 1) << "rank " << r;
    }
  }
  withCommunicators(2, testSettings(), [](Communicator& comm) {
    EXPECT_EQ(comm.elasticWorld().generation, 0);
    EXPECT_EQ(comm.split({0, 1}, "team/plain")->elasticWorld().generation, 0);
  });
}

}  // namespace
}  // namespace kolo
