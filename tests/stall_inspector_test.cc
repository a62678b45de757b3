// StallInspector alone, on a simulated clock: the warning text, once per
// interval, forgetting names that ran, the shutdown reason, long rank lists.
#include "runtime/stall_inspector.h"

#include <gtest/gtest.h>

namespace kolo::runtime {
namespace {

using Clock = StallInspector::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

PendingName pending(const std::string& name, const std::string& kind,
                    std::vector<bool> submitted) {
  return PendingName{name, kind, std::move(submitted)};
}

TEST(StallInspector, NoWarningBeforeTheInterval) {
  StallInspector s(60, 0);
  const Clock::time_point t0{};
  s.observe(t0, {pending("w", "allreduce", {true, false})});
  EXPECT_EQ(s.warning(t0), "");
  s.observe(t0 + seconds(59), {pending("w", "allreduce", {true, false})});
  EXPECT_EQ(s.warning(t0 + seconds(59)), "");
  EXPECT_EQ(s.shutdownReason(t0 + seconds(59)), "");  // 0: never
}

TEST(StallInspector, WarningTextExactly) {
  StallInspector s(60, 0);
  const Clock::time_point t0{};
  s.observe(t0, {pending("fc1.weight", "allreduce", {true, false, true, false})});
  s.observe(t0 + seconds(5),
            {pending("fc1.weight", "allreduce", {true, false, true, false}),
             pending("step", "broadcast", {true, true, false, true})});
  const std::vector<PendingName> now = {
      pending("fc1.weight", "allreduce", {true, false, true, false}),
      pending("step", "broadcast", {true, true, false, true}),
      pending("young", "allgather", {false, false, false, true})};
  s.observe(t0 + milliseconds(66500), now);
  EXPECT_EQ(s.warning(t0 + milliseconds(66500)),
            "stall: 2 operation(s) waiting for 61 s or more (KOLO_STALL_WARNING=60):\n"
            "  allreduce 'fc1.weight' waits on ranks 1,3 (submitted by 0,2)\n"
            "  broadcast 'step' waits on rank 2");
}

TEST(StallInspector, SubmittersListedOnlyWhenNotMore) {
  StallInspector s(1, 0);
  const Clock::time_point t0{};
  s.observe(t0, {pending("a", "allreduce", {true, false, false, false}),
                 pending("b", "allreduce", {true, true, true, false})});
  EXPECT_EQ(s.warning(t0 + milliseconds(1500)),
            "stall: 2 operation(s) waiting for 1.5 s or more (KOLO_STALL_WARNING=1):\n"
            "  allreduce 'a' waits on ranks 1,2,3 (submitted by 0)\n"
            "  allreduce 'b' waits on rank 3");
}

TEST(StallInspector, OncePerInterval) {
  StallInspector s(10, 0);
  const Clock::time_point t0{};
  const PendingName w = pending("w", "allreduce", {false, true});
  const PendingName v = pending("v", "allreduce", {true, false});
  s.observe(t0, {w});
  EXPECT_EQ(s.warning(t0 + seconds(10)),
            "stall: 1 operation(s) waiting for 10 s or more (KOLO_STALL_WARNING=10):\n"
            "  allreduce 'w' waits on rank 0 (submitted by 1)");
  // Asked again at once and during the next interval: nothing new.
  EXPECT_EQ(s.warning(t0 + seconds(10)), "");
  s.observe(t0 + seconds(15), {w, v});
  EXPECT_EQ(s.warning(t0 + seconds(19)), "");
  // 'w' is due again one interval after its warning; 'v' is not due yet.
  EXPECT_EQ(s.warning(t0 + seconds(20)),
            "stall: 1 operation(s) waiting for 20 s or more (KOLO_STALL_WARNING=10):\n"
            "  allreduce 'w' waits on rank 0 (submitted by 1)");
  // 'v' reaches its interval and is listed alone.
  EXPECT_EQ(s.warning(t0 + seconds(25)),
            "stall: 1 operation(s) waiting for 10 s or more (KOLO_STALL_WARNING=10):\n"
            "  allreduce 'v' waits on rank 1 (submitted by 0)");
  EXPECT_EQ(s.warning(t0 + seconds(29)), "");
  // Both due together: longest waiting first, the header names the shorter.
  EXPECT_EQ(s.warning(t0 + seconds(35)),
            "stall: 2 operation(s) waiting for 20 s or more (KOLO_STALL_WARNING=10):\n"
            "  allreduce 'w' waits on rank 0 (submitted by 1)\n"
            "  allreduce 'v' waits on rank 1 (submitted by 0)");
}

TEST(StallInspector, RepeatsAfterAnInterval) {
  StallInspector s(10, 0);
  const Clock::time_point t0{};
  const std::vector<PendingName> p = {pending("w", "allreduce", {false, true})};
  s.observe(t0, p);
  EXPECT_NE(s.warning(t0 + seconds(10)), "");
  s.observe(t0 + seconds(19), p);
  EXPECT_EQ(s.warning(t0 + seconds(19)), "");
  s.observe(t0 + seconds(20), p);
  EXPECT_EQ(s.warning(t0 + seconds(20)),
            "stall: 1 operation(s) waiting for 20 s or more (KOLO_STALL_WARNING=10):\n"
            "  allreduce 'w' waits on rank 0 (submitted by 1)");
}

TEST(StallInspector, ForgetsNamesThatRan) {
  StallInspector s(10, 30);
  const Clock::time_point t0{};
  s.observe(t0, {pending("w", "allreduce", {true, false})});
  // 'w' ran (absent), then a new 'w' appears: its clock starts again.
  s.observe(t0 + seconds(9), {});
  EXPECT_EQ(s.warning(t0 + seconds(11)), "");
  s.observe(t0 + seconds(12), {pending("w", "allreduce", {true, false})});
  EXPECT_EQ(s.warning(t0 + seconds(21)), "");
  EXPECT_EQ(s.shutdownReason(t0 + seconds(41)), "");
  EXPECT_NE(s.warning(t0 + seconds(22)), "");
  EXPECT_NE(s.shutdownReason(t0 + seconds(42)), "");
}

TEST(StallInspector, SubmittedRanksUpdateButTheClockStays) {
  StallInspector s(10, 0);
  const Clock::time_point t0{};
  s.observe(t0, {pending("w", "allreduce", {true, false, false})});
  s.observe(t0 + seconds(5), {pending("w", "allreduce", {true, true, false})});
  EXPECT_EQ(s.warning(t0 + seconds(10)),
            "stall: 1 operation(s) waiting for 10 s or more (KOLO_STALL_WARNING=10):\n"
            "  allreduce 'w' waits on rank 2");
}

TEST(StallInspector, ShutdownReason) {
  StallInspector s(5, 30);
  const Clock::time_point t0{};
  s.observe(t0, {pending("old", "allreduce", {true, false, true})});
  s.observe(t0 + seconds(20), {pending("old", "allreduce", {true, false, true}),
                               pending("new", "alltoall", {false, true, true})});
  EXPECT_EQ(s.shutdownReason(t0 + milliseconds(29900)), "");
  EXPECT_EQ(s.shutdownReason(t0 + seconds(31)),
            "stall: 1 operation(s) waiting for 31 s or more exceeded "
            "KOLO_STALL_SHUTDOWN=30:\n"
            "  allreduce 'old' waits on rank 1");
  // Calling it changes nothing (const): both names once both are over.
  EXPECT_EQ(s.shutdownReason(t0 + seconds(52)),
            "stall: 2 operation(s) waiting for 32 s or more exceeded "
            "KOLO_STALL_SHUTDOWN=30:\n"
            "  allreduce 'old' waits on rank 1\n"
            "  alltoall 'new' waits on rank 0");
}

TEST(StallInspector, LongRankListsShortened) {
  StallInspector s(1, 0);
  const Clock::time_point t0{};
  std::vector<bool> submitted(40, false);
  submitted[0] = true;
  submitted[39] = true;
  std::vector<bool> exactly16(17, false);
  exactly16[16] = true;
  s.observe(t0, {pending("many", "allreduce", submitted),
                 pending("sixteen", "allreduce", exactly16)});
  EXPECT_EQ(
      s.warning(t0 + seconds(2)),
      "stall: 2 operation(s) waiting for 2 s or more (KOLO_STALL_WARNING=1):\n"
      "  allreduce 'many' waits on ranks 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,... "
      "(38 ranks) (submitted by 0,39)\n"
      "  allreduce 'sixteen' waits on ranks 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 "
      "(submitted by 16)");
}

TEST(StallInspector, ZeroWarningSecondsNeverWarns) {
  StallInspector s(0, 0);
  const Clock::time_point t0{};
  s.observe(t0, {pending("w", "allreduce", {true, false})});
  EXPECT_EQ(s.warning(t0 + seconds(1000)), "");
}

}  // namespace
}  // namespace kolo::runtime
