// The runtime's operations skip the communicator's descriptor exchange
// (runtime/agreed_scope.h): its negotiation agreed on them already.
// Checked here with real communicators: the runtime's collectives skip it,
// direct calls still exchange, an agreed operation with a bad argument
// fails every rank naming the rank (no hang), and a rank that exits while
// its runtime runs operations fails the other ranks at once with "left the
// job" (its closing step lands between the runtime's cycles, where the
// others meet it in the checked exchange of the negotiation).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <string>
#include <vector>

#include "api/communicator_impl.h"
#include "runtime/agreed_scope.h"
#include "runtime/runtime.h"
#include "support/comm_world.h"
#include "support/process_ranks.h"

namespace kolo::runtime {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<Communicator> borrow(Communicator& c) {
  return std::shared_ptr<Communicator>(&c, [](Communicator*) {});
}

api::CommunicatorImpl& impl(Communicator& c) {
  return dynamic_cast<api::CommunicatorImpl&>(c);
}

OpRequest broadcast(const std::string& name, std::vector<float>& buf, int root) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kBroadcast;
  r.spec.root = root;
  r.spec.shape = {static_cast<int64_t>(buf.size())};
  r.input = r.output = buf.data();
  return r;
}

OpRequest allgather(const std::string& name, std::vector<float>& buf) {
  OpRequest r;
  r.spec.name = name;
  r.spec.kind = OpKind::kAllgather;
  r.spec.shape = {static_cast<int64_t>(buf.size())};
  r.input = buf.data();
  return r;
}

class RuntimeAgreement : public ::testing::TestWithParam<const char*> {};

// Every kind that always takes the exchange path (broadcast, allgather;
// the shm allreduce checks inside its first step instead): through the
// runtime each collective skips it, and the ranks count alike; a direct
// call on the same communicator, before and after, exchanges.
TEST_P(RuntimeAgreement, RuntimeOperationsSkipTheExchangeDirectCallsKeepIt) {
  const int n = 3;
  const int kOps = 12;
  std::mutex mu;
  std::vector<api::CommunicatorImpl::AgreementCounts> during(n);
  test::withCommunicators(n, test::testSettings(GetParam()), [&](Communicator& c) {
    auto& comm = impl(c);
    std::vector<float> one(4, static_cast<float>(c.rank()));
    BroadcastOptions direct;
    direct.buffer = one.data();
    direct.count = one.size();
    auto before = comm.agreementCounts();
    c.broadcast(direct);
    auto after = comm.agreementCounts();
    EXPECT_EQ(after.exchanged, before.exchanged + 1) << "rank " << c.rank();
    EXPECT_EQ(after.skipped, before.skipped) << "rank " << c.rank();

    before = comm.agreementCounts();
    {
      RuntimeOptions o;
      o.cycleTimeMs = 0.5;
      o.stallWarningSeconds = 0;
      Runtime rt(borrow(c), o);
      std::vector<std::vector<float>> bufs(kOps, std::vector<float>(8));
      std::vector<HandlePtr> handles;
      for (int i = 0; i < kOps; ++i) {
        std::fill(bufs[i].begin(), bufs[i].end(), static_cast<float>(c.rank() + i));
        const std::string name = "op." + std::to_string(i);
        handles.push_back(rt.enqueue(i % 2 == 0 ? broadcast(name, bufs[i], i % n)
                                                : allgather(name, bufs[i])));
      }
      for (int i = 0; i < kOps; ++i) {
        handles[i]->wait();
        if (i % 2 == 0) {  // the root's values arrived
          EXPECT_EQ(bufs[i][0], static_cast<float>(i % n + i)) << "op." << i;
        } else {
          EXPECT_EQ(handles[i]->output().size(), n * bufs[i].size() * sizeof(float));
        }
      }
      OpRequest end;
      end.spec.name = "end";
      end.spec.kind = OpKind::kBarrier;
      rt.enqueue(end)->wait();
      rt.shutdown();
    }
    after = comm.agreementCounts();
    {
      std::lock_guard<std::mutex> lock(mu);
      during[c.rank()] = {after.exchanged - before.exchanged,
                          after.skipped - before.skipped};
    }
    EXPECT_GE(after.skipped - before.skipped, static_cast<uint64_t>(kOps))
        << "rank " << c.rank() << ": the runtime's collectives exchanged descriptors";
    // The negotiation's own fixed-part allgather stays checked: one per cycle.
    EXPECT_GE(after.exchanged - before.exchanged, 1u) << "rank " << c.rank();

    before = comm.agreementCounts();
    c.broadcast(direct);
    after = comm.agreementCounts();
    EXPECT_EQ(after.exchanged, before.exchanged + 1) << "rank " << c.rank();
    EXPECT_EQ(after.skipped, before.skipped) << "rank " << c.rank();
  });
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(during[r].exchanged, during[0].exchanged) << "rank " << r;
    EXPECT_EQ(during[r].skipped, during[0].skipped) << "rank " << r;
  }
}

// A rank whose arguments fail validation in an agreed collective cannot
// tell the others in an exchange: its communicator breaks (kInternal, its
// message), and the others, waiting for its data, fail with its abort
// notice naming it instead of waiting until the timeout.
TEST_P(RuntimeAgreement, AgreedOperationWithABadArgumentFailsEveryRankNamingIt) {
  const int n = 3;
  std::mutex mu;
  std::vector<std::string> errors(n);
  std::vector<ErrorCode> codes(n, ErrorCode::kOk);
  // Every rank's set-up done first: rank 1's abort notice must not meet a
  // rank still finishing the set-up's barrier.
  std::latch connected(n);
  test::withCommunicators(n, test::testSettings(GetParam()), [&](Communicator& c) {
    connected.arrive_and_wait();
    std::vector<float> buf(16, 1.0f), recv(16 * n);
    AllgatherOptions o;
    o.send = c.rank() == 1 ? nullptr : buf.data();  // rank 1's is invalid
    o.recv = recv.data();
    o.count = buf.size();
    try {
      runtime::AgreedScope scope(c);
      scope.agreedFromHere();
      c.allgather(o);
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors[c.rank()] = e.what();
      codes[c.rank()] = e.code();
    }
  });
  EXPECT_EQ(codes[1], ErrorCode::kInternal) << errors[1];
  EXPECT_NE(errors[1].find("rank 1: allgather: send buffer is null"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[1].find("agreed on"), std::string::npos) << errors[1];
  for (int r : {0, 2}) {
    EXPECT_NE(codes[r], ErrorCode::kOk) << "rank " << r << " did not fail";
    EXPECT_NE(errors[r].find("rank 1"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, RuntimeAgreement, ::testing::Values("tcp", "auto"));

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Each rank: steps of 32 broadcasts through the runtime (one collective
// each, all agreed), waited for. In step 10 rank 1 exits (std::exit, its
// runtime still running) as soon as the step's first broadcast is done, so
// its exit goodbye starts while its runtime is in the middle of a cycle;
// the others print their error and exit with its code.
int exitWhileBusy(int rank, int size, const std::string& rendezvous,
                  const std::string& transport) {
  Settings s;
  s.transport = transport;
  s.timeoutSeconds = 30;
  s.connectTimeoutSeconds = 20;
  CommunicatorConfig config;
  config.rank = rank;
  config.size = size;
  config.rendezvous = rendezvous;
  config.hostStore = false;
  auto comm = std::make_shared<api::CommunicatorImpl>(config, s);
  RuntimeOptions o;
  o.stallWarningSeconds = 0;
  auto* rt = new Runtime(comm, o);  // never destroyed: rank 1 exits with it running
  constexpr int kPerStep = 32;
  // 1 MiB each: a step lasts long enough for the goodbye to start in it.
  std::vector<std::vector<float>> bufs(kPerStep, std::vector<float>(1 << 18, 1.0f));
  for (int step = 0;; ++step) {
    std::vector<HandlePtr> handles;
    for (int i = 0; i < kPerStep; ++i) {
      handles.push_back(
          rt->enqueue(broadcast("b." + std::to_string(i), bufs[i], i % size)));
    }
    if (rank == 1 && step == 10) {
      // Mid-cycle: the first broadcast is done, the others still to run.
      handles.front()->wait();
      std::exit(0);  // atexit handlers only
    }
    try {
      for (auto& h : handles) h->wait();
    } catch (const Error& e) {
      say("rank " + std::to_string(rank) + " error code " +
          std::to_string(static_cast<int>(e.code())) + ": " + e.what());
      _exit(static_cast<int>(e.code()));
    }
    if (step == 0) say("rank " + std::to_string(rank) + " running");
  }
}

class RuntimeDeparture : public ::testing::TestWithParam<const char*> {};

TEST_P(RuntimeDeparture, RankThatExitsWhileItsRuntimeRunsFailsTheOthersAtOnce) {
  const int n = 3;
  const std::string transport = GetParam();
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return exitWhileBusy(rank, n, address, transport);
  });
  auto outcomes = ranks.waitAll(milliseconds(60000));
  EXPECT_TRUE(outcomes[1].exited && outcomes[1].exitCode == 0) << outcomes[1].output;
  for (int r : {0, 2}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung; output:\n" << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kPeerLost)) << o.output;
    EXPECT_NE(o.output.find("rank 1 left the job (exited without finalize)"),
              std::string::npos)
        << o.output;
    // Under KOLO_TIMEOUT (30 s) from the start: rank 1's goodbye, not a
    // timeout (a goodbye that met an agreed collective would wait for it).
    EXPECT_LT(o.seconds, 25.0) << "rank " << r << ":\n" << o.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, RuntimeDeparture, ::testing::Values("tcp", "auto"));

}  // namespace
}  // namespace kolo::runtime
