// The scale model's formulas (src/predict/allreduce_model.h,
// eager_schedule.h) against hand-computed values, with the round-number
// constants of support/predict_shapes.h. The fit, the constants file and
// the units are tested in predict_fit_test, kolo's selection by the model
// in predict_selection_test.
#include <gtest/gtest.h>

#include <cmath>

#include "predict/allreduce_model.h"
#include "predict/constants.h"
#include "predict/eager_schedule.h"
#include "support/predict_shapes.h"

namespace kolo::predict_shapes {
namespace {

// ---- formulas ------------------------------------------------------------------

TEST(AllreduceModel, TreePowerOfTwo) {
  // 2 steps of (alpha + b beta + b gamma) = 2 * 11.5 us, + call 3 us.
  EXPECT_NEAR(us(Algorithm::kTree, 1000, oneHostTcp(4), roundConstants()), 26.0, 1e-9);
}

TEST(AllreduceModel, TreeFoldsTheExtraRank) {
  // n = 3: fold-in (11.5), one step (11.5), fold-back without reduction
  // (11), call (3).
  EXPECT_NEAR(us(Algorithm::kTree, 1000, oneHostTcp(3), roundConstants()), 37.0, 1e-9);
}

TEST(AllreduceModel, Ring) {
  // 4096 B over 4 ranks: segments of 1024 B, one message each; 3 reduced
  // steps (10 + 1.024 + 0.512) and 3 copied (10 + 1.024), + call 3.
  EXPECT_NEAR(us(Algorithm::kRing, 4096, oneHostTcp(4), roundConstants()),
              3 * 11.536 + 3 * 11.024 + 3, 1e-9);
}

TEST(AllreduceModel, RingChunksCostMessages) {
  // 2 ranks, 1 MiB: segments of 512 KiB in 4 chunks of 128 KiB: each step
  // pays 3 messages beyond the first (2 us each).
  const double m = 512 * 1024;
  const double reduced = 10 + m * 1e-3 + m * 0.5e-3 + 3 * 2;
  const double copied = 10 + m * 1e-3 + 3 * 2;
  EXPECT_NEAR(us(Algorithm::kRing, 1 << 20, oneHostTcp(2), roundConstants()),
              reduced + copied + 3, 1e-6);
}

TEST(AllreduceModel, HalvingDoubling) {
  // 4096 B over 4 ranks: halving 2048 B then 1024 B (reduced), doubling
  // 1024 B then 2048 B.
  const double expected =
      (10 + 2.048 + 1.024) + (10 + 1.024 + 0.512) + (10 + 1.024) + (10 + 2.048) + 3;
  EXPECT_NEAR(us(Algorithm::kRhd, 4096, oneHostTcp(4), roundConstants()), expected, 1e-9);
}

TEST(AllreduceModel, ContentionOnTheHostLink) {
  // 2 hosts x 2 ranks, 1 Gbit/s links (8 ns/B), 5 us latency. Tree step 1
  // pairs inside hosts over shm (1 + 0.1 + 0.5); step 2 pairs across:
  // both ranks of a host share its link, so a byte costs 2 * 8 ns:
  // 10 + 5 + 1000 * 16 ns + 0.5 = 31.5; call of the link's path 3.
  JobShape s;
  s.ranks = 4;
  s.ranksPerHost = 2;
  s.linkBps = 1e9;
  s.linkMtu = 0;  // the rate is the payload's (HeadersShareTheLink)
  s.linkLatency = 5 * kUs;
  EXPECT_NEAR(us(Algorithm::kTree, 1000, s, roundConstants()), 1.6 + 31.5 + 3, 1e-9);
  // The ring crosses each host link with one flow: steps cost
  // max(shm pair, tcp pair at 8 ns/B); segments of whole elements
  // (ceil(250 / 4) floats = 252 B).
  const double m = 252;
  const double reduced = 10 + 5 + m * 8e-3 + m * 0.5e-3;
  const double copied = 10 + 5 + m * 8e-3;
  EXPECT_NEAR(us(Algorithm::kRing, 1000, s, roundConstants()),
              3 * reduced + 3 * copied + 3, 1e-9);
}

TEST(AllreduceModel, Hierarchical) {
  // 2 hosts x 2 ranks, 1000 B: local binomial reduce (shm 1.6), across the
  // 2 hosts the selection's flat algorithm (tree: 10 + 5 + 8 + 0.5), the
  // broadcast inside the host (1 + 0.1), call 3.
  JobShape s;
  s.ranks = 4;
  s.ranksPerHost = 2;
  s.linkBps = 1e9;
  s.linkMtu = 0;  // the rate is the payload's (HeadersShareTheLink)
  s.linkLatency = 5 * kUs;
  EXPECT_NEAR(us(Algorithm::kHier, 1000, s, roundConstants()), 1.6 + 23.5 + 1.1 + 3,
              1e-9);
}

TEST(AllreduceModel, SharedMemoryArena) {
  // 2 ranks, 64 KiB in one 128 KiB chunk: two synchronisations, 1.5 C
  // staged and copied, 0.5 C reduced, call 0.5.
  JobShape s;
  s.ranks = 2;
  s.ranksPerHost = 2;
  s.shmArena = true;
  const double C = 65536;
  EXPECT_NEAR(us(Algorithm::kShm, 65536, s, roundConstants()),
              2 + 1.5 * C * 0.1e-3 + 0.5 * C * 0.5e-3 + 0.5, 1e-9);
  // Inline path (<= 24 B): one synchronisation and n * b reduced.
  EXPECT_NEAR(us(Algorithm::kShm, 16, s, roundConstants()), 1 + 2 * 16 * 0.5e-3 + 0.5,
              1e-9);
}

TEST(AllreduceModel, OversubscribedCoresScaleTheRanksWork) {
  JobShape s = oneHostTcp(4);
  s.coresPerHost = 2;  // 4 ranks on 2 cores: work x 2, the call once,
  // and each of the 2 steps waits one spin (100 us) for a polling rank's
  // core (tcp ranks sleep in poll: WaitsForACore).
  EXPECT_NEAR(us(Algorithm::kTree, 1000, s, roundConstants()), 2 * 23.0 + 3 + 2 * 100,
              1e-9);
}

// Hosts of one rank each on 1 Gbit/s links (8 ns/B on the wire, headers
// not counted).
JobShape hostsOfOne(int n) {
  JobShape s;
  s.ranks = n;
  s.ranksPerHost = 1;
  s.linkBps = 1e9;
  s.linkMtu = 0;
  return s;
}

TEST(AllreduceModel, RingChunksOverlapTheLink) {
  // 2 hosts, 1 MiB: segments of 512 KiB in 4 chunks. The wire (4194.304
  // us) outlasts the transport's work (524.288 + 3 messages x 2 + 3 of the
  // 4 chunks' reductions), which runs under it; the last chunk's reduction
  // (65.536) follows it.
  const double wire = 512 * 1024 * 8e-3;
  const double reduced = 10 + wire + 512 * 1024 * 0.5e-3 / 4;
  const double copied = 10 + wire;
  EXPECT_NEAR(us(Algorithm::kRing, 1 << 20, hostsOfOne(2), roundConstants()),
              reduced + copied + 3, 1e-6);
  // Without a link limit the work is the whole step (as on one host).
  JobShape free = hostsOfOne(2);
  free.linkBps = 0;
  const double m = 512 * 1024;
  EXPECT_NEAR(us(Algorithm::kRing, 1 << 20, free, roundConstants()),
              (10 + m * 1e-3 + 3 * 2 + m * 0.5e-3) + (10 + m * 1e-3 + 3 * 2) + 3, 1e-6);
}

TEST(AllreduceModel, SharedCoresCarryTheMeanRanksWork) {
  // 2 hosts x 2 ranks on one machine's 2 cores (4 ranks: x 2). The ring's
  // steps pair 2 ranks inside hosts (shm, 0.1 ns/B) and 2 across (tcp, 1
  // ns/B): the cores do both, 2 x the mean (1.1264 us for 1024 B), not
  // 2 x the slower pair's; latency: the tcp pair's 2 x 10; reduction 2 x
  // 0.512.
  JobShape s;
  s.ranks = 4;
  s.ranksPerHost = 2;
  s.coresPerHost = 2;
  s.hostsShareCores = true;
  const double reduced = 20 + 1.1264 + 1.024;
  const double copied = 20 + 1.1264;
  EXPECT_NEAR(us(Algorithm::kRing, 4096, s, roundConstants()),
              3 * reduced + 3 * copied + 3, 1e-9);
}

TEST(AllreduceModel, IdleRanksLeaveTheCoresToTheWorkingOnes) {
  // 3 ranks on 1 core: the latency of every step is 3 x alpha (a waiting
  // rank spins before it yields) plus one spin (100 us), but each step has
  // 2 working ranks, so its bytes cost 2 x: fold-in 30 + 2 + 1, step 30 +
  // 2 + 1, fold-back 30 + 2, call 3.
  JobShape s = oneHostTcp(3);
  s.coresPerHost = 1;
  EXPECT_NEAR(us(Algorithm::kTree, 1000, s, roundConstants()), 33 + 33 + 32 + 3 + 3 * 100,
              1e-9);
}

TEST(AllreduceModel, FoldedScheduleAcrossHosts) {
  // Traced against allreduce_tree.cc / allreduce_rhd.cc / partition.h, 1 MB
  // on hosts of one rank, 1 Gbit/s: every step's bytes cross a link at
  // 8 ns/B (above the transport's 1 ns/B). Ranks that sit out the fold-in
  // send their first step at once (eager sends, eager_schedule.h): those
  // bytes share the folded rank's link with the fold-in.
  const Constants c = roundConstants();
  // tree, 3 ranks: fold-in 0 -> 1 (10 + 8000 + reduce 500) while rank 2
  // sends its step to rank 1 too (+8000: rank 1's link carries 2 MB), the
  // step 1 <-> 2 (8510: rank 1's half), fold-back 1 -> 0 (8010), call 3.
  EXPECT_NEAR(us(Algorithm::kTree, 1000000, hostsOfOne(3), c),
              8510 + 8000 + 8510 + 8010 + 3, 1e-6);
  // tree, 5 ranks: fold-in 0 -> 1, steps 1<->2, 3<->4 then 1<->3, 2<->4,
  // fold-back: 3 x 8510 + 8010 + 3 step by step. Eager (units of 8000 us):
  // 0->1, 2->1 share rank 1's link; 3<->4 end at 1, then 3 -> 1 joins them
  // (a third each): 0->1 and 2->1 end at 2.5, 3->1 at 3; rank 1 sends to 2
  // (3.5), to 3 (4.5), back to 0 (5.5): 1.5 more than the 4 of the walk.
  EXPECT_NEAR(us(Algorithm::kTree, 1000000, hostsOfOne(5), c),
              3 * 8510 + 8010 + 3 + 1.5 * 8000, 1e-6);
  // rhd, 6 ranks (p = 4, 2 folded: 0 -> 1, 2 -> 3): fold-in 8510; halving
  // 500000 B (10 + 4000 + 250) and 250000 B (10 + 2000 + 125); doubling
  // 250000 B (2010) and 500000 B (4010); fold-back 8010; call 3. Eager:
  // ranks 4 and 5 send their first halves (500000 B) to 1 and 3 during
  // the fold-in: +4000.
  EXPECT_NEAR(us(Algorithm::kRhd, 1000000, hostsOfOne(6), c),
              8510 + 4260 + 2135 + 2010 + 4010 + 8010 + 3 + 4000, 1e-6);
  // rhd, 3 ranks (p = 2): fold-in, 500000 B halved and doubled, fold-back;
  // rank 2's first half shares the fold-in's link: +4000.
  EXPECT_NEAR(us(Algorithm::kRhd, 1000000, hostsOfOne(3), c),
              8510 + 4260 + 4010 + 8010 + 3 + 4000, 1e-6);
  // Powers of two have no fold and no early sends: the walk's time.
  EXPECT_NEAR(us(Algorithm::kTree, 1000000, hostsOfOne(4), c), 2 * 8510 + 3, 1e-6);
}

TEST(EagerSchedule, EarlySendsShareTheFoldedRanksLink) {
  // tree on 3 hosts of one rank, 1 byte/s links, b = 10: step 0 the
  // fold-in, 1 the exchange, 2 the fold-back.
  const double b = 10;
  predict::EagerProgram tree3(3);
  tree3[0] = {{0, 1, b, -1, 0}, {2, -1, 0, 1, b}};
  tree3[1] = {{0, -1, 0, 0, b}, {1, 2, b, 2, b}, {2, 0, b, -1, 0}};
  tree3[2] = {{1, 1, b, 1, b}};
  // Rank 2's send and the fold-in share rank 1's link down: the fold-in
  // ends at 2b (its own wire time b: extra b); rank 1's half of the
  // exchange then takes b (as its own wire time), the fold-back b.
  auto extra = predict::eagerStepExtra(tree3, 3, {0, 1, 2}, 1.0);
  ASSERT_EQ(extra.size(), 3u);
  EXPECT_NEAR(extra[0], b, 1e-9);
  EXPECT_NEAR(extra[1], 0, 1e-9);
  EXPECT_NEAR(extra[2], 0, 1e-9);
  // The same ranks on two hosts (0 and 1 share one): the fold-in does not
  // cross a link, rank 2's send is alone on rank 1's link: no delay.
  extra = predict::eagerStepExtra(tree3, 3, {0, 0, 1}, 1.0);
  EXPECT_NEAR(extra[0] + extra[1] + extra[2], 0, 1e-9);
  // A symmetric exchange (2 hosts): each direction its own capacity.
  predict::EagerProgram two(2);
  two[0] = {{0, 1, b, 1, b}};
  two[1] = {{0, 0, b, 0, b}};
  EXPECT_NEAR(predict::eagerStepExtra(two, 1, {0, 1}, 1.0)[0], 0, 1e-9);
  // Two senders into one receiver in the same step: the step's own wire
  // time (2b on the receiver's link) already counts them.
  predict::EagerProgram gather(3);
  gather[0] = {{0, 2, b, -1, 0}};
  gather[1] = {{0, 2, b, -1, 0}};
  gather[2] = {{0, -1, 0, 0, b}, {0, -1, 0, 1, b}};
  EXPECT_NEAR(predict::eagerStepExtra(gather, 1, {0, 1, 2}, 1.0)[0], 0, 1e-9);
  // Copies inside a host take intraSecondsPerByte: rank 1 (host 0) gets
  // rank 0's vector in 2b seconds, then sends it to rank 2 (host 1) while
  // rank 3 (host 2) sent its own at once; rank 3's is through by 2b, so
  // rank 1's is alone on the link (b): no delay, and the copy is the
  // step's own time, not a delay.
  predict::EagerProgram local(4);
  local[0] = {{0, 1, b, -1, 0}};
  local[1] = {{0, -1, 0, 0, b}, {1, 2, b, -1, 0}};
  local[2] = {{1, -1, 0, 3, b}, {1, -1, 0, 1, b}};
  local[3] = {{1, 2, b, -1, 0}};
  extra = predict::eagerStepExtra(local, 2, {0, 0, 1, 2}, 1.0, 2.0);
  EXPECT_NEAR(extra[0], 0, 1e-9);
  EXPECT_NEAR(extra[1], 0, 1e-9);
  // Without the copy's time both sends share host 1's link from the
  // start, which the step's own wire time (2b) counts too.
  extra = predict::eagerStepExtra(local, 2, {0, 0, 1, 2}, 1.0, 0.0);
  EXPECT_NEAR(extra[0] + extra[1], 0, 1e-9);
}

TEST(AllreduceModel, WaitsForACore) {
  Constants c = roundConstants();
  c[Path::kShm][Term::kWake] = 300 * kUs;
  c[Path::kTcp][Term::kWake] = 200 * kUs;
  // 2 hosts x 2 ranks on one machine's 2 cores: the ranks have host-mates
  // (shm transport: they yield instead of sleeping), so each step pays
  // the wake of its slower pair's path: tree step 1 (shm) 300, step 2
  // (tcp) 200 on top of the same shape without the term.
  JobShape s;
  s.ranks = 4;
  s.ranksPerHost = 2;
  s.coresPerHost = 2;
  s.hostsShareCores = true;
  EXPECT_NEAR(
      us(Algorithm::kTree, 1000, s, c) - us(Algorithm::kTree, 1000, s, roundConstants()),
      300 + 200, 1e-9);
  // Not oversubscribed (4 cores): no wait.
  s.coresPerHost = 4;
  EXPECT_NEAR(us(Algorithm::kTree, 1000, s, c),
              us(Algorithm::kTree, 1000, s, roundConstants()), 1e-9);
  // 3 hosts of one rank on 2 cores: tcp only, the ranks sleep in poll; a
  // step waits the spin (here 50 us), not the wake: tree's 3 steps.
  JobShape one = hostsOfOne(3);
  one.coresPerHost = 2;
  one.hostsShareCores = true;
  one.spinSeconds = 50 * kUs;
  JobShape unshared = one;
  unshared.hostsShareCores = false;  // one rank on each host's 2 cores
  const double extra =
      us(Algorithm::kTree, 1000, one, c) - us(Algorithm::kTree, 1000, unshared, c);
  // The shared cores also scale alpha and the work by 3/2 (10 x 0.5 a
  // step in latency; the working ranks of a step are 2 of 3: no more).
  EXPECT_NEAR(extra, 3 * 50 + 3 * 5, 1e-9);
}

TEST(AllreduceModel, HeadersShareTheLink) {
  // MTU 1500: a segment carries 1448 bytes and takes 1514 of the rate.
  JobShape s = hostsOfOne(2);
  const Constants c = roundConstants();
  const double bare = us(Algorithm::kTree, 1000000, s, c);  // 10 + 8000 + 500 + 3
  s.linkMtu = 1500;
  EXPECT_NEAR(us(Algorithm::kTree, 1000000, s, c) - bare, 8000 * (1514.0 / 1448 - 1),
              1e-6);
}

TEST(AllreduceModel, TokenBucketPassesShortMessages) {
  // tc tbf's burst: 3 hosts of one rank, 64 KiB tree, no transport cost
  // (every constant 0) and no agreement: without a bucket the 3 steps
  // (fold-in, exchange, fold-back) each take 64 KiB of wire time; with a
  // 256 KiB bucket the calls settle where the busiest link, host 1's (it
  // sends the exchange and the fold-back, 128 KiB a call), runs at its
  // rate and the other links' buckets cover their bursts.
  const Constants zero;
  JobShape s = hostsOfOne(3);
  const double step = 65536 * 8e-3;
  // (+1 step: rank 2's early send shares the fold-in's link, see
  // FoldedScheduleAcrossHosts.)
  EXPECT_NEAR(us(Algorithm::kTree, 65536, s, zero), 4 * step, 1e-6);
  s.linkBurst = 256 * 1024;
  EXPECT_NEAR(us(Algorithm::kTree, 65536, s, zero), 2 * step, 1.0);
  // Large messages: the bucket is a small share of the bytes.
  const double big = us(Algorithm::kTree, 64 << 20, s, zero);
  EXPECT_GT(big, 4 * (64 << 20) * 8e-3 * 0.99);
  // A real link (no burst) is priced as before.
  s.linkBurst = 0;
  EXPECT_NEAR(us(Algorithm::kTree, 64 << 20, s, zero), 4 * (64 << 20) * 8e-3, 1e-3);
}

TEST(AllreduceModel, DescriptorExchange) {
  // A ring allgather of 32 B among 4 ranks: 3 steps of 10 + 0.032.
  predict::CostOptions o;
  o.agreement = true;
  EXPECT_NEAR(us(Algorithm::kTree, 1000, oneHostTcp(4), roundConstants(), o),
              26.0 + 3 * 10.032, 1e-9);
}

TEST(AllreduceModel, LatencyGrowthPerAlgorithm) {
  // Tiny messages: tree grows with log2 p steps, the ring with 2(n-1).
  const Constants c = roundConstants();
  const double tree16 = us(Algorithm::kTree, 8, oneHostTcp(16), c);
  const double tree64 = us(Algorithm::kTree, 8, oneHostTcp(64), c);
  const double ring16 = us(Algorithm::kRing, 8, oneHostTcp(16), c);
  const double ring64 = us(Algorithm::kRing, 8, oneHostTcp(64), c);
  EXPECT_NEAR((tree64 - 3) / (tree16 - 3), 6.0 / 4.0, 0.01);
  EXPECT_NEAR((ring64 - 3) / (ring16 - 3), 126.0 / 30.0, 0.01);
}

TEST(AllreduceModel, SizeClassesAreMonotoneAndCoverEverySize) {
  int last = -1;
  for (size_t b : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{7},
                   size_t{8}, size_t{1000}, size_t{1024}, size_t{1} << 20, ~size_t{0}}) {
    const int cls = predict::sizeClass(b);
    EXPECT_GE(cls, last) << b;
    EXPECT_LT(cls, predict::kSizeClasses) << b;
    EXPECT_EQ(predict::sizeClass(predict::sizeClassBytes(cls)), cls) << b;
    last = cls;
  }
  EXPECT_NE(predict::sizeClass(1 << 20), predict::sizeClass((1 << 20) + (1 << 18)));
}

}  // namespace
}  // namespace kolo::predict_shapes
