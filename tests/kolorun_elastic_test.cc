// kolorun's elastic driver (tools/kolorun/elastic_driver.h) against real
// workers' requests (rendezvous/elastic_membership.h) through a real store:
// the first world, a world re-formed after a failure, --min-np not met,
// a worker that does not ask within the join window, --reset-limit; and
// the elastic flags' parsing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "elastic_driver.h"
#include "host_discovery.h"
#include "kolo/error.h"
#include "options.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/tcp_store.h"

namespace kolo::kolorun {
namespace {

using namespace std::chrono_literals;
namespace elastic = rendezvous::elastic;

constexpr char kSecret[] = "elastic-test";

class ElasticDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = rendezvous::TcpStoreServer::start("127.0.0.1", 0, kSecret);
  }

  std::unique_ptr<rendezvous::Store> client() {
    return rendezvous::TcpStore::connect("127.0.0.1", server_->port(), 5000ms, kSecret);
  }

  std::unique_ptr<ElasticDriver> driver(int workers, ElasticLimits limits) {
    return std::make_unique<ElasticDriver>(client(), workers, limits);
  }

  // Worker `id` asks for its next world on its own connection.
  std::future<elastic::Assignment> join(int id) {
    return std::async(std::launch::async, [this, id] {
      auto store = client();
      return elastic::joinGeneration(*store, id, 20'000ms);
    });
  }

  // Polls until every future is ready (or 20 s); returns every outcome.
  template <typename F>
  std::vector<ElasticDriver::Outcome> pollUntil(ElasticDriver& d, F ready) {
    std::vector<ElasticDriver::Outcome> outs;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!ready() && std::chrono::steady_clock::now() < deadline) {
      outs.push_back(d.poll(std::chrono::steady_clock::now()));
      std::this_thread::sleep_for(5ms);
    }
    return outs;
  }

  std::unique_ptr<rendezvous::TcpStoreServer> server_;
};

bool ready(std::future<elastic::Assignment>& f) {
  return f.wait_for(0ms) == std::future_status::ready;
}

TEST_F(ElasticDriverTest, FirstWorldThenSurvivorsKeepTheirOrder) {
  auto d = driver(3, ElasticLimits{});
  auto w0 = join(0), w1 = join(1), w2 = join(2);
  pollUntil(*d, [&] { return ready(w0) && ready(w1) && ready(w2); });
  for (auto* f : {&w0, &w1, &w2}) ASSERT_TRUE(ready(*f));
  const auto a0 = w0.get(), a1 = w1.get(), a2 = w2.get();
  EXPECT_EQ(a0.generation, 1);
  EXPECT_EQ(a1.generation, 1);
  EXPECT_EQ(a0.rank, 0);
  EXPECT_EQ(a1.rank, 1);
  EXPECT_EQ(a2.rank, 2);
  EXPECT_EQ(a2.size, 3);

  // Worker 1 fails; the survivors ask again and keep their order.
  d->workerExited(1, false);
  EXPECT_EQ(d->liveWorkers(), 2);
  auto s2 = join(2), s0 = join(0);
  std::vector<std::string> notes;
  for (auto& o : pollUntil(*d, [&] { return ready(s0) && ready(s2); })) {
    notes.insert(notes.end(), o.notes.begin(), o.notes.end());
  }
  const auto b0 = s0.get(), b2 = s2.get();
  EXPECT_EQ(b0.generation, 2);
  EXPECT_EQ(b2.generation, 2);
  EXPECT_EQ(b0.rank, 0);
  EXPECT_EQ(b2.rank, 1);
  EXPECT_EQ(b2.size, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "elastic: world 2 has 2 worker(s): 0->0 2->1");
}

TEST_F(ElasticDriverTest, TooFewWorkersFailAfterTheElasticTimeoutNamingMinNp) {
  ElasticLimits limits;
  limits.minWorkers = 2;
  limits.elasticTimeout = 300ms;
  auto d = driver(2, limits);
  auto w0 = join(0), w1 = join(1);
  pollUntil(*d, [&] { return ready(w0) && ready(w1); });
  w0.get();
  w1.get();
  d->workerExited(1, false);
  auto again = join(0);
  std::optional<std::string> failure;
  for (auto& o : pollUntil(*d, [&] { return ready(again); })) {
    if (o.failure) failure = o.failure;
  }
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find("only 1 worker(s) left, fewer than --min-np 2"),
            std::string::npos)
      << *failure;
  try {
    again.get();
    ADD_FAILURE() << "worker 0 was given a world";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("fewer than --min-np 2"), std::string::npos)
        << e.what();
  }
}

// The others failed and the last one is stopped (it never asks): the job
// still ends after --elastic-timeout; once a worker finished, it does not.
TEST_F(ElasticDriverTest, TooFewWorkersFailTheJobEvenWhenNoneAsks) {
  ElasticLimits limits;
  limits.minWorkers = 2;
  limits.elasticTimeout = 200ms;
  auto d = driver(3, limits);
  d->workerExited(0, false);
  d->workerExited(1, false);
  std::optional<std::string> failure;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!failure && std::chrono::steady_clock::now() < deadline) {
    failure = d->poll(std::chrono::steady_clock::now()).failure;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find("only 1 worker(s) left, fewer than --min-np 2"),
            std::string::npos);

  auto ending = driver(3, limits);
  ending->workerExited(0, true);
  ending->workerExited(1, true);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 600ms) {
    EXPECT_FALSE(ending->poll(std::chrono::steady_clock::now()).failure.has_value());
    std::this_thread::sleep_for(5ms);
  }
}

// The window's part of a stopped worker's time to leave (docs/elastic.md:
// KOLO_TIMEOUT to notice, then this window): 2 x KOLO_TIMEOUT + 5 s.
TEST(ElasticJoinWindowTest, IsTwiceTheTimeoutPlusFiveSeconds) {
  EXPECT_EQ(joinWindowFor(5.0), 15000ms);
  EXPECT_EQ(joinWindowFor(30.0), 65000ms);
  EXPECT_EQ(joinWindowFor(0.5), 6000ms);
}

TEST_F(ElasticDriverTest, AWorkerThatDoesNotAskInTheJoinWindowIsRemoved) {
  ElasticLimits limits;
  limits.joinWindow = 200ms;
  auto d = driver(3, limits);
  auto w0 = join(0), w1 = join(1), w2 = join(2);
  pollUntil(*d, [&] { return ready(w0) && ready(w1) && ready(w2); });
  // Workers 0 and 2 saw a failure; worker 1 is stopped and never asks.
  auto s0 = join(0), s2 = join(2);
  std::vector<int> removed;
  for (auto& o : pollUntil(*d, [&] { return ready(s0) && ready(s2); })) {
    removed.insert(removed.end(), o.remove.begin(), o.remove.end());
  }
  EXPECT_EQ(removed, std::vector<int>{1});
  EXPECT_EQ(s0.get().size, 2);
  EXPECT_EQ(s2.get().rank, 1);
  // Should it wake up and ask, it is refused with the reason.
  auto late = join(1);
  pollUntil(*d, [&] { return ready(late); });
  try {
    late.get();
    ADD_FAILURE() << "the removed worker was given a world";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was removed from the job"), std::string::npos)
        << e.what();
  }
}

TEST_F(ElasticDriverTest, TheResetBeyondTheLimitFailsTheJob) {
  ElasticLimits limits;
  limits.resetLimit = 1;
  auto d = driver(3, limits);
  std::vector<std::future<elastic::Assignment>> f;
  for (int id = 0; id < 3; ++id) f.push_back(join(id));
  pollUntil(*d, [&] { return ready(f[0]) && ready(f[1]) && ready(f[2]); });
  d->workerExited(2, false);
  auto a = join(0), b = join(1);  // the first reset: allowed
  pollUntil(*d, [&] { return ready(a) && ready(b); });
  EXPECT_EQ(a.get().generation, 2);
  b.get();
  d->workerExited(1, false);
  auto c = join(0);  // the second: beyond --reset-limit 1
  std::optional<std::string> failure;
  for (auto& o : pollUntil(*d, [&] { return ready(c); })) {
    if (o.failure) failure = o.failure;
  }
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find("reached --reset-limit 1"), std::string::npos) << *failure;
  EXPECT_THROW(c.get(), Error);
}

TEST(HostDiscoveryTest, ScriptOutputAndBlacklist) {
  HostDiscovery d("printf 'alpha:2\\n\\n  beta \\n[::1]:3\\n'", 4, std::nullopt);
  const auto hosts = d.discover();
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "alpha");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "beta");
  EXPECT_EQ(hosts[1].slots, 4);  // --slots-per-host
  EXPECT_EQ(hosts[2].host, "::1");
  EXPECT_EQ(hosts[2].slots, 3);
  const auto now = HostDiscovery::Clock::now();
  EXPECT_FALSE(d.blacklisted("alpha", now));
  d.blacklist("alpha", now);
  EXPECT_TRUE(d.blacklisted("alpha", now + std::chrono::hours(24)));  // for good
  HostDiscovery cooled("true", 1, std::make_pair(1.0, 2.0));
  cooled.blacklist("beta", now);
  EXPECT_TRUE(cooled.blacklisted("beta", now));
  EXPECT_FALSE(cooled.blacklisted("beta", now + std::chrono::seconds(3)));
  for (const char* bad : {"exit 3", "echo 'a b c'", "echo 'x:0'"}) {
    HostDiscovery failing(bad, 1, std::nullopt);
    try {
      failing.discover();
      ADD_FAILURE() << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--host-discovery-script '"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ElasticMembershipTest, AssignmentsRoundTripAndBadOnesAreErrors) {
  std::string refusal;
  auto a = elastic::decode(elastic::encode({3, 1, 4, 7, 2}), refusal);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->generation, 3);
  EXPECT_EQ(a->rank, 1);
  EXPECT_EQ(a->size, 4);
  EXPECT_EQ(a->hostUpdates, 7);
  EXPECT_EQ(a->hostAdditions, 2);
  EXPECT_FALSE(elastic::decode(elastic::encodeRefusal("why"), refusal).has_value());
  EXPECT_EQ(refusal, "why");
  for (const char* bad : {"", "1 2", "1 0 1", "1 4 4 0 0", "0 0 1 0 0", "1 0 1 0 0 x",
                          "1 0 1 1 2", "1 0 1 -1 0", "x y z 0 0"}) {
    EXPECT_THROW(elastic::decode(bad, refusal), Error) << bad;
  }
  EXPECT_EQ(elastic::worldName(7), "world/e7");
}

TEST(ElasticOptionsTest, FlagsSetTheElasticJob) {
  std::vector<std::string> args = {"kolorun", "-np",           "3", "--min-np",
                                   "2",       "--max-np",      "4", "--elastic-timeout",
                                   "5",       "--reset-limit", "0", "prog"};
  std::vector<const char*> argv;
  for (auto& s : args) argv.push_back(s.c_str());
  const LaunchOptions o = parseArguments(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(o.elastic.enabled);
  EXPECT_EQ(o.elastic.minRanks, 2);
  EXPECT_EQ(o.elastic.maxRanks, 4);
  EXPECT_EQ(o.elastic.timeoutSeconds, 5);
  ASSERT_TRUE(o.elastic.resetLimit.has_value());
  EXPECT_EQ(*o.elastic.resetLimit, 0);
  std::vector<std::string> more = {"kolorun", "-np",
                                   "2",       "--host-discovery-script",
                                   "d.sh",    "--slots-per-host",
                                   "4",       "--blacklist-cooldown-range",
                                   "10",      "20",
                                   "prog"};
  argv.clear();
  for (auto& s : more) argv.push_back(s.c_str());
  const LaunchOptions d = parseArguments(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(d.elastic.enabled);
  EXPECT_EQ(d.elastic.discoveryScript, "d.sh");
  EXPECT_EQ(d.elastic.slotsPerHost, 4);
  ASSERT_TRUE(d.elastic.blacklistCooldown.has_value());
  EXPECT_EQ(d.elastic.blacklistCooldown->first, 10);
  EXPECT_EQ(d.elastic.blacklistCooldown->second, 20);
  EXPECT_EQ(d.command, std::vector<std::string>{"prog"});
  std::vector<const char*> plain = {"kolorun", "-np", "2", "prog"};
  EXPECT_FALSE(parseArguments(4, plain.data()).elastic.enabled);
}

}  // namespace
}  // namespace kolo::kolorun
