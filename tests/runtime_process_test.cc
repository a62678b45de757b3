// The runtime with ranks as real processes (tests/support/process_ranks.h):
// a rank killed mid-run fails every other rank's pending handles with an
// error naming it, and later submissions at once; a stall (a tensor some
// ranks never submit) is warned about naming the missing rank, and
// KOLO_STALL_SHUTDOWN ends the runtime on every rank with that text.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "api/communicator_impl.h"
#include "common/logging.h"
#include "runtime/runtime.h"
#include "support/process_ranks.h"

namespace kolo::runtime {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<Communicator> connect(int rank, int size, const std::string& rendezvous) {
  return test::connectRank(rank, size, rendezvous, 30);
}

OpRequest allreduce(const std::string& name, std::vector<float>& buf) {
  OpRequest r;
  r.spec.name = name;
  r.spec.shape = {static_cast<int64_t>(buf.size())};
  r.input = r.output = buf.data();
  return r;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Each rank: one operation only it submits (stays pending), then steps of
// a 1 MiB allreduce until one fails; prints the errors of both handles and
// of a later submission, and exits with the step error's code (without
// destructors: the job is broken) eight seconds later.
int stepUntilError(int rank, int size, const std::string& rendezvous) {
  auto comm = connect(rank, size, rendezvous);
  RuntimeOptions o;
  o.stallWarningSeconds = 0;
  auto* rt = new Runtime(comm, o);
  std::vector<float> mine(4, 1), buf(1 << 18, 1);
  auto pending = rt->enqueue(allreduce("only." + std::to_string(rank), mine));
  for (long i = 0;; ++i) {
    try {
      rt->enqueue(allreduce("step", buf))->wait();
    } catch (const Error& e) {
      say("step error code " + std::to_string(int(e.code())) + ": " + e.what());
      try {
        pending->wait();
      } catch (const Error& p) {
        say("pending error code " + std::to_string(int(p.code())) + ": " + p.what());
      }
      auto later = rt->enqueue(allreduce("later", mine));
      say(std::string("later done at once: ") + (later->poll() ? "yes" : "no"));
      try {
        later->wait();
      } catch (const Error& l) {
        say(std::string("later error: ") + l.what());
      }
      // Stay a while, so the other survivor also hears of the killed rank
      // first (not of this one's exit), even on a loaded machine where it
      // may take seconds to notice.
      sleep(8);
      _exit(static_cast<int>(e.code()));
    }
    if (i == 0) say("rank " + std::to_string(rank) + " running");
  }
}

TEST(RuntimeProcessTest, KilledRankFailsPendingHandlesOnEveryOtherRank) {
  const int n = 3;
  test::ProcessRanks ranks(n, [&](int rank, const std::string& address) {
    return stepUntilError(rank, n, address);
  });
  ASSERT_TRUE(ranks.waitForOutput("running", milliseconds(60000)));
  ranks.signal(1, SIGKILL);
  auto outcomes = ranks.waitAll(milliseconds(30000));
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  // The survivor waiting on the killed rank names it. The other one may be
  // waiting on that survivor over shared memory, which has no heartbeats
  // (docs/collectives.md): it then names the survivor once that one exits.
  // A transport names it either as "lost rank 1" (a closed socket, a missed
  // heartbeat) or as "rank 1 (pid P) died" (the shm peer watch).
  auto namesRankOne = [](const std::string& out) {
    return out.find("lost rank 1") != std::string::npos ||
           out.find("rank 1 (pid ") != std::string::npos;
  };
  EXPECT_TRUE(namesRankOne(outcomes[0].output) || namesRankOne(outcomes[2].output))
      << outcomes[0].output << "\n---\n"
      << outcomes[2].output;
  for (int r : {0, 2}) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << " hung:\n" << o.output;
    EXPECT_TRUE(o.exited) << o.output;
    EXPECT_EQ(o.exitCode, static_cast<int>(ErrorCode::kPeerLost)) << o.output;
    const std::string code = std::to_string(int(ErrorCode::kPeerLost));
    EXPECT_NE(o.output.find("step error code " + code), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("pending error code " + code), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("later done at once: yes"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("later error: "), std::string::npos) << o.output;
  }
}

// Ranks 0 and 2 submit 'late.tensor', rank 1 never does: rank 0 warns
// naming rank 1, then the stall shutdown fails the pending operation on
// every rank with the stall text (kTimeout).
int stall(int rank, int size, const std::string& rendezvous) {
  auto comm = connect(rank, size, rendezvous);
  RuntimeOptions o;
  o.stallWarningSeconds = 0.3;
  o.stallShutdownSeconds = 1.5;
  Runtime rt(comm, o);
  std::vector<float> a(4, 1), b(4, 1);
  auto other = rt.enqueue(allreduce("on.time", b));
  HandlePtr h = rank == 1 ? other : rt.enqueue(allreduce("late.tensor", a));
  other->wait();
  say("on.time done " + std::to_string(b[0]));
  try {
    h->wait();
    if (rank == 1) {
      // Rank 1 has nothing pending: it learns of the end through a later
      // submission that never completes normally.
      rt.enqueue(allreduce("late.other", a))->wait();
    }
    say("no error");
    return 1;
  } catch (const Error& e) {
    say("error code " + std::to_string(int(e.code())) + ": " + e.what());
  }
  return 0;
}

TEST(RuntimeProcessTest, StallIsWarnedThenShutsDownNamingTheMissingRank) {
  const int n = 3;
  test::ProcessRanks ranks(
      n, [&](int rank, const std::string& address) { return stall(rank, n, address); });
  auto outcomes = ranks.waitAll(milliseconds(30000));
  for (int r = 0; r < n; ++r) {
    const auto& o = outcomes[r];
    EXPECT_FALSE(o.hung) << "rank " << r << ":\n" << o.output;
    EXPECT_EQ(o.exitCode, 0) << o.output;
    EXPECT_NE(o.output.find("on.time done 3"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("error code " + std::to_string(int(ErrorCode::kTimeout))),
              std::string::npos)
        << o.output;
    EXPECT_NE(o.output.find("KOLO_STALL_SHUTDOWN"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("allreduce 'late.tensor' waits on rank 1"), std::string::npos)
        << o.output;
  }
  // The warning came first, from rank 0 only.
  EXPECT_NE(outcomes[0].output.find("KOLO_STALL_WARNING"), std::string::npos)
      << outcomes[0].output;
  EXPECT_EQ(outcomes[1].output.find("KOLO_STALL_WARNING"), std::string::npos)
      << outcomes[1].output;
}

}  // namespace
}  // namespace kolo::runtime
