// The parameter servers over real transports, each rank a thread
// (ThreadWorld): what each mode means (sync = an averaging allreduce step,
// downpour's staleness bound, EASGD's exchange) and the bad arguments.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ps/client.h"
#include "ps/segments.h"
#include "ps/server.h"
#include "support/thread_world.h"

namespace kolo::ps {
namespace {

using test::ThreadWorld;

// A job of `n` ranks on one pretend host with `servers` servers; runs the
// servers and `worker(index, transport, roles)` on the others.
void runJob(int n, int servers,
            const std::function<void(int, transport::Transport&, const Roles&)>& worker) {
  ThreadWorld world(ThreadWorld::Kind::kShm, n);
  const Roles roles = assignRoles(std::vector<int>(n, 0), servers);
  world.run([&](int rank) {
    const int s = roles.serverIndexOf(rank);
    if (s >= 0) {
      Server(world.transport(rank), roles, s).run();
    } else {
      worker(roles.workerIndexOf(rank), world.transport(rank), roles);
    }
  });
}

// Worker w's gradient at step t for element i: differs per worker and step.
float gradient(int w, int t, size_t i) {
  return 0.01f * static_cast<float>((w + 1) * (t + 2)) - 0.003f * static_cast<float>(i);
}

std::vector<std::vector<float>> initial() {
  return {{0.5f, -1.0f, 2.0f, 0.25f, 0.0f}, {1.0f, 3.0f, -0.5f}};
}

std::vector<float*> pointers(std::vector<std::vector<float>>& v) {
  std::vector<float*> p;
  for (auto& t : v) p.push_back(t.data());
  return p;
}

// Three sync steps of 3 workers on 2 servers, against the same optimizer
// applied locally to the mean gradient (what an averaging allreduce step
// gives every rank).
void expectSyncEqualsAllreduce(const OptimizerConfig& opt) {
  constexpr int kWorkers = 3, kSteps = 3;
  const float lrs[kSteps] = {0.1f, 0.05f, 0.02f};
  PsConfig config;
  config.mode = Mode::kSync;
  config.optimizer = opt;
  config.tensorElements = {5, 3};
  // The reference: one rule per tensor, fed the mean gradient.
  auto expected = initial();
  std::vector<UpdateRule> rules;
  for (auto& t : expected) rules.emplace_back(opt, t.size());
  for (int t = 0; t < kSteps; ++t) {
    for (size_t k = 0; k < expected.size(); ++k) {
      std::vector<float> mean(expected[k].size(), 0.0f);
      for (size_t i = 0; i < mean.size(); ++i) {
        for (int w = 0; w < kWorkers; ++w) mean[i] += gradient(w, t, i + 10 * k);
        mean[i] /= kWorkers;
      }
      rules[k].apply(expected[k].data(), mean.data(), lrs[t]);
    }
  }
  std::vector<std::vector<std::vector<float>>> finals(kWorkers);
  runJob(kWorkers + 2, 2, [&](int w, transport::Transport& t, const Roles& roles) {
    auto params = initial();
    if (w != 0) {
      for (auto& v : params) std::fill(v.begin(), v.end(), 7.0f);  // pulled before use
    }
    Client client(t, roles, w, config);
    client.start(pointers(params));
    for (int s = 0; s < kSteps; ++s) {
      std::vector<std::vector<float>> grads = params;
      for (size_t k = 0; k < grads.size(); ++k) {
        for (size_t i = 0; i < grads[k].size(); ++i)
          grads[k][i] = gradient(w, s, i + 10 * k);
      }
      std::vector<const float*> g;
      for (auto& v : grads) g.push_back(v.data());
      client.step(pointers(params), g, lrs[s]);
    }
    finals[w] = params;
    client.bye();
  });
  for (int w = 0; w < kWorkers; ++w) {
    for (size_t k = 0; k < expected.size(); ++k) {
      for (size_t i = 0; i < expected[k].size(); ++i) {
        EXPECT_NEAR(finals[w][k][i], expected[k][i], 1e-6f)
            << "worker " << w << " tensor " << k << " element " << i;
      }
    }
  }
}

TEST(PsServer, SyncStepEqualsAllreduceStepSgdMomentum) {
  OptimizerConfig opt;
  opt.momentum = 0.9f;
  opt.weightDecay = 0.01f;
  expectSyncEqualsAllreduce(opt);
}

TEST(PsServer, SyncStepEqualsAllreduceStepAdam) {
  OptimizerConfig opt;
  opt.kind = OptimizerKind::kAdam;
  expectSyncEqualsAllreduce(opt);
}

// Downpour with staleness_bound = 1: two fast workers and one slowed on
// purpose; workers pull only when refused (pull_period is large), so stale
// pushes do arrive; the servers must refuse every one above the bound.
TEST(PsServer, DownpourAppliesNoGradientStalerThanTheBound) {
  constexpr int kWorkers = 3, kSteps = 12;
  PsConfig config;
  config.mode = Mode::kDownpour;
  config.stalenessBound = 1;
  config.tensorElements = {5, 3};
  ClientOptions options;
  options.pullPeriod = 1000;
  std::vector<ServerStats> stats;
  std::atomic<int> finished{0};
  runJob(kWorkers + 1, 1, [&](int w, transport::Transport& t, const Roles& roles) {
    auto params = initial();
    Client client(t, roles, w, config, options);
    client.start(pointers(params));
    std::vector<float> g0(5, 0.01f), g1(3, 0.01f);
    for (int s = 0; s < kSteps; ++s) {
      if (w == 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      client.step(pointers(params), {g0.data(), g1.data()}, 0.1f);
      EXPECT_LE(client.staleness(), 1u) << "worker " << w << " step " << s;
    }
    if (++finished == kWorkers) {
      // Only read once all have pushed: the counters are final.
    }
    while (finished.load() < kWorkers) std::this_thread::yield();
    if (w == 0) stats = client.stats();
    client.bye();
  });
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_LE(stats[0].maxStaleness, 1u);
  EXPECT_GT(stats[0].rejected, 0u)
      << "no push was ever too stale: the test shows nothing";
  EXPECT_EQ(stats[0].updates + stats[0].rejected, uint64_t{kWorkers * kSteps});
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(stats[0].pushes[w], uint64_t{kSteps});
}

// sync: a worker that has said goodbye pushes no more, so the rounds
// after it apply with the workers left (no wait for it until the timeout).
// SGD, lr 0.1: the first round averages both workers' gradients (1 and 3),
// the next two are worker 0's alone.
TEST(PsServer, SyncRoundsGoOnWithoutAWorkerThatSaidGoodbye) {
  PsConfig config;
  config.mode = Mode::kSync;
  config.tensorElements = {4};
  std::vector<float> final0;
  runJob(3, 1, [&](int w, transport::Transport& t, const Roles& roles) {
    std::vector<float> params(4, 1.0f);
    Client client(t, roles, w, config);
    client.start({params.data()});
    const std::vector<float> grad(4, w == 0 ? 1.0f : 3.0f);
    for (int s = 0; s < (w == 0 ? 3 : 1); ++s) {
      client.step({params.data()}, {grad.data()}, 0.1f);
    }
    client.bye();
    if (w == 0) final0 = params;
  });
  ASSERT_EQ(final0.size(), 4u);
  for (float v : final0) EXPECT_NEAR(v, 1.0f - 0.1f * 2.0f - 0.1f - 0.1f, 1e-6f);
}

// A pull reply still on its way when an update applies carries the values
// of the version its header names: the server sends without waiting, so it
// must not change memory a reply is sending (it copies on write). Worker 1
// speaks the wire protocol itself so that it can hold its reply's payload
// (a shm message of 16 MiB, far over what the transport buffers) while
// worker 0's push is applied.
TEST(PsServer, AnUpdateDoesNotChangeAPullReplyOnItsWay) {
  constexpr size_t kElements = size_t{4} << 20;
  PsConfig config;
  config.mode = Mode::kDownpour;
  config.stalenessBound = 4;
  config.tensorElements = {kElements};
  ClientOptions options;
  options.pullPeriod = 1000;
  std::atomic<int> phase{
      0};  // 1: worker 0 started; 2: worker 1 has the header; 3: pushed
  std::vector<float> got;
  Header gotHeader;
  runJob(3, 1, [&](int w, transport::Transport& t, const Roles& roles) {
    if (w == 0) {
      std::vector<float> params(kElements, 1.0f);
      Client client(t, roles, w, config, options);
      client.start({params.data()});
      phase = 1;
      while (phase.load() < 2) std::this_thread::yield();
      std::vector<float> grad(kElements, 1.0f);
      client.step({params.data()}, {grad.data()}, 0.5f);  // the server is at version 1
      phase = 3;
      client.bye();
      return;
    }
    while (phase.load() < 1) std::this_thread::yield();
    const int server = roles.servers[0];
    Header pull;
    pull.type = MessageType::kPull;
    pull.worker = 1;
    const HeaderBytes out = encodeHeader(pull);
    t.send(server, kHeaderTag, out.data(), out.size());
    HeaderBytes in;
    t.recv(server, kHeaderTag, in.data(), in.size());
    const uint64_t shardBytes = kElements * sizeof(float);
    WireLimits limits;
    limits.workers = 2;
    limits.shards = 1;
    limits.shardBytes = &shardBytes;
    gotHeader = decodeHeader(in.data(), in.size(), limits, server);
    phase = 2;
    while (phase.load() < 3) std::this_thread::yield();
    got.assign(kElements, 0.0f);
    t.recv(server, kPayloadTag, got.data(), shardBytes);
    Header bye;
    bye.type = MessageType::kBye;
    bye.worker = 1;
    const HeaderBytes b = encodeHeader(bye);
    t.send(server, kHeaderTag, b.data(), b.size());
  });
  EXPECT_EQ(gotHeader.type, MessageType::kPullReply);
  EXPECT_EQ(gotHeader.version, 0u);
  ASSERT_EQ(got.size(), kElements);
  size_t changed = 0;
  for (float v : got) changed += v != 1.0f;
  EXPECT_EQ(changed, 0u) << "of " << kElements
                         << " elements of the version-0 reply, some hold version 1";
}

// One exchange on a toy problem, with values exact in binary: the worker's
// x and the center move by exactly alpha * (x - c).
TEST(PsServer, EasgdExchangeIsTheFormula) {
  PsConfig config;
  config.mode = Mode::kEasgd;
  config.easgdAlpha = 0.25f;
  config.tensorElements = {5, 3};
  std::vector<std::vector<float>> x1, center;
  runJob(4, 2, [&](int w, transport::Transport& t, const Roles& roles) {
    auto params = initial();  // worker 0 seeds c = initial()
    Client client(t, roles, w, config);
    client.start(pointers(params));
    if (w == 0) {
      params[0] = {1.5f, -2.0f, 2.0f, 1.25f, 4.0f};
      params[1] = {0.0f, 3.0f, 0.5f};
      client.exchange(pointers(params));
      x1 = params;
      client.pull(pointers(params));
      center = params;
    }
    client.bye();
  });
  const auto c0 = initial();
  const std::vector<std::vector<float>> x0 = {{1.5f, -2.0f, 2.0f, 1.25f, 4.0f},
                                              {0.0f, 3.0f, 0.5f}};
  for (size_t k = 0; k < 2; ++k) {
    for (size_t i = 0; i < c0[k].size(); ++i) {
      const float diff = 0.25f * (x0[k][i] - c0[k][i]);
      EXPECT_EQ(x1[k][i], x0[k][i] - diff) << k << "," << i;
      EXPECT_EQ(center[k][i], c0[k][i] + diff) << k << "," << i;
    }
  }
}

// Tensors above kDirectBytes travel straight from and into their memory,
// small ones packed (segments.h): 2 servers, a mix of both, one sync step
// of plain SGD; every element must come back right, on every worker.
TEST(PsServer, LargeTensorsTravelDirectAndSmallOnesPacked) {
  PsConfig config;
  config.mode = Mode::kSync;
  config.optimizer.lr = 0.5f;
  config.tensorElements = {150000, 5, 140000, 3, 7};
  const auto& sizes = config.tensorElements;
  const ShardMap map = ShardMap::build(sizes, 2);
  int direct = 0, packed = 0;
  for (const auto& shard : map.shards) {
    for (const Segment& g : segmentsOf(shard)) (g.direct ? direct : packed)++;
  }
  ASSERT_GE(direct, 2) << "the test needs direct segments";
  ASSERT_GE(packed, 1) << "the test needs packed segments";
  auto value = [](size_t t, size_t i) { return 0.001f * float(i % 997) - float(t); };
  std::vector<int> wrong(2, -1);
  runJob(4, 2, [&](int w, transport::Transport& t, const Roles& roles) {
    std::vector<std::vector<float>> params;
    for (size_t k = 0; k < sizes.size(); ++k) {
      params.emplace_back(sizes[k], 9.0f);
      if (w == 0) {
        for (size_t i = 0; i < sizes[k]; ++i) params[k][i] = value(k, i);
      }
    }
    Client client(t, roles, w, config);
    client.start(pointers(params));
    int bad = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) bad += params[k][i] != value(k, i);
    }
    // Worker w's gradient is w + 1 everywhere: the mean is 1.5.
    std::vector<std::vector<float>> grads;
    std::vector<const float*> g;
    for (size_t k = 0; k < sizes.size(); ++k) grads.emplace_back(sizes[k], float(w + 1));
    for (auto& v : grads) g.push_back(v.data());
    client.step(pointers(params), g, 0.5f);
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) {
        bad += params[k][i] != value(k, i) + -0.5f * 1.5f;
      }
    }
    wrong[w] = bad;
    client.bye();
  });
  EXPECT_EQ(wrong[0], 0);
  EXPECT_EQ(wrong[1], 0);
}

TEST(PsServer, WorkersThatDisagreeGetAClearError) {
  std::atomic<int> refused{0};
  runJob(3, 1, [&](int w, transport::Transport& t, const Roles& roles) {
    PsConfig config;
    config.mode = w == 0 ? Mode::kSync : Mode::kDownpour;
    config.tensorElements = {5, 3};
    auto params = initial();
    Client client(t, roles, w, config);
    try {
      client.start(pointers(params));
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("differs from worker"), std::string::npos) << what;
      ++refused;
      return;  // refused: the server no longer waits for this worker
    }
    client.bye();
  });
  EXPECT_EQ(refused.load(), 1);
}

TEST(PsServer, BadArgumentsAreClearErrors) {
  const Roles roles = assignRoles({0, 0, 0}, 1);
  EXPECT_EQ(roles.servers, (std::vector<int>{2}));
  EXPECT_EQ(roles.workers, (std::vector<int>{0, 1}));
  auto message = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([] {
              assignRoles({0, 0, 0}, 3);
            }).find("KOLO_SERVERS=3 with 3 ranks"),
            std::string::npos);
  EXPECT_NE(message([] {
              assignRoles({0, 0}, -1);
            }).find("KOLO_SERVERS=-1"),
            std::string::npos);
  EXPECT_NE(
      message([] { parseMode("hogwild"); }).find("supported: sync, downpour, easgd"),
      std::string::npos);
  PsConfig c;
  c.stalenessBound = -1;
  EXPECT_NE(message([&] { validate(c, 2); }).find("staleness_bound=-1"),
            std::string::npos);
  c.stalenessBound = 0;
  c.backupWorkers = 2;
  EXPECT_NE(message([&] { validate(c, 2); }).find("backup_workers=2"), std::string::npos);
}

TEST(PsRoles, OneServerPerHostFirst) {
  // Hosts A = {0, 1, 2}, B = {3, 4, 5}: servers 2 (A) and 5 (B), then 1.
  Roles r = assignRoles({7, 7, 7, 9, 9, 9}, 3);
  EXPECT_EQ(r.servers, (std::vector<int>{2, 5, 1}));
  EXPECT_EQ(r.workers, (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(r.serverIndexOf(5), 1);
  EXPECT_EQ(r.workerIndexOf(3), 1);
  EXPECT_EQ(r.workerIndexOf(2), -1);
}

}  // namespace
}  // namespace kolo::ps
