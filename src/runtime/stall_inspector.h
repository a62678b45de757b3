// Notices operations that some ranks submitted and others did not.
//
// Fed once per negotiation cycle with every name that is pending somewhere
// but not ready, and which ranks have submitted it. Identical input reaches
// every rank; only rank 0 prints (the runtime decides who prints).
//
// Contract
// - observe(now, pending): a name seen for the first time starts its clock;
//   names absent from `pending` are forgotten (they ran or failed).
// - warning(now): the text to log when some name has waited at least
//   warningSeconds since it was first seen and was not warned about in the
//   last warningSeconds; empty otherwise (always empty when
//   warningSeconds <= 0). The text lists those names (longest waiting
//   first), one line each, with the ranks that have not submitted it, and
//   those that have when they are not more, e.g.
//     "stall: 2 operation(s) waiting for 61 s or more (KOLO_STALL_WARNING=60):\n"
//     "  allreduce 'fc1.weight' waits on ranks 1,3 (submitted by 0,2)\n"
//     "  broadcast 'step' waits on rank 2"
//   The header's wait is the shortest among the listed names, rounded down
//   (whole seconds from 10 s, else tenths). A rank list longer than 16
//   entries shows the first 16 then ",... (40 ranks)".
// - shutdownReason(now): non-empty when a name has waited shutdownSeconds
//   (0 = never): the same listing of every such name, headed
//   "stall: N operation(s) waiting for S s or more exceeded
//   KOLO_STALL_SHUTDOWN=T:"; the runtime then ends the job with it.
// - Not thread-safe (the background thread owns it).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace kolo::runtime {

struct PendingName {
  std::string name;
  std::string kind;             // "allreduce", ... for the message
  std::vector<bool> submitted;  // per rank of the team
};

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  StallInspector(double warningSeconds, double shutdownSeconds);

  void observe(Clock::time_point now, const std::vector<PendingName>& pending);
  std::string warning(Clock::time_point now);
  std::string shutdownReason(Clock::time_point now) const;

 private:
  struct Entry {
    PendingName pending;
    Clock::time_point firstSeen;
    Clock::time_point lastWarned{};
    bool warned = false;
  };
  double warningSeconds_;
  double shutdownSeconds_;
  std::map<std::string, Entry> entries_;
};

}  // namespace kolo::runtime
