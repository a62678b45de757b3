// A job of n ranks as n forked processes of the test, for tests that kill,
// stop or crash ranks.
//
// The rendezvous is a file store in a fresh temporary directory (a store
// server thread in the parent would be unsafe to fork: a child can inherit
// a lock that thread held, e.g. the allocator's), and the parent forks one
// child per rank; each child runs body(rank, rendezvous) and
// exits with its return value. Children's stdout and stderr are captured
// through one pipe each. waitAll() reaps every child, killing (and
// reporting as hung) any that is still running at the deadline, so a test
// never hangs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kolo {
class Error;
namespace api {
class CommunicatorImpl;
}
}  // namespace kolo

namespace kolo::test {

struct RankOutcome {
  int rank = 0;
  bool exited = false;  // exited normally (else killed by a signal)
  int exitCode = -1;    // when exited
  int signal = 0;       // when killed
  bool hung = false;    // still running at the deadline (then killed)
  double seconds = 0;   // from start() to its end
  std::string output;   // everything it printed
};

class ProcessRanks {
 public:
  using Body = std::function<int(int rank, const std::string& rendezvous)>;

  ProcessRanks(int n, Body body);
  ~ProcessRanks();  // kills and reaps whatever is left

  int pid(int rank) const { return pids_[rank]; }
  void signal(int rank, int sig);
  // Seconds since the children were started.
  double elapsed() const;

  // Waits until every rank printed `text` (true), or until `deadline`
  // passed or a rank ended without printing it (false).
  bool waitForOutput(const std::string& text, std::chrono::milliseconds deadline);

  // Reaps all children, waiting at most `deadline` from now for the rest.
  std::vector<RankOutcome> waitAll(std::chrono::milliseconds deadline);

 private:
  void drainOutput(bool block);

  std::string dir_;  // the file store's directory
  std::vector<int> pids_;
  std::vector<int> pipes_;
  std::vector<RankOutcome> outcomes_;
  std::chrono::steady_clock::time_point start_;
};

// The communicator of `rank` in a ProcessRanks job of `size` ranks, made in
// that rank's process: `rendezvous` is the job's file store (no rank hosts
// a store), KOLO_TIMEOUT is `timeoutSeconds`, KOLO_CONNECT_TIMEOUT 20 s,
// KOLO_TRANSPORT `transport`. Throws what the communicator's set-up throws.
std::unique_ptr<api::CommunicatorImpl> connectRank(int rank, int size,
                                                   const std::string& rendezvous,
                                                   double timeoutSeconds,
                                                   const std::string& transport = "auto");

// Prints "rank R STATE" on a line of its own and flushes it, for the
// parent to see at once (waitForOutput) and for the outcome's output.
void sayRank(int rank, const char* state);

// For a rank body's catch: prints "rank R error code C: MESSAGE" (what the
// tests look for in the rank's output) and ends the process with status C
// at once (_exit: no destructors, so no closing barrier with peers that are
// gone and no use of a broken communicator).
[[noreturn]] void exitWithError(int rank, const Error& e);

}  // namespace kolo::test
