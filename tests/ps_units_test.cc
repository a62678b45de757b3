// The parameter servers' pure parts: wire header and its decoder, shard
// map, update rules (against PyTorch 1.13's results) and the EASGD exchange.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ps/segments.h"
#include "ps/shard_map.h"
#include "ps/update_rule.h"
#include "ps/wire.h"

namespace kolo::ps {
namespace {

// ---- wire -------------------------------------------------------------------

struct Limits {
  std::vector<uint64_t> shardBytes{400, 800};
  WireLimits limits() const {
    WireLimits l;
    l.workers = 3;
    l.shardBytes = shardBytes.data();
    l.shards = static_cast<uint32_t>(shardBytes.size());
    return l;
  }
};

std::string decodeError(const HeaderBytes& b, const WireLimits& l) {
  try {
    decodeHeader(b.data(), b.size(), l, 7);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    return e.what();
  }
  return "";
}

TEST(PsWire, RoundTrip) {
  Limits lim;
  Header h;
  h.type = MessageType::kPush;
  h.flags = kFlagRejectedStale;
  h.worker = 2;
  h.shard = 1;
  h.version = 0x0102030405060708ull;
  h.payloadBytes = 800;
  h.lr = 0.125f;
  HeaderBytes b = encodeHeader(h);
  EXPECT_EQ(b[0], 0x31);  // little-endian magic "KPS1"
  Header d = decodeHeader(b.data(), b.size(), lim.limits(), 0);
  EXPECT_EQ(d.type, h.type);
  EXPECT_EQ(d.flags, h.flags);
  EXPECT_EQ(d.worker, h.worker);
  EXPECT_EQ(d.shard, h.shard);
  EXPECT_EQ(d.version, h.version);
  EXPECT_EQ(d.payloadBytes, h.payloadBytes);
  EXPECT_EQ(d.lr, h.lr);
}

TEST(PsWire, RejectsEveryBadField) {
  Limits lim;
  Header good;
  good.type = MessageType::kPull;
  good.worker = 1;
  good.shard = 0;
  HeaderBytes b = encodeHeader(good);

  EXPECT_EQ(decodeError(b, lim.limits()), "") << "a good header";
  try {
    decodeHeader(b.data(), 39, lim.limits(), 7);
    FAIL() << "a short header was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("39 bytes, expected 40"), std::string::npos)
        << e.what();
  }

  HeaderBytes bad = b;
  bad[0] ^= 0xff;
  EXPECT_NE(decodeError(bad, lim.limits()).find("magic"), std::string::npos);

  bad = b;
  bad[4] = 42;
  EXPECT_NE(decodeError(bad, lim.limits()).find("unknown message type 42"),
            std::string::npos);

  Header h = good;
  h.worker = 3;
  EXPECT_NE(
      decodeError(encodeHeader(h), lim.limits()).find("worker 3 is not below the 3"),
      std::string::npos);

  h = good;
  h.shard = 2;
  EXPECT_NE(decodeError(encodeHeader(h), lim.limits()).find("shard 2 is not below the 2"),
            std::string::npos);

  h = good;
  h.type = MessageType::kPush;
  h.shard = 1;
  h.payloadBytes = 804;  // shard 1 holds 800 bytes
  std::string e = decodeError(encodeHeader(h), lim.limits());
  EXPECT_NE(e.find("from rank 7"), std::string::npos) << e;
  EXPECT_NE(e.find("payload of 804 bytes, expected 800"), std::string::npos) << e;

  h = good;
  h.payloadBytes = 4;  // a pull carries nothing
  EXPECT_NE(decodeError(encodeHeader(h), lim.limits()).find("expected 0"),
            std::string::npos);

  h = good;
  h.type = MessageType::kError;
  h.payloadBytes = uint64_t{1} << 40;  // a huge length never reaches an allocation
  EXPECT_NE(decodeError(encodeHeader(h), lim.limits()).find("at most 4096"),
            std::string::npos);
  h.payloadBytes = 12;
  EXPECT_EQ(
      decodeHeader(encodeHeader(h).data(), kHeaderBytes, lim.limits(), 0).payloadBytes,
      12u);
}

// ---- shard map -------------------------------------------------------------

void expectCovers(const ShardMap& m, const std::vector<uint64_t>& sizes) {
  std::vector<std::vector<int>> seen(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) seen[t].assign(sizes[t], 0);
  for (int s = 0; s < m.servers(); ++s) {
    uint64_t at = 0;
    for (const Piece& p : m.shards[s]) {
      EXPECT_EQ(p.shardOffset, at);
      at += p.count;
      for (uint64_t i = 0; i < p.count; ++i) ++seen[p.tensor][p.offset + i];
    }
    EXPECT_EQ(at, m.shardElements[s]);
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    for (uint64_t i = 0; i < sizes[t]; ++i) {
      ASSERT_EQ(seen[t][i], 1) << "tensor " << t << " element " << i;
    }
  }
}

TEST(PsShardMap, CoversEveryElementOnce) {
  for (int servers : {1, 2, 3, 4, 7}) {
    std::vector<uint64_t> sizes{1000, 3, 0, 250, 17, 64, 1};
    ShardMap m = ShardMap::build(sizes, servers);
    ASSERT_EQ(m.servers(), servers);
    expectCovers(m, sizes);
  }
}

TEST(PsShardMap, SplitsALargeTensorAndBalances) {
  // One tensor of 1000 and a few small ones over 4 servers: the large one is
  // cut at the fair share (ceil(1100 / 4) = 275), so no server holds more
  // than the share plus the largest small tensor.
  std::vector<uint64_t> sizes{1000, 40, 30, 20, 10};
  ShardMap m = ShardMap::build(sizes, 4);
  expectCovers(m, sizes);
  int piecesOfLarge = 0;
  for (const auto& shard : m.shards) {
    for (const Piece& p : shard) piecesOfLarge += p.tensor == 0;
  }
  EXPECT_EQ(piecesOfLarge, 4);
  for (uint64_t n : m.shardElements) {
    EXPECT_LE(n, 275u + 40u);
    EXPECT_GE(n, 250u);
  }
}

TEST(PsShardMap, IsDeterministicAndRejectsNoServers) {
  std::vector<uint64_t> sizes{5, 5, 5, 9, 100};
  ShardMap a = ShardMap::build(sizes, 3);
  ShardMap b = ShardMap::build(sizes, 3);
  ASSERT_EQ(a.shardElements, b.shardElements);
  for (int s = 0; s < 3; ++s) {
    ASSERT_EQ(a.shards[s].size(), b.shards[s].size());
    for (size_t i = 0; i < a.shards[s].size(); ++i) {
      EXPECT_EQ(a.shards[s][i].tensor, b.shards[s][i].tensor);
      EXPECT_EQ(a.shards[s][i].offset, b.shards[s][i].offset);
    }
  }
  try {
    ShardMap::build(sizes, 0);
    FAIL() << "0 servers accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("got 0"), std::string::npos) << e.what();
  }
}

// ---- update rules ----------------------------------------------------------

// Three steps on p = [0.5, -1, 2, 0] with g_t = [0.1 t, -0.2, 0.3 / t, 1] and
// learning rates 0.1, 0.05, 0.02 (a scheduler); the expected values are what
// torch.optim of PyTorch 1.13 computes for the same configuration.
std::vector<float> threeSteps(const OptimizerConfig& c) {
  std::vector<float> p{0.5f, -1.0f, 2.0f, 0.0f};
  UpdateRule rule(c, p.size());
  const float lrs[] = {0.1f, 0.05f, 0.02f};
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g{static_cast<float>(0.1 * t), -0.2f, static_cast<float>(0.3 / t),
                         1.0f};
    rule.apply(p.data(), g.data(), lrs[t - 1]);
  }
  EXPECT_EQ(rule.steps(), 3u);
  return p;
}

void expectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-6f * (1.0f + std::abs(want[i]))) << "element " << i;
  }
}

TEST(PsUpdateRule, SgdMatchesTorch) {
  OptimizerConfig c;
  expectNear(threeSteps(c), {0.474000007f, -0.966000021f, 1.9605f, -0.170000002f});
  c.momentum = 0.9f;
  c.dampening = 0.1f;
  c.weightDecay = 0.01f;
  expectNear(threeSteps(c), {0.46504882f, -0.949536026f, 1.93588138f, -0.240304604f});
  c.dampening = 0.0f;
  c.nesterov = true;
  expectNear(threeSteps(c), {0.439919382f, -0.917271495f, 1.89821219f, -0.393945098f});
}

TEST(PsUpdateRule, AdamAndAdamWMatchTorch) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.weightDecay = 0.01f;
  c.beta1 = 0.8f;
  c.beta2 = 0.95f;
  c.eps = 1e-6f;
  expectNear(threeSteps(c), {0.331411839f, -0.830019236f, 1.83616149f, -0.169996008f});
  OptimizerConfig w;
  w.kind = OptimizerKind::kAdamW;
  w.weightDecay = 0.1f;
  expectNear(threeSteps(w), {0.324916333f, -0.813878894f, 1.80287993f, -0.169200987f});
}

TEST(PsUpdateRule, RmspropMatchesTorch) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kRmsprop;
  expectNear(threeSteps(c), {-1.10836112f, 0.470489919f, 0.717874765f, -1.47049022f});
  c.alpha = 0.9f;
  c.momentum = 0.5f;
  c.centered = true;
  c.weightDecay = 0.01f;
  expectNear(threeSteps(c), {-0.179393739f, -0.370399922f, 1.44253635f, -0.630926728f});
}

TEST(PsUpdateRule, BadOptimizersAreClearErrors) {
  try {
    parseOptimizerKind("Adagrad");
    FAIL() << "Adagrad accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'Adagrad' is not supported"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("SGD, Adam, AdamW, RMSprop"), std::string::npos);
  }
  EXPECT_EQ(parseOptimizerKind("RMSprop"), OptimizerKind::kRmsprop);
  EXPECT_EQ(parseOptimizerKind("adamw"), OptimizerKind::kAdamW);
  OptimizerConfig c;
  c.lr = -0.1f;
  EXPECT_THROW(UpdateRule(c, 1), Error);
  c.lr = 0.1f;
  c.nesterov = true;  // without momentum
  try {
    UpdateRule(c, 1);
    FAIL() << "nesterov without momentum accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("momentum=0"), std::string::npos) << e.what();
  }
  OptimizerConfig a;
  a.kind = OptimizerKind::kAdam;
  a.beta2 = 1.0f;
  EXPECT_THROW(UpdateRule(a, 1), Error);
}

// ---- EASGD -----------------------------------------------------------------

TEST(PsEasgd, ExchangeIsTheFormulaExactly) {
  // Values exact in binary, so the formula's result is exact too.
  std::vector<float> center{1.0f, -2.0f, 0.5f};
  std::vector<float> x{3.0f, -1.0f, 0.5f};
  std::vector<float> diff(3);
  easgdExchange(center.data(), x.data(), diff.data(), 3, 0.25f);
  EXPECT_EQ(diff, (std::vector<float>{0.5f, 0.25f, 0.0f}));
  EXPECT_EQ(center, (std::vector<float>{1.5f, -1.75f, 0.5f}));
  for (size_t i = 0; i < x.size(); ++i) x[i] -= diff[i];
  EXPECT_EQ(x, (std::vector<float>{2.5f, -1.25f, 0.5f}));
  // alpha = 1 moves the center onto x.
  easgdExchange(center.data(), x.data(), diff.data(), 3, 1.0f);
  EXPECT_EQ(center, x);
  EXPECT_THROW(easgdExchange(center.data(), x.data(), diff.data(), 3, 0.0f), Error);
  EXPECT_THROW(easgdExchange(center.data(), x.data(), diff.data(), 3, 1.5f), Error);
}

TEST(PsSegments, LargePiecesAreDirectAndSmallRunsPacked) {
  // Pieces in shard order: small, small, large, small, large, large.
  const uint64_t big = kDirectBytes / sizeof(float);
  std::vector<Piece> pieces;
  uint64_t at = 0;
  size_t tensor = 0;
  for (uint64_t n : {uint64_t{3}, uint64_t{4}, big, uint64_t{5}, big + 1, big}) {
    pieces.push_back({tensor++, 0, n, at});
    at += n;
  }
  const auto g = segmentsOf(pieces);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_FALSE(g[0].direct);
  EXPECT_EQ(g[0].count, 7u);
  EXPECT_EQ(g[0].pieces, 2u);
  EXPECT_TRUE(g[1].direct);
  EXPECT_EQ(g[1].shardOffset, 7u);
  EXPECT_EQ(g[1].firstPiece, 2u);
  EXPECT_FALSE(g[2].direct);
  EXPECT_EQ(g[2].count, 5u);
  EXPECT_TRUE(g[3].direct);
  EXPECT_TRUE(g[4].direct);
  uint64_t covered = 0;
  for (const Segment& s : g) {
    EXPECT_EQ(s.shardOffset, covered);
    covered += s.count;
  }
  EXPECT_EQ(covered, at);
}

}  // namespace
}  // namespace kolo::ps
