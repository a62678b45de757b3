// The scale model (src/predict/) and kolo's selection by it
// (src/collectives/selection.h): formulas against hand-computed values,
// the fit against known constants, the constants file, the units, and the
// selection's agreement across ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "collectives/registry.h"
#include "collectives/selection.h"
#include "predict/allreduce_model.h"
#include "predict/constants.h"
#include "predict/eager_schedule.h"
#include "predict/fit.h"
#include "predict/json.h"
#include "predict/units.h"
#include "support/comm_world.h"
#include "support/expect_error.h"

namespace kolo {
namespace {

using predict::Algorithm;
using predict::Constants;
using predict::JobShape;
using predict::Path;
using predict::Term;

constexpr double kUs = 1e-6;

predict::PathConstants pathOf(double alpha, double beta, double gamma, double message,
                              double call) {
  predict::PathConstants p;
  p[Term::kAlpha] = alpha;
  p[Term::kBeta] = beta;
  p[Term::kGamma] = gamma;
  p[Term::kMessage] = message;
  p[Term::kCall] = call;
  return p;
}

// Round numbers: tcp alpha 10 us, beta 1 ns/B, gamma 0.5 ns/B, message
// 2 us, call 3 us; shm (transport and arena) alpha 1 us, beta 0.1 ns/B,
// gamma 0.5 ns/B, call 0.5 us.
Constants roundConstants() {
  Constants c;
  c[Path::kTcp] = pathOf(10 * kUs, 1e-9, 0.5e-9, 2 * kUs, 3 * kUs);
  c[Path::kMpi] = c[Path::kTcp];
  c[Path::kShm] = pathOf(1 * kUs, 0.1e-9, 0.5e-9, 0, 0.5 * kUs);
  c[Path::kShmArena] = pathOf(1 * kUs, 0.1e-9, 0.5e-9, 0, 0.5 * kUs);
  c.source = "test";
  return c;
}

// n ranks on one host, tcp between all of them (KOLO_TRANSPORT=tcp).
JobShape oneHostTcp(int n) {
  JobShape s;
  s.ranks = n;
  s.ranksPerHost = n;
  s.intra = s.inter = Path::kTcp;
  return s;
}

double us(Algorithm a, size_t bytes, const JobShape& s, const Constants& c,
          predict::CostOptions o = {}) {
  return predict::allreduceSeconds(a, bytes, s, c, o) / kUs;
}

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

// ---- the fit ---------------------------------------------------------------------

std::vector<predict::Measurement> synthetic(const Constants& truth,
                                            const std::string& transport) {
  std::vector<predict::Measurement> out;
  for (int n : {2, 3, 4}) {
    for (Algorithm a :
         {Algorithm::kRing, Algorithm::kRhd, Algorithm::kTree, Algorithm::kShm}) {
      if (a == Algorithm::kShm && transport != "shm") continue;
      for (size_t b :
           {size_t{64}, size_t{4096}, size_t{65536}, size_t{1} << 20, size_t{8} << 20}) {
        predict::Measurement m;
        m.transport = transport;
        m.hosts = 1;
        m.ranksPerHost = n;
        m.algorithm = a;
        m.bytes = b;
        predict::CostOptions o;
        o.agreement = true;
        m.seconds = predict::allreduceSeconds(a, b, predict::shapeOf(m), truth, o);
        out.push_back(m);
      }
    }
  }
  return out;
}

TEST(Fit, RecoversKnownConstantsFromSyntheticSamples) {
  Constants truth = predict::builtInConstants();
  truth[Path::kTcp] = pathOf(20 * kUs, 0.7e-9, 0.3e-9, 1.5 * kUs, 4 * kUs);
  Constants start = truth;
  start[Path::kTcp] = pathOf(60 * kUs, 0.2e-9, 1.0e-9, 0.5 * kUs, 12 * kUs);
  const auto data = synthetic(truth, "tcp");
  const predict::FitResult fit = predict::fitConstants(data, start);
  for (Term t : {Term::kAlpha, Term::kBeta, Term::kGamma, Term::kCall}) {
    EXPECT_NEAR(fit.constants.get(Path::kTcp, t) / truth.get(Path::kTcp, t), 1.0, 0.02)
        << toString(t);
  }
  // The per-message term is nearly proportional to the bytes here (one
  // per 128 KiB chunk): the data barely tell it from beta, so the ridge
  // keeps it between the start and the truth.
  EXPECT_GT(fit.constants.get(Path::kTcp, Term::kMessage), 0.5 * kUs);
  EXPECT_LT(fit.constants.get(Path::kTcp, Term::kMessage), 1.6 * kUs);
  EXPECT_LT(fit.maxRelativeError, 0.01);
  // Only the tcp path was touched.
  for (const auto& [p, t] : fit.fitted) EXPECT_EQ(p, Path::kTcp);
  EXPECT_EQ(fit.constants.get(Path::kShm, Term::kAlpha),
            start.get(Path::kShm, Term::kAlpha));
}

TEST(Fit, SharedMemoryRunsFitTheTransportAndTheArena) {
  Constants truth = predict::builtInConstants();
  truth[Path::kShm] = pathOf(3 * kUs, 0.3e-9, 0.2e-9, 0.4 * kUs, 2 * kUs);
  truth[Path::kShmArena] = pathOf(0.8 * kUs, 0.1e-9, 0.2e-9, 0, 0.6 * kUs);
  const auto data = synthetic(truth, "shm");
  const predict::FitResult fit = predict::fitConstants(data, predict::builtInConstants());
  EXPECT_LT(fit.maxRelativeError, 0.02);
  EXPECT_NEAR(fit.constants.get(Path::kShm, Term::kAlpha) / (3 * kUs), 1.0, 0.05);
  // The arena's synchronisations (1 or 2 per 128 KiB chunk) and its call
  // term are told apart only by the chunk count, which grows with the
  // bytes: looser.
  EXPECT_NEAR(fit.constants.get(Path::kShmArena, Term::kAlpha) / (0.8 * kUs), 1.0, 0.3);
}

TEST(Fit, MeasurementFileErrorsNameTheLineAndField) {
  auto message = [](const std::string& text) {
    try {
      predict::parseMeasurements(text, "m.csv");
    } catch (const predict::FitError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string header(predict::kMeasurementHeader);
  EXPECT_TRUE(test::contains(message("a,b\n"), "m.csv:1: expected the header"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,0,ring,4096\n"),
                             "m.csv:2: expected 7 fields"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,0,bogus,4096,0.001\n"),
                             "m.csv:2: algorithm 'bogus'"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,0,ring,4096,-1\n"),
                             "m.csv:2: seconds '-1'"));
  EXPECT_TRUE(test::contains(message(header + "\nudp,1,4,0,ring,4096,1\n"),
                             "m.csv:2: transport 'udp'"));
  EXPECT_TRUE(test::contains(message(header + "\ntcp,1,4,fast,ring,4096,1\n"),
                             "m.csv:2: link_bps 'fast'"));
  const auto rows = predict::parseMeasurements(
      header + "\ntcp,2,2,1gbit,hier,64K,0.0025\n# comment\n", "m.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].linkBps, 1e9);
  EXPECT_EQ(rows[0].bytes, 65536u);
  EXPECT_EQ(rows[0].algorithm, Algorithm::kHier);
  EXPECT_EQ(predict::measurementLine(rows[0]), "tcp,2,2,1000000000,hier,65536,0.0025");
}

// ---- the constants file -------------------------------------------------------

TEST(ConstantsFile, RoundTrip) {
  Constants c = roundConstants();
  c[Path::kTcp][Term::kBeta] = 1.2345678901234567e-10;
  c.source = "a \"quoted\" source";
  const std::string text = predict::constantsToJson(c);
  const Constants back = predict::constantsFromJson(text, "x.json");
  for (int p = 0; p < predict::kPaths; ++p) {
    for (int t = 0; t < predict::kTerms; ++t) {
      EXPECT_EQ(back.paths[p].value[t], c.paths[p].value[t]) << p << " " << t;
    }
  }
  EXPECT_EQ(back.source, "x.json (a \"quoted\" source)");
}

TEST(ConstantsFile, MissingPathsKeepTheBase) {
  const Constants c = predict::constantsFromJson(
      R"({"kolo_predict_constants": 1, "paths": {"tcp": {"alpha": 1e-3}}})", "f.json",
      roundConstants());
  EXPECT_EQ(c.get(Path::kTcp, Term::kAlpha), 1e-3);
  EXPECT_EQ(c.get(Path::kTcp, Term::kBeta), 1e-9);
  EXPECT_EQ(c.get(Path::kShm, Term::kAlpha), 1 * kUs);
}

TEST(ConstantsFile, BadFilesAreNamedClearly) {
  auto message = [](const std::string& text) {
    try {
      predict::constantsFromJson(text, "bad.json");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(test::contains(message("{\"kolo_predict_constants\": 1,\n \"paths\": {"),
                             "bad.json:2:"));
  EXPECT_TRUE(test::contains(message("{\"paths\": {}}"),
                             "bad.json: not a kolo-predict constants file"));
  EXPECT_TRUE(
      test::contains(message(R"({"kolo_predict_constants": 1, "paths": {"udp": {}}})"),
                     "unknown path 'udp'"));
  EXPECT_TRUE(test::contains(
      message(R"({"kolo_predict_constants": 1, "paths": {"tcp": {"delta": 1}}})"),
      "paths.tcp: unknown term 'delta'"));
  EXPECT_TRUE(test::contains(
      message(R"({"kolo_predict_constants": 1, "paths": {"tcp": {"beta": -1}}})"),
      "paths.tcp.beta must be a non-negative number"));
  EXPECT_TRUE(test::contains(message(R"({"kolo_predict_constants": 2})"),
                             "kolo_predict_constants is not 1"));
  try {
    predict::loadConstants("/nonexistent/k.json");
    ADD_FAILURE() << "no error";
  } catch (const predict::ConstantsError& e) {
    EXPECT_TRUE(test::contains(e.what(), "'/nonexistent/k.json'")) << e.what();
  }
}

// ---- units ---------------------------------------------------------------------------

TEST(Units, Parse) {
  EXPECT_EQ(predict::parseRate("--link", "25gbit"), 25e9);
  EXPECT_EQ(predict::parseRate("--link", "100mbit"), 100e6);
  EXPECT_EQ(predict::parseRate("--link", "10Gbps"), 10e9);
  EXPECT_EQ(predict::parseRate("--link", "0"), 0);
  EXPECT_DOUBLE_EQ(predict::parseDuration("--latency", "2us"), 2e-6);
  EXPECT_DOUBLE_EQ(predict::parseDuration("--latency", "1.5ms"), 1.5e-3);
  EXPECT_EQ(predict::parseBytes("--bytes", "64M"), 64u << 20);
  EXPECT_EQ(predict::parseBytes("--bytes", "4KiB"), 4096u);
  EXPECT_EQ(predict::parseBytes("--bytes", "25.6M"),
            static_cast<size_t>(std::llround(25.6 * 1048576)));
  EXPECT_DOUBLE_EQ(predict::parseCount("--params", "25.6M"), 25.6e6);
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const predict::UnitError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(test::contains(message([] { predict::parseRate("--link", "25gbits"); }),
                             "--link '25gbits'"));
  EXPECT_TRUE(test::contains(message([] { predict::parseDuration("--latency", "2"); }),
                             "--latency '2': a duration needs a unit"));
  EXPECT_TRUE(test::contains(message([] { predict::parseBytes("--bytes", "-4K"); }),
                             "--bytes '-4K'"));
  EXPECT_TRUE(test::contains(message([] { predict::parseBytes("--bytes", "4Q"); }),
                             "--bytes '4Q'"));
}

// ---- kolo's selection ----------------------------------------------------------------

// Constants under which one algorithm is plainly cheapest: latency only
// (tree, fewest steps) or bytes only (ring for 3 ranks, which rhd must fold).
Constants latencyOnly() {
  Constants c = roundConstants();
  for (auto& p : c.paths) {
    p[Term::kBeta] = p[Term::kGamma] = p[Term::kMessage] = 0;
    p[Term::kAlpha] = 1e-3;
  }
  return c;
}
Constants bytesOnly() {
  Constants c = roundConstants();
  for (auto& p : c.paths) p[Term::kAlpha] = p[Term::kMessage] = 0;
  return c;
}

TEST(Selection, PicksWhatTheModelSays) {
  const collectives::AllreduceSelector latency(latencyOnly(), oneHostTcp(3));
  const collectives::AllreduceSelector bytes(bytesOnly(), oneHostTcp(3));
  for (size_t b : {size_t{8}, size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    EXPECT_EQ(latency.choose(b), "tree") << b;
    EXPECT_EQ(bytes.choose(b), "ring") << b;
  }
  const collectives::AllreduceSelector built(predict::builtInConstants(), oneHostTcp(4));
  for (int cls = 0; cls < predict::kSizeClasses; ++cls) {
    const size_t b = predict::sizeClassBytes(cls);
    EXPECT_EQ(built.choose(b), predict::toString(predict::selectAllreduce(
                                   b, oneHostTcp(4), predict::builtInConstants())))
        << b;
  }
  // One host with an arena: shm alone.
  JobShape arena = oneHostTcp(4);
  arena.intra = Path::kShm;
  arena.shmArena = true;
  EXPECT_EQ(collectives::AllreduceSelector(bytesOnly(), arena).choose(1 << 20), "shm");
  // Across hosts hier is a candidate, and the cross selector has one rank
  // per host.
  JobShape hosts;
  hosts.ranks = 8;
  hosts.ranksPerHost = 4;
  const collectives::AllreduceSelector across(bytesOnly(), hosts);
  ASSERT_NE(across.crossHosts(), nullptr);
  EXPECT_EQ(across.crossHosts()->shape().ranks, 2);
  EXPECT_EQ(across.crossHosts()->shape().ranksPerHost, 1);
}

std::string writeTemp(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
  std::ofstream(path) << text;
  return path;
}

TEST(Selection, EveryRankUsesRankZerosConstants) {
  // Rank 0 names latency-only constants (tree at every size); the others
  // name bytes-only ones (ring for 3 ranks): all must pick tree, and the
  // allreduces must complete with the right sums.
  const std::string latency = writeTemp("latency.json", constantsToJson(latencyOnly()));
  const std::string bytes = writeTemp("bytes.json", constantsToJson(bytesOnly()));
  test::withCommunicators(
      3,
      [&](int r) {
        Settings s = test::testSettings("tcp");
        s.predictConstants = r == 0 ? latency : bytes;
        return s;
      },
      [](Communicator& c) {
        for (size_t count : {size_t{3}, size_t{1000}, size_t{300000}}) {
          EXPECT_EQ(c.allreduceAlgorithm(count * 4), "tree") << "rank " << c.rank();
          std::vector<float> buf(count, float(c.rank() + 1));
          AllreduceOptions o;
          o.send = o.recv = buf.data();
          o.count = count;
          c.allreduce(o);
          EXPECT_EQ(buf[count - 1], 6.0f);
        }
      });
  std::remove(latency.c_str());
  std::remove(bytes.c_str());
}

TEST(Selection, EveryRankUsesRankZerosLinkRate) {
  // Latency-only constants choose tree at every size; rank 0's slow link
  // (KOLO_LINK_RATE) makes the wire time count, so large vectors go to an
  // algorithm that moves fewer bytes per link. The other ranks name no rate
  // and must still decide as rank 0 does.
  const std::string latency =
      writeTemp("latency_link.json", constantsToJson(latencyOnly()));
  std::vector<std::vector<std::string>> choices(3);
  test::withCommunicators(
      3,
      [&](int r) {
        Settings s = test::testSettings("tcp");
        s.predictConstants = latency;
        if (r == 0) s.linkRate = "1mbit";
        return s;
      },
      [&](Communicator& c) {
        for (size_t bytes : {size_t{8}, size_t{64} << 20}) {
          choices[c.rank()].push_back(c.allreduceAlgorithm(bytes));
        }
      },
      [](int r) { return "host" + std::to_string(r); });  // one rank per host
  std::remove(latency.c_str());
  EXPECT_EQ(choices[0][0], "tree");
  EXPECT_NE(choices[0][1], "tree");
  EXPECT_EQ(choices[1], choices[0]);
  EXPECT_EQ(choices[2], choices[0]);
}

TEST(Selection, BadLinkRateOnRankZeroFailsEveryRankNamingIt) {
  try {
    test::withCommunicators(
        2,
        [](int r) {
          Settings s = test::testSettings("tcp");
          if (r == 0) s.linkRate = "fast";
          return s;
        },
        [](Communicator&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string text = e.what();
    EXPECT_TRUE(test::contains(text, "rank 0: KOLO_PREDICT_CONSTANTS / KOLO_LINK_RATE"))
        << text;
    EXPECT_TRUE(test::contains(text, "rank 1: KOLO_PREDICT_CONSTANTS / KOLO_LINK_RATE"))
        << text;
    EXPECT_TRUE(test::contains(text, "fast")) << text;
  }
}

TEST(Selection, EveryRankUsesRankZerosCores) {
  // Three hosts of one rank on one machine's single core (rank 0's
  // KOLO_HOST_CORES=1, KOLO_HOSTS_SHARE_CORES=1): every step waits a spin
  // for the core (allreduce_model.cc), so at 8 bytes the tree's 3 steps
  // beat the ring's 4, which the bytes-only constants pick otherwise.
  const std::string bytes = writeTemp("bytes_cores.json", constantsToJson(bytesOnly()));
  for (bool told : {false, true}) {
    std::vector<std::string> choices(3);
    test::withCommunicators(
        3,
        [&](int r) {
          Settings s = test::testSettings("tcp");
          s.predictConstants = bytes;
          if (r == 0 && told) {
            s.hostCores = 1;
            s.hostsShareCores = 1;
            s.spinMicros = 100;
          }
          return s;
        },
        [&](Communicator& c) { choices[c.rank()] = c.allreduceAlgorithm(8); },
        [](int r) { return "host" + std::to_string(r); });
    EXPECT_EQ(choices[0], told ? "tree" : "ring") << "told the cores: " << told;
    EXPECT_EQ(choices[1], choices[0]);
    EXPECT_EQ(choices[2], choices[0]);
  }
  std::remove(bytes.c_str());
  try {
    test::withCommunicators(
        2,
        [](int r) {
          Settings s = test::testSettings("tcp");
          if (r == 0) s.hostCores = -2;
          return s;
        },
        [](Communicator&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string text = e.what();
    EXPECT_TRUE(test::contains(text, "rank 1: KOLO_PREDICT_CONSTANTS")) << text;
    EXPECT_TRUE(test::contains(text, "KOLO_HOST_CORES=-2")) << text;
  }
}

TEST(Selection, SameChoiceOnEveryRankAcrossHosts) {
  // Pretend hosts of 3 and 2 ranks (local sizes differ) with the built-in
  // constants: every rank's choice for every size class is the same.
  const int n = 5;
  std::vector<std::vector<std::string>> choices(n);
  test::withCommunicators(
      n, [](int) { return test::testSettings(); },
      [&](Communicator& c) {
        for (int cls = 0; cls < 4 * 32; cls += 3) {
          choices[c.rank()].push_back(c.allreduceAlgorithm(predict::sizeClassBytes(cls)));
        }
        std::vector<float> buf(70000, 1.0f);
        AllreduceOptions o;
        o.send = o.recv = buf.data();
        o.count = buf.size();
        c.allreduce(o);
        EXPECT_EQ(buf[0], 5.0f);
      },
      [](int r) { return r < 3 ? "host0" : "host1"; });
  for (int r = 1; r < n; ++r) EXPECT_EQ(choices[r], choices[0]) << "rank " << r;
}

TEST(Selection, BadConstantsOnRankZeroFailEveryRankNamingTheFile) {
  const std::string bad =
      writeTemp("bad.json", "{\"kolo_predict_constants\": 1, \"paths\":");
  try {
    test::withCommunicators(
        2,
        [&](int r) {
          Settings s = test::testSettings("tcp");
          if (r == 0) s.predictConstants = bad;
          return s;
        },
        [](Communicator&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string text = e.what();
    EXPECT_TRUE(test::contains(text, "rank 0: KOLO_PREDICT_CONSTANTS")) << text;
    EXPECT_TRUE(test::contains(text, "rank 1: KOLO_PREDICT_CONSTANTS")) << text;
    EXPECT_TRUE(test::contains(text, bad + ":1:")) << text;
  }
  std::remove(bad.c_str());
}

TEST(Selection, KoloAlgorithmOverridesAndAllreduceAlgoWins) {
  Settings s = test::testSettings("tcp");
  s.algorithm = "rhd";
  test::withCommunicators(2, s, [](Communicator& c) {
    EXPECT_EQ(c.allreduceAlgorithm(64), "rhd");
    EXPECT_EQ(c.allreduceAlgorithm(64 << 20), "rhd");
  });
  s.allreduceAlgorithm = "ring";
  test::withCommunicators(
      2, s, [](Communicator& c) { EXPECT_EQ(c.allreduceAlgorithm(64), "ring"); });
}

}  // namespace
}  // namespace kolo
