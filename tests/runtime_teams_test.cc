// Teams: a Runtime over a Communicator::split team runs its operations at
// the same time as the global team's Runtime, each with its own thread,
// queue and negotiation (the "thread teams" of a GAN: generator and
// discriminator gradients aggregated concurrently).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/runtime.h"
#include "support/comm_world.h"

namespace kolo::runtime {
namespace {

std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

RuntimeOptions fastOptions() {
  RuntimeOptions o;
  o.cycleTimeMs = 0.5;
  o.stallWarningSeconds = 0;
  return o;
}

OpRequest allreduce(const std::string& name, std::vector<float>& buf) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllreduce;
  r.spec.dtype = DataType::kFloat32;
  r.spec.shape = {static_cast<int64_t>(buf.size())};
  r.input = r.output = buf.data();
  return r;
}

void barrier(Runtime& rt, const std::string& name) {
  OpRequest b;
  b.spec.name = name;
  b.spec.kind = OpKind::kBarrier;
  rt.enqueue(b)->wait();
}

// Ranks {0,1} form team "gen", {2,3} team "disc". Team gen's ranks first
// submit a world allreduce that cannot run until team disc's ranks submit it
// too, and disc's ranks submit it only after gen's team operations have
// completed. So the test finishes only if team operations run while a world
// operation is pending; meanwhile both teams also run operations from a
// second thread while the world runtime runs its own.
TEST(RuntimeTeamsTest, TeamsRunConcurrentlyWithTheGlobalTeam) {
  constexpr int kSteps = 40;
  std::atomic<int> genDone{0};
  test::withCommunicators(4, test::testSettings(), [&](Communicator& world) {
    const int rank = world.rank();
    const bool gen = rank < 2;
    auto teamComm = world.split(gen ? std::vector<int>{0, 1} : std::vector<int>{2, 3},
                                gen ? "team/gen" : "team/disc");
    ASSERT_EQ(teamComm->size(), 2);
    Runtime worldRt(borrow(world), fastOptions());
    Runtime teamRt(teamComm, fastOptions());

    std::vector<float> block(1000, static_cast<float>(rank + 1));
    HandlePtr blocker;
    if (gen) blocker = worldRt.enqueue(allreduce("world.block", block));

    // Team operations from a second thread, world operations from this.
    std::vector<std::vector<float>> teamBufs(kSteps);
    std::thread teamThread([&] {
      std::vector<HandlePtr> handles;
      for (int i = 0; i < kSteps; ++i) {
        teamBufs[i].assign(257, static_cast<float>(rank * 100 + i));
        handles.push_back(teamRt.enqueue(allreduce(
            (gen ? "gen.grad." : "disc.grad.") + std::to_string(i), teamBufs[i])));
      }
      for (auto& h : handles) h->wait();
      if (gen) {
        // Done while world.block is still pending: disc's ranks have not
        // submitted it yet (they wait for genDone).
        EXPECT_FALSE(blocker->poll());
        genDone.fetch_add(1);
      }
    });
    if (!gen) {
      // Wait for team gen's operations (which run while world.block is
      // pending on gen's ranks), then submit world.block.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (genDone.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(genDone.load(), 2) << "team gen's operations did not run";
      blocker = worldRt.enqueue(allreduce("world.block", block));
    }
    std::vector<std::vector<float>> worldBufs(kSteps);
    std::vector<HandlePtr> worldHandles;
    for (int i = 0; i < kSteps; ++i) {
      worldBufs[i].assign(100, static_cast<float>(rank + i));
      worldHandles.push_back(
          worldRt.enqueue(allreduce("world.grad." + std::to_string(i), worldBufs[i])));
    }
    blocker->wait();
    for (auto& h : worldHandles) h->wait();
    teamThread.join();

    EXPECT_EQ(block[0], 1.0f + 2 + 3 + 4);
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(worldBufs[i][99], static_cast<float>(0 + 1 + 2 + 3 + 4 * i)) << i;
      const float teamSum = gen ? static_cast<float>(0 * 100 + 1 * 100 + 2 * i)
                                : static_cast<float>(2 * 100 + 3 * 100 + 2 * i);
      EXPECT_EQ(teamBufs[i][256], teamSum) << i;
    }
    barrier(teamRt, "team.end");
    barrier(worldRt, "world.end");
    teamRt.shutdown();
    worldRt.shutdown();
  });
}

// The same tensor name in two teams is two different operations.
TEST(RuntimeTeamsTest, NamesAreScopedToTheirTeam) {
  test::withCommunicators(3, test::testSettings(), [&](Communicator& world) {
    const int rank = world.rank();
    Runtime worldRt(borrow(world), fastOptions());
    std::shared_ptr<Communicator> pair;
    if (rank < 2) pair = world.split({0, 1}, "team/pair");
    std::unique_ptr<Runtime> pairRt;
    if (pair) pairRt = std::make_unique<Runtime>(pair, fastOptions());

    std::vector<float> w(8, 1.0f);
    std::vector<float> p(8, 10.0f);
    auto hw = worldRt.enqueue(allreduce("grad", w));
    HandlePtr hp;
    if (pairRt) hp = pairRt->enqueue(allreduce("grad", p));
    hw->wait();
    if (hp) hp->wait();
    EXPECT_EQ(w[0], 3.0f);
    if (pairRt) {
      EXPECT_EQ(p[0], 20.0f);
      barrier(*pairRt, "end");
      pairRt->shutdown();
    }
    barrier(worldRt, "end");
    worldRt.shutdown();
  });
}

}  // namespace
}  // namespace kolo::runtime
