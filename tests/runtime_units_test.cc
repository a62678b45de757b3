// The runtime's small classes alone: OpSpec encoding and comparison, the
// response cache, the fusion planner and the submission queue.
#include <gtest/gtest.h>

#include <kolo/error.h>

#include <atomic>
#include <random>
#include <thread>

#include "runtime/fusion_planner.h"
#include "runtime/op_spec.h"
#include "runtime/response_cache.h"
#include "runtime/runtime.h"
#include "runtime/submission_queue.h"

namespace kolo::runtime {
namespace {

OpSpec spec(const std::string& name, std::vector<int64_t> shape,
            OpKind kind = OpKind::kAllreduce, DataType dtype = DataType::kFloat32) {
  OpSpec s;
  s.name = name;
  s.kind = kind;
  s.dtype = dtype;
  s.shape = std::move(shape);
  return s;
}

// ---- OpSpec ---------------------------------------------------------------------

TEST(OpSpecTest, EncodeDecodeRoundTripsEveryField) {
  OpSpec a = spec("layer1.weight", {128, 64, 3}, OpKind::kBroadcast, DataType::kBFloat16);
  a.op = ReduceOp::kMax;
  a.root = 3;
  a.prescale = 0.25;
  a.postscale = 8;
  a.group = 0x1234567890abcdefull;
  a.groupSize = 7;
  a.onDevice = true;
  a.device = 5;
  OpSpec b = spec("", {}, OpKind::kBarrier);
  std::vector<uint8_t> bytes;
  a.encode(bytes);
  b.encode(bytes);
  const uint8_t* p = bytes.data();
  const uint8_t* end = p + bytes.size();
  const OpSpec a2 = OpSpec::decode(p, end);
  const OpSpec b2 = OpSpec::decode(p, end);
  EXPECT_EQ(p, end);
  EXPECT_EQ(a2.name, a.name);
  EXPECT_EQ(a2.kind, a.kind);
  EXPECT_EQ(a2.dtype, a.dtype);
  EXPECT_EQ(a2.op, a.op);
  EXPECT_EQ(a2.shape, a.shape);
  EXPECT_EQ(a2.root, a.root);
  EXPECT_EQ(a2.prescale, a.prescale);
  EXPECT_EQ(a2.postscale, a.postscale);
  EXPECT_EQ(a2.group, a.group);
  EXPECT_EQ(a2.groupSize, a.groupSize);
  EXPECT_TRUE(a2.onDevice);
  EXPECT_EQ(a2.device, 5);
  EXPECT_EQ(b2.device, -1);
  OpSpec c = a;
  c.device = 2;
  EXPECT_FALSE(compareSpecs(a, c)) << "each rank's own device is not compared";
  EXPECT_EQ(b2.kind, OpKind::kBarrier);
  EXPECT_TRUE(b2.shape.empty());
}

TEST(OpSpecTest, DecodeRejectsEveryTruncationAndBadValues) {
  std::vector<uint8_t> bytes;
  spec("w", {2, 3}).encode(bytes);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    const uint8_t* p = bytes.data();
    EXPECT_THROW(OpSpec::decode(p, bytes.data() + cut), Error) << "cut at " << cut;
  }
  auto corrupt = [&](size_t at, uint8_t v) {
    auto copy = bytes;
    copy[at] = v;
    const uint8_t* p = copy.data();
    try {
      OpSpec::decode(p, copy.data() + copy.size());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(corrupt(0, 9).find("version"), std::string::npos);  // version
  EXPECT_NE(corrupt(6, 200).find("kind"), std::string::npos);   // kind after "w"
  EXPECT_NE(corrupt(7, 99).find("dtype"), std::string::npos);   // dtype
}

TEST(OpSpecTest, CompareNamesTheFirstDifferingFieldWithBothValues) {
  const OpSpec a = spec("w", {128, 64});
  EXPECT_FALSE(compareSpecs(a, a));
  auto check = [&](OpSpec b, const std::string& field, const std::string& va,
                   const std::string& vb) {
    auto d = compareSpecs(a, b);
    ASSERT_TRUE(d) << field;
    EXPECT_EQ(d->field, field);
    EXPECT_EQ(d->a, va);
    EXPECT_EQ(d->b, vb);
  };
  OpSpec b = a;
  b.shape = {128, 65};
  check(b, "shape", "[128, 64]", "[128, 65]");
  b = a;
  b.shape = {128};
  check(b, "shape", "[128, 64]", "[128]");
  b = a;
  b.dtype = DataType::kFloat64;
  check(b, "dtype", "float32", "float64");
  b = a;
  b.op = ReduceOp::kMax;
  check(b, "reduction", "sum", "max");
  b = a;
  b.kind = OpKind::kAllgather;
  check(b, "kind", "allreduce", "allgather");
  b = a;
  b.prescale = 0.5;
  check(b, "prescale", "1", "0.5");
  b = a;
  b.group = 5;
  b.groupSize = 2;
  EXPECT_EQ(compareSpecs(a, b)->field, "group");
  // Broadcast compares the root; allreduce ignores it.
  b = a;
  b.root = 1;
  EXPECT_FALSE(compareSpecs(a, b));
  OpSpec c = spec("w", {4}, OpKind::kBroadcast);
  OpSpec d = c;
  d.root = 2;
  auto diff = compareSpecs(c, d);
  ASSERT_TRUE(diff);
  EXPECT_EQ(diff->field, "root");
  EXPECT_EQ(diff->b, "2");
  // Broadcast ignores the reduction.
  d = c;
  d.op = ReduceOp::kMin;
  EXPECT_FALSE(compareSpecs(c, d));
}

TEST(OpSpecTest, AllgatherAndAlltoallFirstDimensionMayDiffer) {
  for (OpKind k : {OpKind::kAllgather, OpKind::kAlltoall}) {
    const OpSpec a = spec("g", {3, 4}, k);
    OpSpec b = spec("g", {5, 4}, k);
    EXPECT_FALSE(compareSpecs(a, b)) << toString(k);
    EXPECT_FALSE(sameSpec(a, b));
    b.shape = {3, 5};
    EXPECT_EQ(compareSpecs(a, b)->field, "shape");
  }
  EXPECT_TRUE(compareSpecs(spec("r", {3, 4}), spec("r", {5, 4})));
}

TEST(OpSpecTest, GroupIdIgnoresOrderAndIsNonZero) {
  EXPECT_EQ(groupId({"a", "b", "c"}), groupId({"c", "a", "b"}));
  EXPECT_NE(groupId({"a", "b"}), groupId({"a", "c"}));
  EXPECT_NE(groupId({"ab"}), groupId({"a", "b"}));
  EXPECT_NE(groupId({}), 0u);
}

TEST(OpSpecTest, BytesAndElements) {
  EXPECT_EQ(spec("s", {}).elements(), 1);
  EXPECT_EQ(spec("s", {}).bytes(), 4u);
  EXPECT_EQ(spec("m", {3, 0}).bytes(), 0u);
  EXPECT_EQ(spec("d", {2, 5}, OpKind::kAllreduce, DataType::kFloat64).bytes(), 80u);
  EXPECT_EQ(spec("b", {2, 5}, OpKind::kBarrier).bytes(), 0u);
}

// ---- ResponseCache --------------------------------------------------------------

TEST(ResponseCacheTest, LowestFreeSlotThenLeastRecentlyUsedEviction) {
  ResponseCache c(3);
  EXPECT_EQ(c.insert(spec("a", {1})).slot, 0u);
  EXPECT_EQ(c.insert(spec("b", {1})).slot, 1u);
  EXPECT_EQ(c.insert(spec("c", {1})).slot, 2u);
  c.touch(0);  // a is now the most recent; b the least
  auto ins = c.insert(spec("d", {1}));
  ASSERT_TRUE(ins.evicted);
  EXPECT_EQ(*ins.evicted, "b");
  EXPECT_EQ(ins.slot, 1u);
  EXPECT_EQ(c.find("b"), nullptr);
  EXPECT_EQ(c.atSlot(1)->spec->name, "d");
  c.erase("a");
  EXPECT_EQ(c.atSlot(0), nullptr);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.insert(spec("e", {1})).slot, 0u);  // the freed slot, no eviction
  // c is now the least recent (d and e were inserted after it).
  EXPECT_EQ(*c.insert(spec("f", {1})).evicted, "c");
}

TEST(ResponseCacheTest, ReinsertReplacesTheEntry) {
  ResponseCache c(2);
  c.insert(spec("a", {1}));
  c.insert(spec("a", {2}));
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.find("a")->spec->shape, std::vector<int64_t>{2});
}

TEST(ResponseCacheTest, MatchesUsesEachRanksFirstDimension) {
  ResponseCache c(4);
  c.insert(spec("g", {3, 4}, OpKind::kAllgather), {3, 5});
  const auto* e = c.find("g");
  EXPECT_TRUE(e->matches(spec("g", {3, 4}, OpKind::kAllgather), 0));
  EXPECT_TRUE(e->matches(spec("g", {5, 4}, OpKind::kAllgather), 1));
  EXPECT_FALSE(e->matches(spec("g", {5, 4}, OpKind::kAllgather), 0));
  EXPECT_FALSE(e->matches(spec("g", {3, 5}, OpKind::kAllgather), 0));
  c.insert(spec("r", {3, 4}));
  EXPECT_TRUE(c.find("r")->matches(spec("r", {3, 4}), 2));
  EXPECT_FALSE(
      c.find("r")->matches(spec("r", {3, 4}, OpKind::kAllreduce, DataType::kInt32), 2));
}

// Two caches fed the same random sequence of inserts, touches and erases
// decide the same slots and evictions.
TEST(ResponseCacheTest, SameOperationsGiveIdenticalCaches) {
  ResponseCache a(16), b(16);
  std::mt19937 rng(7);
  for (int i = 0; i < 5000; ++i) {
    const int what = rng() % 3;
    const std::string name = "t" + std::to_string(rng() % 40);
    if (what == 0) {
      auto x = a.insert(spec(name, {1}));
      auto y = b.insert(spec(name, {1}));
      ASSERT_EQ(x.slot, y.slot);
      ASSERT_EQ(x.evicted, y.evicted);
    } else if (what == 1) {
      const size_t slot = rng() % 16;
      a.touch(slot);
      b.touch(slot);
    } else {
      a.erase(name);
      b.erase(name);
    }
    ASSERT_LE(a.size(), 16u);
  }
  for (size_t s = 0; s < 16; ++s) {
    const auto* x = a.atSlot(s);
    const auto* y = b.atSlot(s);
    ASSERT_EQ(x == nullptr, y == nullptr);
    if (x) {
      EXPECT_EQ(x->spec->name, y->spec->name);
    }
  }
}

// ---- FusionPlanner -------------------------------------------------------------

ReadyOp ready(OpSpec s) {
  ReadyOp r;
  r.spec = std::make_shared<const OpSpec>(std::move(s));
  return r;
}

TEST(FusionPlannerTest, PacksSameKeyAllreducesUpToTheThreshold) {
  std::vector<ReadyOp> ops;
  for (int i = 0; i < 5; ++i) ops.push_back(ready(spec("a" + std::to_string(i), {100})));
  // 400 bytes each; threshold 1000: two per bucket.
  auto b = planBuckets(ops, 1000);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].members, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(b[1].members, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(b[2].members, (std::vector<size_t>{4}));
  EXPECT_EQ(b[0].bytes, 800u);
  // Threshold 0: no fusion.
  EXPECT_EQ(planBuckets(ops, 0).size(), 5u);
}

TEST(FusionPlannerTest, KeysKindsAndLargeOperations) {
  std::vector<ReadyOp> ops;
  ops.push_back(ready(spec("f1", {10})));
  ops.push_back(ready(spec("d1", {10}, OpKind::kAllreduce, DataType::kFloat64)));
  ops.push_back(ready(spec("f2", {10})));
  ops.push_back(ready(spec("big", {1000})));
  ops.push_back(ready(spec("g", {10}, OpKind::kAllgather)));
  OpSpec avg = spec("avg", {10});
  avg.op = ReduceOp::kAverage;
  ops.push_back(ready(avg));
  OpSpec scaled = spec("scaled", {10});
  scaled.prescale = 2;
  ops.push_back(ready(scaled));
  ops.push_back(ready(spec("f3", {10})));
  auto b = planBuckets(ops, 1024);
  std::vector<std::vector<size_t>> members;
  for (auto& x : b) members.push_back(x.members);
  EXPECT_EQ(members,
            (std::vector<std::vector<size_t>>{{0, 2, 7}, {1}, {3}, {4}, {5}, {6}}));
}

TEST(FusionPlannerTest, AllreducesAboveTheAloneCutoffRunAloneUnlessGrouped) {
  std::vector<ReadyOp> ops;
  ops.push_back(ready(spec("s1", {10})));    // 40 bytes
  ops.push_back(ready(spec("big", {100})));  // 400 bytes > cutoff 200
  ops.push_back(ready(spec("s2", {10})));
  ops.push_back(ready(spec("edge", {50})));  // 200 bytes: at the cutoff, packed
  for (int i = 0; i < 2; ++i) {
    OpSpec s = spec("g" + std::to_string(i), {100});  // grouped: packed anyway
    s.group = 4;
    s.groupSize = 2;
    ops.push_back(ready(s));
  }
  auto b = planBuckets(ops, 4096, 200);
  std::vector<std::vector<size_t>> members;
  for (auto& x : b) members.push_back(x.members);
  EXPECT_EQ(members, (std::vector<std::vector<size_t>>{{0, 2, 3, 4, 5}, {1}}));
  // The default cutoff is 256 KiB.
  std::vector<ReadyOp> large;
  large.push_back(ready(spec("a", {1 << 16})));        // 256 KiB: packed
  large.push_back(ready(spec("b", {(1 << 16) + 1})));  // above: alone
  large.push_back(ready(spec("c", {1 << 16})));
  auto d = planBuckets(large, 64 << 20);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].members, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(d[1].members, (std::vector<size_t>{1}));
}

TEST(FusionPlannerTest, GroupsStayWholeEvenAboveTheThreshold) {
  std::vector<ReadyOp> ops;
  ops.push_back(ready(spec("x", {100})));  // 400 bytes
  for (int i = 0; i < 3; ++i) {
    OpSpec s = spec("g" + std::to_string(i), {100});
    s.group = 9;
    s.groupSize = 3;
    ops.push_back(ready(s));
  }
  ops.push_back(ready(spec("y", {10})));
  auto b = planBuckets(ops, 1000);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].members, (std::vector<size_t>{0, 4}));
  EXPECT_EQ(b[1].members, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(b[1].bytes, 1200u);
  // A group of mixed kinds is one bucket too.
  std::vector<ReadyOp> mixed;
  for (OpKind k : {OpKind::kAllreduce, OpKind::kAllgather}) {
    OpSpec s = spec(std::string("m") + toString(k), {4}, k);
    s.group = 3;
    s.groupSize = 2;
    mixed.push_back(ready(s));
  }
  auto m = planBuckets(mixed, 1 << 20);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].members.size(), 2u);
}

// ---- SubmissionQueue -------------------------------------------------------------

TEST(SubmissionQueueTest, ManyProducersOneConsumerKeepEachProducersOrder) {
  SubmissionQueue q;
  const int producers = 4, each = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < producers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        Submission s;
        s.request.spec.name = std::to_string(t) + ":" + std::to_string(i);
        ASSERT_TRUE(q.push(std::move(s)));
      }
    });
  }
  std::vector<int> next(producers, 0);
  int got = 0;
  while (got < producers * each) {
    q.waitUntil(SubmissionQueue::Clock::now() + std::chrono::milliseconds(50), true);
    for (auto& s : q.drain()) {
      const auto& n = s.request.spec.name;
      const int t = std::stoi(n.substr(0, n.find(':')));
      const int i = std::stoi(n.substr(n.find(':') + 1));
      ASSERT_EQ(i, next[t]);
      ++next[t];
      ++got;
    }
  }
  for (auto& t : threads) t.join();
  q.close();
  EXPECT_FALSE(q.push(Submission{}));
  EXPECT_TRUE(q.closed());
}

// Drained submissions are storage for later pushes: a request copied into
// one reuses its name's and shape's memory (the queue's two buffers
// alternate, so the first round's element comes back on the third).
TEST(SubmissionQueueTest, PushReusesTheMemoryOfDrainedSubmissions) {
  SubmissionQueue q;
  std::vector<Submission> out;
  OpRequest r;
  r.spec.name = std::string(40, 'a');  // beyond the short-string buffer
  r.spec.shape = {2, 3, 4};
  ASSERT_TRUE(q.push(r, nullptr, 7));
  ASSERT_EQ(q.drainInto(out), 1u);
  EXPECT_EQ(out[0].request.spec.name, r.spec.name);
  EXPECT_EQ(out[0].request.spec.shape, r.spec.shape);
  EXPECT_EQ(out[0].nameId, 7u);
  const char* name = out[0].request.spec.name.data();
  const int64_t* shape = out[0].request.spec.shape.data();
  r.spec.name = std::string(40, 'b');
  ASSERT_TRUE(q.push(r, nullptr, 8));
  ASSERT_EQ(q.drainInto(out), 1u);
  r.spec.name = std::string(40, 'c');
  r.spec.shape = {5, 6, 7};
  ASSERT_TRUE(q.push(r, nullptr, 9));
  ASSERT_EQ(q.drainInto(out), 1u);
  EXPECT_EQ(out[0].request.spec.name, std::string(40, 'c'));
  EXPECT_EQ(out[0].request.spec.shape, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(out[0].nameId, 9u);
  EXPECT_EQ(out[0].request.spec.name.data(), name);
  EXPECT_EQ(out[0].request.spec.shape.data(), shape);
  EXPECT_EQ(q.size(), 0u);
}

TEST(SubmissionQueueTest, WaitEndsOnWakeOrItemOnlyWhenAsked) {
  SubmissionQueue q;
  const auto far = SubmissionQueue::Clock::now() + std::chrono::seconds(30);
  q.wake();
  q.waitUntil(far, false);  // returns at once: already woken
  ASSERT_TRUE(q.push(Submission{}));
  q.waitUntil(far, true);  // returns at once: an item is queued
  const auto t0 = SubmissionQueue::Clock::now();
  q.waitUntil(t0 + std::chrono::milliseconds(20), false);  // items do not count
  EXPECT_GE(SubmissionQueue::Clock::now() - t0, std::chrono::milliseconds(20));
  std::thread closer([&] { q.close(); });
  q.waitUntil(far, false);  // close() ends the wait
  closer.join();
  EXPECT_EQ(q.drain().size(), 1u);
}

TEST(SubmissionQueueTest, PushAllIsAtomic) {
  SubmissionQueue q;
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    while (!stop) {
      std::vector<Submission> group(3);
      for (int i = 0; i < 3; ++i) group[i].request.spec.name = std::to_string(i);
      q.pushAll(std::move(group));
    }
  });
  for (int i = 0; i < 2000; ++i) {
    auto items = q.drain();
    ASSERT_EQ(items.size() % 3, 0u);
  }
  stop = true;
  producer.join();
}

TEST(SubmissionQueueTest, RingEndsTheGatheringWindowOnlyWhileItIsOpen) {
  using Clock = SubmissionQueue::Clock;
  auto q = std::make_shared<SubmissionQueue>();
  const auto far = Clock::now() + std::chrono::seconds(60);
  const auto quiet = std::chrono::milliseconds(20);
  // No window open: the ring is dropped, and the window opened afterwards
  // waits for its quiet time.
  q->ring();
  ASSERT_TRUE(q->push(Submission{}));
  ASSERT_TRUE(q->waitUntil(far, true));  // an item: the window opens
  auto t0 = Clock::now();
  q->waitQuiet(quiet, far);
  EXPECT_GE(Clock::now() - t0, quiet);
  q->drain();

  // A waiting handle rings the open window: a quiet time of a minute ends
  // as soon as the caller blocks.
  Handle h("step", q);
  ASSERT_TRUE(q->push(Submission{}));
  ASSERT_TRUE(q->waitUntil(far, true));
  std::thread caller([&] { h.wait(); });
  t0 = Clock::now();
  q->waitQuiet(std::chrono::seconds(60), far);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30));
  h.complete();
  caller.join();

  // The window closed with that waitQuiet: a later ring does not reach the
  // next window.
  q->drain();
  q->ring();
  ASSERT_TRUE(q->push(Submission{}));
  ASSERT_TRUE(q->waitUntil(far, true));
  t0 = Clock::now();
  q->waitQuiet(quiet, far);
  EXPECT_GE(Clock::now() - t0, quiet);

  // A ring between the push that opens the window (whether or not the
  // consumer was blocked yet) and waitQuiet counts.
  q->drain();
  std::thread idle([&] { EXPECT_TRUE(q->waitUntil(far, true)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(q->push(Submission{}));
  idle.join();
  q->ring();
  t0 = Clock::now();
  q->waitQuiet(std::chrono::seconds(60), far);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30));
}

// ---- Handle -------------------------------------------------------------------------

TEST(HandleTest, CompletionWakesEveryWaiterAndTheFirstCompletionWins) {
  for (int round = 0; round < 200; ++round) {
    Handle h("w");
    EXPECT_FALSE(h.poll());
    std::atomic<int> woke{0};
    std::vector<std::thread> waiters;
    for (int t = 0; t < 3; ++t) {
      waiters.emplace_back([&] {
        h.wait();
        ++woke;
      });
    }
    if (round % 2) std::this_thread::yield();  // waiters before or after completion
    h.complete();
    h.fail(std::make_exception_ptr(Error(ErrorCode::kTimeout, "late")));  // ignored
    for (auto& t : waiters) t.join();
    EXPECT_EQ(woke.load(), 3);
    EXPECT_TRUE(h.poll());
    EXPECT_NO_THROW(h.wait());
  }
}

TEST(HandleTest, FailureReachesWaitersOnOtherThreads) {
  Handle h("x");
  std::string seen;
  std::thread waiter([&] {
    try {
      h.wait();
    } catch (const Error& e) {
      seen = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // blocked by now
  h.fail(std::make_exception_ptr(Error(ErrorCode::kPeerLost, "rank 1 lost")));
  h.complete();  // ignored: the failure came first
  waiter.join();
  EXPECT_NE(seen.find("rank 1 lost"), std::string::npos) << seen;
  EXPECT_TRUE(h.poll());
  EXPECT_THROW(h.wait(), Error);
}

// ---- RuntimeOptions ----------------------------------------------------------------

TEST(RuntimeOptionsTest, FromSettingsTakesEveryRuntimeKnob) {
  Settings s;
  s.fusionThresholdBytes = 1234;
  s.cycleTimeMs = 2.5;
  s.cacheCapacity = 0;  // clamped: at least one slot
  s.stallWarningSeconds = 7;
  s.stallShutdownSeconds = 9;
  s.timelinePath = "/tmp/t.json";
  s.deterministic = 1;
  s.autotune = 1;
  s.stragglerMarginMs = 12;
  s.stragglerFraction = 0.5;
  s.stragglerWindowSeconds = 4;
  s.stragglerIntervalSeconds = 30;
  s.runtimeSpinMicros = 3;
  s.stallCheckDisable = 1;
  s.timelineMarkCycles = 1;
  s.autotuneLogPath = "/tmp/a.csv";
  s.autotuneWarmupSamples = 4;
  s.autotuneStepsPerSample = 6;
  const RuntimeOptions o = RuntimeOptions::fromSettings(s);
  EXPECT_EQ(o.fusionThresholdBytes, 1234);
  EXPECT_EQ(o.cycleTimeMs, 2.5);
  EXPECT_EQ(o.cacheCapacity, 1u);
  EXPECT_EQ(o.stallWarningSeconds, 7);
  EXPECT_EQ(o.stallShutdownSeconds, 9);
  EXPECT_EQ(o.timelinePath, "/tmp/t.json");
  EXPECT_TRUE(o.deterministic);
  EXPECT_TRUE(o.autotune);
  EXPECT_DOUBLE_EQ(o.straggler.marginSeconds, 0.012);
  EXPECT_EQ(o.straggler.fraction, 0.5);
  EXPECT_EQ(o.straggler.windowSeconds, 4);
  EXPECT_EQ(o.straggler.intervalSeconds, 30);
  EXPECT_EQ(o.spinMicros, 3);
  EXPECT_FALSE(o.stallCheck);
  EXPECT_TRUE(o.timelineMarkCycles);
  EXPECT_EQ(o.autotuneLogPath, "/tmp/a.csv");
  EXPECT_EQ(o.autotuneWarmupSamples, 4);
  EXPECT_EQ(o.autotuneStepsPerSample, 6);
  const RuntimeOptions d = RuntimeOptions::fromSettings(Settings{});
  EXPECT_EQ(d.fusionThresholdBytes, 64 << 20);
  EXPECT_EQ(d.cacheCapacity, 1024u);
  EXPECT_FALSE(d.deterministic);
  EXPECT_TRUE(d.stallCheck);
  EXPECT_FALSE(d.timelineMarkCycles);
  EXPECT_EQ(d.autotuneWarmupSamples, 2);
  EXPECT_EQ(d.autotuneStepsPerSample, 5);
}

}  // namespace
}  // namespace kolo::runtime
