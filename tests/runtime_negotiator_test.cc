// The negotiator with 2-4 simulated ranks in one thread: each cycle every
// rank's prepare() message is handed to every rank's process(), as the
// runtime's allgather would. Checked: every rank reaches the same decisions
// (ready order, errors, cache), whatever the submission order; the cached
// path sends no specs; changed specs; mismatches of each kind; groups; join;
// shutdown and stall flags; the waiting list and arrival times.
#include <gtest/gtest.h>

#include <kolo/error.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "runtime/negotiator.h"

namespace kolo::runtime {
namespace {

std::vector<bool> bools(std::span<const uint8_t> bits) {
  return std::vector<bool>(bits.begin(), bits.end());
}

using Clock = std::chrono::steady_clock;

OpSpec spec(const std::string& name, std::vector<int64_t> shape = {4},
            OpKind kind = OpKind::kAllreduce) {
  OpSpec s;
  s.name = name;
  s.kind = kind;
  s.shape = std::move(shape);
  return s;
}

// N negotiators and the bookkeeping to check them against each other.
class World {
 public:
  explicit World(int n, size_t capacity = 1024) : flags(n) {
    for (int r = 0; r < n; ++r) ranks_.emplace_back(r, n, capacity);
  }

  int size() const { return static_cast<int>(ranks_.size()); }
  Negotiator& operator[](int r) { return ranks_[r]; }

  // Submits on rank r; the id encodes rank and name for the checks.
  void submit(int r, const OpSpec& s, size_t* slotHint = nullptr) {
    const OpId id = nextId_++;
    ids_[id] = {r, s.name};
    ranks_[r].submit(id, s, slotHint);
  }

  // One cycle on every rank; checks that the outcomes agree and returns
  // them. Also records, per rank, the names that completed or failed.
  std::vector<Outcome> cycle(Clock::time_point now = Clock::now()) {
    const int n = size();
    std::vector<std::vector<uint8_t>> fixed(n), variable(n);
    lastVariableBytes = 0;
    for (int r = 0; r < n; ++r) {
      Message m = ranks_[r].prepare(flags[r]);
      EXPECT_EQ(m.fixed.size(), ranks_[r].fixedBytes());
      EXPECT_EQ(Negotiator::variableBytes(m.fixed), m.variable.size());
      fixed[r] = std::move(m.fixed);
      variable[r] = std::move(m.variable);
      lastVariableBytes += variable[r].size();
    }
    std::vector<Outcome> out;
    for (int r = 0; r < n; ++r) out.push_back(ranks_[r].process(fixed, variable, now));
    for (int r = 0; r < n; ++r) {
      const Outcome& o = out[r];
      EXPECT_EQ(names(o.ready), names(out[0].ready)) << "rank " << r;
      EXPECT_EQ(o.shutdownRanks, out[0].shutdownRanks);
      EXPECT_EQ(o.joinedRanks, out[0].joinedRanks);
      EXPECT_EQ(o.stallShutdown, out[0].stallShutdown);
      EXPECT_EQ(o.fusionThresholdBytes, out[0].fusionThresholdBytes);
      EXPECT_EQ(o.waiting.size(), out[0].waiting.size());
      for (size_t i = 0; i < o.ready.size() && i < out[0].ready.size(); ++i) {
        EXPECT_EQ(bools(o.ready[i].submitted), bools(out[0].ready[i].submitted));
        EXPECT_EQ(o.ready[i].firstDims, out[0].ready[i].firstDims);
        if (o.ready[i].localId) {
          const auto& who = ids_.at(*o.ready[i].localId);
          EXPECT_EQ(who.first, r);
          EXPECT_EQ(who.second, o.ready[i].spec->name);
        } else {
          EXPECT_FALSE(o.ready[i].submitted[r]);
        }
        done[r].push_back(o.ready[i].spec->name);
      }
      for (const auto& e : o.errors) {
        const auto& who = ids_.at(e.localId);
        EXPECT_EQ(who.first, r);
        EXPECT_EQ(who.second, e.name);
        failed[r][e.name] = e.message;
      }
      // Caches stay identical.
      for (size_t s = 0; s < ranks_[r].cache().capacity(); ++s) {
        const auto* a = ranks_[r].cache().atSlot(s);
        const auto* b = ranks_[0].cache().atSlot(s);
        EXPECT_EQ(a == nullptr, b == nullptr) << "slot " << s << " rank " << r;
        if (a && b) {
          EXPECT_EQ(a->spec->name, b->spec->name);
        }
      }
    }
    return out;
  }

  static std::vector<std::string> names(const std::vector<ReadyOp>& ready) {
    std::vector<std::string> v;
    for (const auto& r : ready) v.push_back(r.spec->name);
    return v;
  }

  std::vector<CycleFlags> flags;
  std::map<int, std::vector<std::string>> done;
  std::map<int, std::map<std::string, std::string>> failed;
  size_t lastVariableBytes = 0;

 private:
  std::vector<Negotiator> ranks_;
  std::map<OpId, std::pair<int, std::string>> ids_;
  OpId nextId_ = 1;
};

TEST(NegotiatorTest, RandomSubmissionOrdersGiveOneOrderEverywhere) {
  for (int n : {2, 3, 4}) {
    World w(n, 64);
    std::mt19937 rng(n);
    for (int step = 0; step < 6; ++step) {
      // Each rank submits 40 tensors in its own order, a few per cycle.
      std::vector<std::vector<std::string>> order(n);
      for (int r = 0; r < n; ++r) {
        for (int i = 0; i < 40; ++i) order[r].push_back("t" + std::to_string(i));
        std::shuffle(order[r].begin(), order[r].end(), rng);
      }
      w.done.clear();
      std::vector<size_t> at(n, 0);
      for (int c = 0; c < 200; ++c) {
        for (int r = 0; r < n; ++r) {
          const size_t k = rng() % 6;
          for (size_t j = 0; j < k && at[r] < order[r].size(); ++j) {
            const std::string& name = order[r][at[r]++];
            w.submit(r, spec(name, {int64_t(1 + name.size() % 3)}));
          }
        }
        w.cycle();
        if (w.done[0].size() == 40) break;
      }
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(w.done[r].size(), 40u) << "n=" << n << " step " << step;
        EXPECT_EQ(w.done[r], w.done[0]);
        EXPECT_EQ(w[r].pendingCount(), 0u);
      }
      EXPECT_TRUE(w.failed.empty());
    }
  }
}

TEST(NegotiatorTest, CachedOperationsTravelAsBitsOnly) {
  World w(3);
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 10; ++i) w.submit(r, spec("w" + std::to_string(i)));
    }
    auto out = w.cycle();
    EXPECT_EQ(out[0].ready.size(), 10u);
    if (step == 0) {
      EXPECT_GT(w.lastVariableBytes, 0u);  // first time: specs
    } else {
      EXPECT_EQ(w.lastVariableBytes, 0u) << "step " << step;  // then bits only
    }
    // Ready order is cache-slot order: the names were inserted in name order.
    EXPECT_EQ(World::names(out[0].ready).front(), "w0");
  }
  EXPECT_EQ(w[0].cache().size(), 10u);
  EXPECT_EQ(w[0].fixedBytes(), 24u + 128u);
}

TEST(NegotiatorTest, WaitsForEveryRankAndReportsWhoIsWaitedFor) {
  World w(3);
  const auto t0 = Clock::now();
  w.submit(0, spec("a"));
  w.submit(2, spec("a"));
  auto out = w.cycle(t0);
  EXPECT_TRUE(out[0].ready.empty());
  ASSERT_EQ(out[1].waiting.size(), 1u);
  EXPECT_EQ(out[1].waiting[0].name, "a");
  EXPECT_EQ(out[1].waiting[0].submitted, (std::vector<bool>{true, false, true}));
  const auto t1 = t0 + std::chrono::milliseconds(30);
  w.submit(1, spec("a"));
  out = w.cycle(t1);
  ASSERT_EQ(out[2].ready.size(), 1u);
  EXPECT_TRUE(out[2].waiting.empty());
  const auto& arrivals = out[2].ready[0].arrivals;
  EXPECT_EQ(arrivals[0], t0);
  EXPECT_EQ(arrivals[1], t1);
  EXPECT_EQ(arrivals[2], t0);
  // The cached path waits the same way.
  w.submit(1, spec("a"));
  out = w.cycle(t1);
  EXPECT_TRUE(out[0].ready.empty());
  ASSERT_EQ(out[0].waiting.size(), 1u);
  EXPECT_EQ(out[0].waiting[0].submitted, (std::vector<bool>{false, true, false}));
  w.submit(0, spec("a"));
  w.submit(2, spec("a"));
  out = w.cycle(t1 + std::chrono::milliseconds(5));
  ASSERT_EQ(out[0].ready.size(), 1u);
  EXPECT_EQ(out[0].ready[0].arrivals[1], t1);
  EXPECT_EQ(out[0].ready[0].arrivals[0], t1 + std::chrono::milliseconds(5));
}

TEST(NegotiatorTest, ChangedSpecEvictsAndRenegotiates) {
  World w(2);
  for (int r = 0; r < 2; ++r) w.submit(r, spec("x", {4}));
  w.cycle();
  const size_t slot = w[0].cache().find("x")->slot;
  // Rank 0 still uses the cached spec; rank 1 submits a new shape.
  w.submit(0, spec("x", {4}));
  w.submit(1, spec("x", {8}));
  auto out = w.cycle();
  EXPECT_TRUE(out[0].ready.empty());
  EXPECT_EQ(w[0].cache().find("x"), nullptr);  // evicted everywhere
  EXPECT_EQ(w[1].cache().find("x"), nullptr);
  out = w.cycle();  // rank 0 resends as new; the two differ
  ASSERT_EQ(w.failed[0].count("x"), 1u);
  EXPECT_EQ(w.failed[0]["x"], w.failed[1]["x"]);
  EXPECT_EQ(w.failed[0]["x"],
            "allreduce 'x': shape differs: rank 0 has [4], rank 1 has [8]");
  // Both change the shape together (e.g. a last, smaller batch): fine.
  for (int r = 0; r < 2; ++r) w.submit(r, spec("x", {4}));
  w.cycle();
  for (int r = 0; r < 2; ++r) w.submit(r, spec("x", {2}));
  out = w.cycle();
  ASSERT_EQ(out[0].ready.size(), 1u);
  EXPECT_EQ(out[0].ready[0].spec->shape, std::vector<int64_t>{2});
  (void)slot;
}

TEST(NegotiatorTest, MismatchOfEachKindNamesTensorFieldRanksAndValues) {
  struct Case {
    std::string field;
    std::function<void(OpSpec&)> change;
    std::string text;
  };
  std::vector<Case> cases = {
      {"shape",
       [](OpSpec& s) {
         s.shape = {128, 65};
       },
       "allreduce 't': shape differs: ranks 0,2 have [128, 64], rank 1 has [128, 65]"},
      {"dtype", [](OpSpec& s) { s.dtype = DataType::kFloat64; },
       "allreduce 't': dtype differs: ranks 0,2 have float32, rank 1 has float64"},
      {"reduction", [](OpSpec& s) { s.op = ReduceOp::kMax; },
       "allreduce 't': reduction differs: ranks 0,2 have sum, rank 1 has max"},
      {"kind", [](OpSpec& s) { s.kind = OpKind::kAllgather; },
       "allreduce 't': kind differs: ranks 0,2 have allreduce, rank 1 has allgather"},
      {"prescale", [](OpSpec& s) { s.prescale = 2; },
       "allreduce 't': prescale differs: ranks 0,2 have 1, rank 1 has 2"},
  };
  for (bool cachedFirst : {false, true}) {
    for (const auto& c : cases) {
      World w(3);
      if (cachedFirst) {  // the name is cached from an earlier step
        for (int r = 0; r < 3; ++r) w.submit(r, spec("t", {128, 64}));
        w.cycle();
      }
      for (int r = 0; r < 3; ++r) {
        OpSpec s = spec("t", {128, 64});
        if (r == 1) c.change(s);
        w.submit(r, s);
        w.submit(r, spec("other"));  // keeps working
      }
      for (int i = 0; i < 3 && w.failed[0].empty(); ++i) w.cycle();
      for (int r = 0; r < 3; ++r) {
        ASSERT_EQ(w.failed[r].count("t"), 1u) << c.field;
        EXPECT_EQ(w.failed[r]["t"], c.text) << c.field;
        EXPECT_EQ(w[r].pendingCount(), 0u);
        EXPECT_NE(std::find(w.done[r].begin(), w.done[r].end(), "other"),
                  w.done[r].end());
      }
    }
  }
  // Broadcast root.
  World w(2);
  for (int r = 0; r < 2; ++r) {
    OpSpec s = spec("b", {4}, OpKind::kBroadcast);
    s.root = r;
    w.submit(r, s);
  }
  w.cycle();
  EXPECT_EQ(w.failed[0]["b"], "broadcast 'b': root differs: rank 0 has 0, rank 1 has 1");
  EXPECT_EQ(w.failed[1]["b"], w.failed[0]["b"]);
}

TEST(NegotiatorTest, AllgatherFirstDimensionsPerRankAndCached) {
  World w(3);
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) w.submit(r, spec("g", {r + 1, 2}, OpKind::kAllgather));
    auto out = w.cycle();
    ASSERT_EQ(out[0].ready.size(), 1u);
    EXPECT_EQ(out[0].ready[0].firstDims, (std::vector<int64_t>{1, 2, 3}));
    if (step > 0) {
      EXPECT_EQ(w.lastVariableBytes, 0u);
    }
  }
  // A rank's first dimension changes: renegotiated, not an error.
  for (int r = 0; r < 3; ++r)
    w.submit(r, spec("g", {r == 2 ? 7 : r + 1, 2}, OpKind::kAllgather));
  std::vector<Outcome> out;
  for (int i = 0; i < 3; ++i) {
    out = w.cycle();
    if (!out[0].ready.empty()) break;
  }
  ASSERT_EQ(out[0].ready.size(), 1u);
  EXPECT_EQ(out[0].ready[0].firstDims, (std::vector<int64_t>{1, 2, 7}));
  EXPECT_TRUE(w.failed.empty());
}

TEST(NegotiatorTest, GroupsAreReadyOnlyTogetherAndAdjacent) {
  World w(2);
  auto member = [](const std::string& name) {
    OpSpec s = spec(name);
    s.group = groupId({"g.a", "g.b", "g.c"});
    s.groupSize = 3;
    return s;
  };
  w.submit(0, member("g.a"));
  w.submit(0, member("g.b"));
  w.submit(0, member("g.c"));
  w.submit(1, member("g.c"));
  w.submit(1, member("g.a"));
  w.submit(0, spec("a.solo"));
  w.submit(1, spec("a.solo"));
  auto out = w.cycle();
  EXPECT_EQ(World::names(out[0].ready), std::vector<std::string>{"a.solo"});
  w.submit(1, member("g.b"));
  out = w.cycle();
  auto names = World::names(out[0].ready);
  ASSERT_EQ(names.size(), 3u);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"g.a", "g.b", "g.c"}));
  // Cached, with a non-member between the members' slots: still adjacent.
  for (int r = 0; r < 2; ++r) {
    w.submit(r, member("g.a"));
    w.submit(r, spec("a.solo"));
    w.submit(r, member("g.b"));
    w.submit(r, member("g.c"));
  }
  out = w.cycle();
  ASSERT_EQ(out[0].ready.size(), 4u);
  std::vector<int> groupAt;
  for (size_t i = 0; i < 4; ++i) {
    if (out[0].ready[i].spec->group) groupAt.push_back(int(i));
  }
  ASSERT_EQ(groupAt.size(), 3u);
  EXPECT_EQ(groupAt[2] - groupAt[0], 2);
}

TEST(NegotiatorTest, AGroupWithAMismatchedMemberFailsWhole) {
  World w(2);
  auto member = [](const std::string& name, int64_t d) {
    OpSpec s = spec(name, {d});
    s.group = groupId({"a", "b"});
    s.groupSize = 2;
    return s;
  };
  w.submit(0, member("a", 4));
  w.submit(0, member("b", 4));
  w.submit(1, member("a", 4));
  w.submit(1, member("b", 5));
  for (int i = 0; i < 3; ++i) w.cycle();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(w.failed[r].size(), 2u);
    EXPECT_NE(w.failed[r]["b"].find("shape differs"), std::string::npos);
    EXPECT_NE(w.failed[r]["a"].find("another member of its group failed"),
              std::string::npos);
    EXPECT_EQ(w[r].pendingCount(), 0u);
  }
  // The same group, fixed, works next time.
  w.submit(0, member("a", 4));
  w.submit(0, member("b", 4));
  w.submit(1, member("a", 4));
  w.submit(1, member("b", 4));
  w.cycle();
  EXPECT_EQ(w.done[0].size(), 2u);
}

TEST(NegotiatorTest, JoinedRanksContributeZerosAndAreNotWaitedFor) {
  World w(3);
  w.flags[2].joined = true;
  w.submit(0, spec("a"));
  w.submit(1, spec("a"));
  auto out = w.cycle();
  ASSERT_EQ(out[2].ready.size(), 1u);
  EXPECT_FALSE(out[2].ready[0].localId);
  EXPECT_EQ(bools(out[2].ready[0].submitted), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(out[2].ready[0].contributors(), 2);
  EXPECT_EQ(out[2].ready[0].arrivals[2], Clock::time_point::min());
  EXPECT_EQ(out[0].joinedRanks, std::vector<int>{2});
  // Cached path too.
  w.submit(0, spec("a"));
  w.submit(1, spec("a"));
  out = w.cycle();
  ASSERT_EQ(out[1].ready.size(), 1u);
  EXPECT_EQ(out[1].ready[0].contributors(), 2);
  // Every rank joined: whatever any rank still has goes, the rest give zeros.
  w.flags[0].joined = w.flags[1].joined = true;
  w.submit(0, spec("b"));
  out = w.cycle();
  EXPECT_EQ(out[0].joinedRanks.size(), 3u);
  ASSERT_EQ(out[1].ready.size(), 1u);
  EXPECT_EQ(out[1].ready[0].contributors(), 1);
}

TEST(NegotiatorTest, FlagsTravel) {
  World w(3);
  w.flags[1].shutdown = true;
  w.flags[0].fusionThresholdBytes = 12345;
  w.flags[0].cycleTimeMs = 2.5;
  w.flags[2].fusionThresholdBytes = 999;  // only rank 0's counts
  w.flags[0].stallShutdown = "stall: it is over";
  auto out = w.cycle();
  EXPECT_EQ(out[2].shutdownRanks, std::vector<int>{1});
  EXPECT_EQ(out[2].fusionThresholdBytes, 12345);
  EXPECT_EQ(out[2].cycleTimeMs, 2.5);
  EXPECT_EQ(out[1].stallShutdown, "stall: it is over");
}

TEST(NegotiatorTest, DuplicatePendingNameIsRejected) {
  Negotiator n(0, 2);
  n.submit(1, spec("a"));
  try {
    n.submit(2, spec("a"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos);
  }
  EXPECT_EQ(n.pendingIds(), std::vector<OpId>{1});
}

TEST(NegotiatorTest, DifferentCacheCapacitiesAreAnError) {
  Negotiator a(0, 2, 64), b(1, 2, 128);
  auto ma = a.prepare({});
  auto mb = b.prepare({});
  try {
    a.process({ma.fixed, mb.fixed}, {{}, {}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("KOLO_CACHE_CAPACITY"), std::string::npos);
  }
}

// A cache much smaller than the working set: entries are evicted and names
// renegotiated, results stay identical and complete.
// An operation pending on one rank under its cache slot, whose entry is
// evicted (the slot reused by a new name) before the other rank submits it:
// it is sent again, the slot's bit now means the new name only, and the
// operation still runs once on both ranks.
TEST(NegotiatorTest, PendingCachedOperationSurvivesTheEvictionOfItsSlot) {
  World w(2, 2);
  for (int r = 0; r < 2; ++r) {
    w.submit(r, spec("a"));
    w.submit(r, spec("b"));
  }
  w.cycle();  // a, b cached in slots 0, 1; a least recently used
  ASSERT_EQ(w.done[0], (std::vector<std::string>{"a", "b"}));
  w.submit(0, spec("a"));  // a hit: pending on rank 0 under slot 0
  for (int r = 0; r < 2; ++r) w.submit(r, spec("c"));
  auto out = w.cycle();  // c evicts a and takes slot 0
  EXPECT_EQ(World::names(out[0].ready), std::vector<std::string>{"c"});
  ASSERT_NE(w[0].cache().atSlot(0), nullptr);
  EXPECT_EQ(w[0].cache().atSlot(0)->spec->name, "c");
  EXPECT_EQ(w[0].pendingCount(), 1u);
  out = w.cycle();  // rank 0 sends a again; nothing is ready
  EXPECT_TRUE(out[0].ready.empty());
  EXPECT_GT(w.lastVariableBytes, 0u);
  w.submit(1, spec("a"));
  out = w.cycle();
  EXPECT_EQ(World::names(out[0].ready), std::vector<std::string>{"a"});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(w.done[r], (std::vector<std::string>{"a", "b", "c", "a"})) << "rank " << r;
    EXPECT_TRUE(w.failed[r].empty());
    EXPECT_EQ(w[r].pendingCount(), 0u);
  }
}

// The slot hint: a right one is used, a stale one (another name's slot,
// an empty slot, out of range) falls back to the lookup by name, and the
// hint always comes back as the name's slot now.
TEST(NegotiatorTest, SlotHintsFindTheSlotAndStaleOnesFallBack) {
  World w(2, 4);
  for (int r = 0; r < 2; ++r) {
    w.submit(r, spec("a"));
    w.submit(r, spec("b"));
  }
  w.cycle();  // a in slot 0, b in slot 1
  const size_t none = Negotiator::kNoSlot;
  for (size_t given : {size_t{0}, size_t{1}, size_t{3}, size_t{99}, none}) {
    size_t hintA = given, hintB = given;
    for (int r = 0; r < 2; ++r) {
      hintA = given;
      hintB = given;
      w.submit(r, spec("a"), &hintA);
      w.submit(r, spec("b"), &hintB);
    }
    EXPECT_EQ(hintA, 0u) << "given " << given;
    EXPECT_EQ(hintB, 1u) << "given " << given;
    auto out = w.cycle();
    EXPECT_EQ(World::names(out[0].ready), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(w.lastVariableBytes, 0u) << "given " << given;  // both cached
  }
  // A name not cached: the hint says so, and the operation is sent.
  size_t hint = 0;
  w.submit(0, spec("c"), &hint);
  EXPECT_EQ(hint, none);
  // A duplicate found through a right hint is still rejected.
  size_t again = none;
  w.submit(1, spec("a"), &again);
  size_t dup = again;
  EXPECT_THROW(w.submit(1, spec("a"), &dup), Error);
  w.submit(1, spec("c"));
  w.submit(0, spec("a"));
  auto out = w.cycle();
  EXPECT_EQ(World::names(out[0].ready), (std::vector<std::string>{"a", "c"}));
}

TEST(NegotiatorTest, TinyCacheStillAgrees) {
  World w(3, 4);
  std::mt19937 rng(3);
  for (int step = 0; step < 10; ++step) {
    w.done.clear();
    for (int r = 0; r < 3; ++r) {
      std::vector<int> ids(12);
      for (int i = 0; i < 12; ++i) ids[i] = i;
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int i : ids) w.submit(r, spec("t" + std::to_string(i)));
    }
    for (int c = 0; c < 10 && w.done[0].size() < 12; ++c) w.cycle();
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(w.done[r].size(), 12u);
      EXPECT_EQ(w.done[r], w.done[0]);
    }
  }
}

}  // namespace
}  // namespace kolo::runtime
