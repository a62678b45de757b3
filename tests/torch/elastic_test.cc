// The libtorch side of elastic training (src/frameworks/torch/elastic_state.h,
// checkpoint.h) and the elastic sampler (src/train/elastic_sampler.h), with
// ranks as threads, each with its own Communicator and Context:
// - commit() then restore() puts back the model, the optimizer's momentum
//   and learning rate, the sampler's position and the values: a step after
//   the restore equals, bit for bit, the step taken after the commit;
// - sync() makes every rank's state rank 0's, and commits it;
// - a host change announced to rank 0 interrupts every rank at the same
//   commit (skipSync when hosts were only removed); one announced to
//   another rank does not;
// - checkpoints: save/load round trip, keepLast, the newest of a pattern,
//   no temporary file left; a missing, damaged or foreign file, an
//   unwritable directory and a state that differs from the file are the
//   same clear error on every rank;
// - the sampler re-deals the rest of an epoch after a resize with no
//   sample lost or repeated.
// - elastic::run rolls back after a peer failure and re-forms (here into
//   1-rank worlds of the test's making), keeps the state after a host
//   change, and lets a program error through; under kolorun, with real
//   lost ranks and hosts, it is tested by torch_elastic_* in
//   tests/torch/CMakeLists.txt.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "frameworks/torch/checkpoint.h"
#include "frameworks/torch/distributed_optimizer.h"
#include "frameworks/torch/elastic_state.h"
#include "support/comm_world.h"
#include "support/expect_error.h"

namespace kolo::torch {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

runtime::RuntimeOptions fastOptions() {
  runtime::RuntimeOptions o;
  o.cycleTimeMs = 0.5;
  o.stallWarningSeconds = 0;
  return o;
}

// fn(context) on n thread ranks; the context is the caller's to hand to an
// ElasticState.
void withContexts(int n, const std::function<void(std::shared_ptr<Context>)>& fn) {
  ::torch::set_num_threads(1);
  test::withCommunicators(n, test::testSettings(), [&](Communicator& c) {
    fn(Context::create(borrow(c), fastOptions()));
  });
}

// What one rank trains: a model, SGD with momentum, a sampler, two values.
struct Job {
  ::torch::nn::Sequential model;
  ::torch::optim::SGD sgd;
  train::ElasticSampler sampler;
  ElasticState state;

  Job(std::shared_ptr<Context> ctx, uint64_t seed, double lr, ElasticStateOptions options)
      : model(makeModel(seed)),
        sgd(model->parameters(), ::torch::optim::SGDOptions(lr).momentum(0.9)),
        sampler(40, ctx->rank(), ctx->size(), true, 5),
        state(std::move(ctx), std::move(options)) {
    state.addModel("model", model.ptr());
    state.addOptimizer("optimizer", sgd);
    state.addSampler("sampler", sampler);
    state.addValue("epoch", 0);
    state.addValue("step", 0);
  }

  static ::torch::nn::Sequential makeModel(uint64_t seed) {
    ::torch::manual_seed(seed);  // (serialized by the caller's mutex)
    return ::torch::nn::Sequential(::torch::nn::Linear(3, 4), ::torch::nn::Tanh(),
                                   ::torch::nn::Linear(4, 2));
  }

  // One local step (no reduction) on a fixed batch.
  void step(int k) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(500 + k);
    const auto x = ::torch::randn({4, 3}, gen);
    const auto y = ::torch::randn({4, 2}, gen);
    sgd.zero_grad();
    ::torch::mse_loss(model->forward(x), y).backward();
    sgd.step();
    sampler.recordBatch(2);
    ++state.value("step");
  }

  ::torch::Tensor flat() {
    std::vector<::torch::Tensor> parts;
    for (const auto& p : model->parameters()) parts.push_back(p.detach().reshape(-1));
    return ::torch::cat(parts).clone();
  }
  double lr() { return sgd.param_groups()[0].options().get_lr(); }
};

std::mutex gSeedMu;  // torch's default generator is shared by the thread ranks

std::unique_ptr<Job> makeJob(std::shared_ptr<Context> ctx, uint64_t seed, double lr,
                             ElasticStateOptions options = {}) {
  std::lock_guard<std::mutex> lock(gSeedMu);
  return std::make_unique<Job>(std::move(ctx), seed, lr, std::move(options));
}

TEST(ElasticState, RestorePutsBackTheLastCommitBitForBit) {
  withContexts(2, [](std::shared_ptr<Context> ctx) {
    auto job = makeJob(ctx, 1, 0.1);
    job->step(0);  // momentum buffers exist from here
    job->state.value("epoch") = 3;
    job->state.commit();
    const auto committed = job->flat();
    const int64_t processed = job->sampler.processed();
    job->step(1);
    const auto afterOneStep = job->flat();
    // Wander off: more steps, another learning rate, values, position.
    job->step(2);
    job->sgd.param_groups()[0].options().set_lr(7.0);
    job->state.value("epoch") = 9;
    job->sampler.setEpoch(4);
    job->state.restore();
    EXPECT_TRUE(::torch::equal(job->flat(), committed));
    EXPECT_EQ(job->lr(), 0.1);
    EXPECT_EQ(job->state.value("epoch"), 3);
    EXPECT_EQ(job->state.value("step"), 1);
    EXPECT_EQ(job->sampler.epoch(), 0);
    EXPECT_EQ(job->sampler.processed(), processed);
    // The same step again gives the same parameters: the momentum buffers
    // were restored too.
    job->step(1);
    EXPECT_TRUE(::torch::equal(job->flat(), afterOneStep));
  });
}

TEST(ElasticState, SyncMakesEveryRankRankZerosAndCommitsIt) {
  const int n = 3;
  std::vector<::torch::Tensor> params(n);
  std::vector<::torch::Tensor> afterStep(n);
  std::vector<std::vector<int64_t>> seen(n);
  std::vector<double> lrs(n);
  withContexts(n, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    auto job = makeJob(ctx, 10 + r, 0.1 * (r + 1));
    job->step(r);  // a different momentum on each rank
    job->state.value("epoch") = 10 * r;
    job->sampler.setPosition(r, 2 * r);
    job->state.sync();
    params[r] = job->flat();
    lrs[r] = job->lr();
    seen[r] = {job->state.value("epoch"), job->state.value("step"), job->sampler.epoch(),
               job->sampler.processed()};
    job->step(7);  // equal momentum buffers give equal parameters
    afterStep[r] = job->flat();
    job->state.restore();  // sync committed: back to rank 0's state
    EXPECT_TRUE(::torch::equal(job->flat(), params[r])) << "rank " << r;
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_TRUE(::torch::equal(params[r], params[0])) << "rank " << r;
    EXPECT_TRUE(::torch::equal(afterStep[r], afterStep[0])) << "rank " << r;
    EXPECT_EQ(lrs[r], 0.1) << "rank " << r;
    EXPECT_EQ(seen[r], (std::vector<int64_t>{0, 1, 0, 0})) << "rank " << r;
  }
}

TEST(ElasticState, HostUpdatesAnnouncedToRankZeroInterruptEveryRank) {
  withContexts(3, [](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    auto job = makeJob(ctx, 1, 0.1);
    job->state.commit();  // nothing announced
    if (r == 0) job->state.notifyHostsUpdated(1, /*removedOnly=*/true);
    try {
      job->state.commit();
      ADD_FAILURE() << "rank " << r << ": no HostsUpdatedInterrupt";
    } catch (const HostsUpdatedInterrupt& e) {
      EXPECT_TRUE(e.skipSync()) << "rank " << r;
    }
    job->state.commit();  // the same change is not announced twice
    // Another rank's announcement does not count (rank 0 decides).
    if (r == 1) job->state.notifyHostsUpdated(5);
    job->state.commit();
    if (r == 0) {
      job->state.notifyHostsUpdated(2, true);
      job->state.notifyHostsUpdated(3, false);  // an addition: sync needed
    }
    try {
      job->state.checkHostUpdates();
      ADD_FAILURE() << "rank " << r << ": no HostsUpdatedInterrupt";
    } catch (const HostsUpdatedInterrupt& e) {
      EXPECT_FALSE(e.skipSync()) << "rank " << r;
    }
  });
}

TEST(ElasticState, BadRegistrationsAreClearErrors) {
  withContexts(1, [](std::shared_ptr<Context> ctx) {
    auto job = makeJob(ctx, 1, 0.1);
    auto e = test::expectError([&] { job->state.addValue("step", 1); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(test::contains(e.what(), "'step' is registered twice")) << e.what();
    e = test::expectError([&] { job->state.value("epochs"); });
    EXPECT_TRUE(test::contains(e.what(), "no value named 'epochs'")) << e.what();
    e = test::expectError([&] { job->state.addModel("other", nullptr); });
    EXPECT_TRUE(test::contains(e.what(), "model 'other' is null")) << e.what();
  });
}

// A 1-rank world of its own, named `name`: the next world of a thread rank
// after a reset (what Context::fromEnvironment gives under kolorun).
std::shared_ptr<Context> oneRankContext(const std::string& rendezvous,
                                        const std::string& name) {
  CommunicatorConfig config;
  config.rank = 0;
  config.size = 1;
  config.rendezvous = rendezvous;
  config.hostStore = false;
  config.name = name;
  return Context::create(
      std::make_shared<api::CommunicatorImpl>(config, test::testSettings()),
      fastOptions());
}

// elastic::run on 2 thread ranks whose next worlds have 1 rank each: a
// peer failure rolls back to the last commit, re-forms (the learning rate
// follows the world size, the sampler is re-dealt, the callback runs); a
// host change re-forms without the rollback; a program error ends run().
TEST(ElasticRun, RollsBackAfterAPeerFailureKeepsTheStateAfterAHostChange) {
  auto server = rendezvous::TcpStoreServer::start("127.0.0.1", 0);
  const std::string address = "tcp://127.0.0.1:" + std::to_string(server->port());
  withContexts(2, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    int worlds = 0, calls = 0, resets = 0;
    ElasticStateOptions options;
    options.makeContext = [&] {
      return oneRankContext(address,
                            "r" + std::to_string(r) + "w" + std::to_string(++worlds));
    };
    auto job = makeJob(std::move(ctx), 1, 0.1, options);
    job->state.registerResetCallbacks({[&] { ++resets; }});
    ::torch::Tensor committed;
    const Error e = test::expectError([&] {
      elastic::run(job->state, [&] {
        ++calls;
        if (calls == 1) {
          job->step(0);
          job->state.commit();
          committed = job->flat();
          job->step(1);
          throw Error(ErrorCode::kPeerLost, "a peer died (pretended)");
        }
        if (calls == 2) {
          EXPECT_EQ(job->state.context().size(), 1);
          EXPECT_EQ(job->state.value("step"), 1);
          EXPECT_TRUE(::torch::equal(job->flat(), committed));
          EXPECT_DOUBLE_EQ(job->lr(), 0.05);  // linear rule, 2 -> 1 ranks
          EXPECT_EQ(job->sampler.worldSize(), 1);
          job->step(2);
          job->state.notifyHostsUpdated(1);
          job->state.commit();  // HostsUpdatedInterrupt
          ADD_FAILURE() << "rank " << r << ": no HostsUpdatedInterrupt";
        }
        EXPECT_EQ(job->state.value("step"), 2);  // kept: no rollback
        throw Error(ErrorCode::kMismatch, "a program error");
      });
    });
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(worlds, 2);
    EXPECT_EQ(resets, 2);
  });
}

TEST(ElasticRun, PeerFailuresAreRetriedProgramErrorsAreNot) {
  EXPECT_TRUE(elastic::isPeerFailure(Error(ErrorCode::kPeerLost, "")));
  EXPECT_TRUE(elastic::isPeerFailure(Error(ErrorCode::kTimeout, "")));
  EXPECT_TRUE(elastic::isPeerFailure(Error(ErrorCode::kIo, "")));
  EXPECT_FALSE(elastic::isPeerFailure(Error(ErrorCode::kInvalidArgument, "")));
  EXPECT_FALSE(elastic::isPeerFailure(Error(ErrorCode::kMismatch, "")));
  EXPECT_FALSE(elastic::isPeerFailure(Error(ErrorCode::kNotInitialized, "")));
}

// ---- checkpoints
// -------------------------------------------------------------------------

std::string tempDir() {
  char pattern[] = "/tmp/kolo_ckpt_XXXXXX";
  const char* dir = ::mkdtemp(pattern);
  EXPECT_NE(dir, nullptr);
  return dir;
}

std::set<std::string> filesIn(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename());
  return out;
}

TEST(Checkpoint, SaveLoadRoundTripKeepLastAndTheNewestOfAPattern) {
  const std::string dir = tempDir();
  const std::string pattern = dir + "/ckpt-{step:04d}.pt";
  withContexts(2, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    auto job = makeJob(ctx, 1, 0.1);
    job->state.sync();
    ::torch::Tensor saved;
    for (int k = 0; k < 4; ++k) {
      job->step(k);
      job->sgd.param_groups()[0].options().set_lr(0.1 + k);
      const std::string path = checkpoint::save(pattern, job->state, {.keepLast = 2});
      EXPECT_EQ(path, dir + "/ckpt-000" + std::to_string(k + 1) + ".pt");
      saved = job->flat();
    }
    job->step(9);
    job->state.value("epoch") = 5;
    job->sgd.param_groups()[0].options().set_lr(1e-3);
    const std::string read = checkpoint::load(pattern, job->state);
    EXPECT_EQ(read, dir + "/ckpt-0004.pt") << "rank " << r;
    EXPECT_TRUE(::torch::equal(job->flat(), saved)) << "rank " << r;
    EXPECT_EQ(job->state.value("step"), 4);
    EXPECT_EQ(job->state.value("epoch"), 0);
    EXPECT_EQ(job->sampler.processed(), 16);
    EXPECT_DOUBLE_EQ(job->lr(), 3.1);
    job->state.restore();  // load committed what it read
    EXPECT_TRUE(::torch::equal(job->flat(), saved)) << "rank " << r;
  });
  EXPECT_EQ(filesIn(dir), (std::set<std::string>{"ckpt-0003.pt", "ckpt-0004.pt"}));
  fs::remove_all(dir);
}

// The same kInvalidArgument error, naming `part`, on every rank.
void expectErrorEverywhere(const std::function<void()>& fn, const std::string& part,
                           std::vector<std::string>& messages, int rank) {
  const Error e = test::expectError(fn);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(test::contains(e.what(), part)) << e.what();
  messages[rank] = e.what();
}

TEST(Checkpoint, BadFilesAreTheSameClearErrorOnEveryRank) {
  const std::string dir = tempDir();
  { std::ofstream(dir + "/text.pt") << "not an archive"; }
  const std::string good = dir + "/good.pt";
  const int n = 2;
  std::vector<std::vector<std::string>> messages(5, std::vector<std::string>(n));
  withContexts(n, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    auto job = makeJob(ctx, 1, 0.1);
    expectErrorEverywhere([&] { checkpoint::load(dir + "/missing.pt", job->state); },
                          "cannot load '" + dir + "/missing.pt'", messages[0], r);
    expectErrorEverywhere(
        [&] { checkpoint::load(dir + "/text.pt", job->state); },
        "cannot load '" + dir + "/text.pt': not a readable kolo C++ checkpoint",
        messages[1], r);
    expectErrorEverywhere(
        [&] { checkpoint::save(dir + "/no/such/dir/x.pt", job->state); },
        "cannot write '" + dir + "/no/such/dir/x.pt'", messages[2], r);
    checkpoint::save(good, job->state);
    if (r == 0) {  // torn: cut in half (a save never leaves this)
      const auto size = fs::file_size(good);
      fs::copy_file(good, dir + "/torn.pt");
      fs::resize_file(dir + "/torn.pt", size / 2);
    }
    expectErrorEverywhere([&] { checkpoint::load(dir + "/torn.pt", job->state); },
                          "cannot load '" + dir + "/torn.pt'", messages[3], r);
    // A state with an entry the file lacks.
    job->state.addValue("extra", 1);
    expectErrorEverywhere([&] { checkpoint::load(good, job->state); },
                          "no integer entry 'value/extra'", messages[4], r);
  });
  for (const auto& m : messages) EXPECT_EQ(m[0], m[1]);
  // Nothing but the files written here: no temporary file left behind.
  EXPECT_EQ(filesIn(dir), (std::set<std::string>{"text.pt", "good.pt", "torn.pt"}));
  fs::remove_all(dir);
}

// ---- sampler
// ------------------------------------------------------------------------------

TEST(ElasticSampler, ReDealsTheRestAfterAResizeWithNoSampleLostOrRepeated) {
  const int64_t n = 103;
  std::vector<train::ElasticSampler> ranks;
  for (int r = 0; r < 3; ++r) ranks.emplace_back(n, r, 3, true, 9);
  std::multiset<int64_t> seen;
  // Two batches of 7 on each of 3 ranks, then the world shrinks to 2.
  for (auto& s : ranks) {
    for (int i = 0; i < 14; ++i) seen.insert(s.indices()[static_cast<size_t>(i)]);
    s.recordBatch(7);
    s.recordBatch(7);
  }
  EXPECT_EQ(ranks[0].processed(), 42);
  for (int r = 0; r < 2; ++r) {
    ranks[static_cast<size_t>(r)].reset(r, 2);
    for (int64_t i : ranks[static_cast<size_t>(r)].indices()) seen.insert(i);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(n));
  // Another epoch is another order; the same epoch is the same one.
  train::ElasticSampler a(n, 0, 1, true, 9), b(n, 0, 1, true, 9);
  b.setEpoch(1);
  EXPECT_NE(a.indices(), b.indices());
  b.setEpoch(0);
  EXPECT_EQ(a.indices(), b.indices());
  auto e = test::expectError([&] { a.reset(2, 2); });
  EXPECT_TRUE(test::contains(e.what(), "rank 2 is not in a world of 2")) << e.what();
  e = test::expectError([&] { a.setPosition(0, n + 1); });
  EXPECT_TRUE(test::contains(e.what(), "position 104 is outside a dataset of 103"))
      << e.what();
}

}  // namespace
}  // namespace kolo::torch
