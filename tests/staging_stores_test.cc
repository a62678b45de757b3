// collectives::StagingStores (src/collectives/staging_stores.h): the
// schedule of its choices between plain and streaming stores, alone.
#include "collectives/staging_stores.h"

#include <gtest/gtest.h>
#include <kolo/error.h>

#include <vector>

namespace kolo::collectives {
namespace {

constexpr size_t kBytes = 4 << 20;
constexpr StoreKind kPlain = StoreKind::kPlain;
constexpr StoreKind kStreaming = StoreKind::kStreaming;

// Runs `calls` calls of `bytes`, each taking `plainSeconds` or
// `streamingSeconds` by the kind picked; returns the kinds picked.
std::vector<StoreKind> run(StagingStores& s, size_t bytes, int calls, double plainSeconds,
                           double streamingSeconds) {
  std::vector<StoreKind> picked;
  for (int i = 0; i < calls; ++i) {
    const StoreKind k = s.pick(bytes);
    s.record(bytes, k, k == kPlain ? plainSeconds : streamingSeconds);
    picked.push_back(k);
  }
  return picked;
}

TEST(StagingStoresTest, TriesEachKindThenKeepsTheFasterAndExploresPeriodically) {
  StagingStores s;
  const auto picked = run(s, kBytes, 3 * StagingStores::kExplorePeriod, 2e-3, 1e-3);
  EXPECT_EQ(picked[0], kPlain);
  EXPECT_EQ(picked[1], kStreaming);
  for (size_t i = 2; i < picked.size(); ++i) {
    const bool explore = i % StagingStores::kExplorePeriod == 0;
    EXPECT_EQ(picked[i], explore ? kPlain : kStreaming) << "call " << i;
  }
  EXPECT_EQ(s.favoured(kBytes), kStreaming);
}

TEST(StagingStoresTest, FollowsAChangeOfWhichKindIsFaster) {
  StagingStores s;
  run(s, kBytes, 40, 2e-3, 1e-3);
  ASSERT_EQ(s.favoured(kBytes), kStreaming);
  // Plain becomes the faster: each exploring call records a fast plain
  // sample; once they are most of its last kSamples, plain is favoured.
  const auto picked =
      run(s, kBytes, (StagingStores::kSamples + 2) * StagingStores::kExplorePeriod,
          0.5e-3, 1e-3);
  EXPECT_EQ(s.favoured(kBytes), kPlain);
  EXPECT_EQ(picked.back(), kPlain);
}

TEST(StagingStoresTest, OneSlowCallDoesNotSwitch) {
  StagingStores s;
  run(s, kBytes, 40, 2e-3, 1e-3);
  // One streaming call that waited on a descheduled peer.
  s.record(kBytes, kStreaming, 50e-3);
  EXPECT_EQ(s.favoured(kBytes), kStreaming);
}

TEST(StagingStoresTest, SizeClassesChooseApart) {
  StagingStores s;
  run(s, kBytes, 20, 2e-3, 1e-3);
  run(s, 64 << 10, 20, 1e-5, 3e-5);
  EXPECT_EQ(s.favoured(kBytes), kStreaming);
  EXPECT_EQ(s.favoured(64 << 10), kPlain);
  // A size class never seen starts with plain, then streaming.
  EXPECT_EQ(s.pick(1 << 26), kPlain);
  EXPECT_EQ(s.pick(1 << 26), kStreaming);
}

TEST(StagingStoresTest, AFixedKindNeverChanges) {
  for (StoreKind fixed : {kPlain, kStreaming}) {
    StagingStores s(fixed);
    const auto picked =
        run(s, kBytes, 40, fixed == kPlain ? 9e-3 : 1e-3, fixed == kPlain ? 1e-3 : 9e-3);
    for (StoreKind k : picked) EXPECT_EQ(k, fixed);
    EXPECT_EQ(s.favoured(kBytes), fixed);
  }
}

TEST(StagingStoresTest, ParsesTheSettingAndNamesABadValue) {
  EXPECT_EQ(StagingStores::parse("KOLO_SHM_STORES", "auto"), std::nullopt);
  EXPECT_EQ(StagingStores::parse("KOLO_SHM_STORES", "plain"), kPlain);
  EXPECT_EQ(StagingStores::parse("KOLO_SHM_STORES", "streaming"), kStreaming);
  try {
    StagingStores::parse("KOLO_SHM_STORES", "nt");
    FAIL() << "'nt' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "KOLO_SHM_STORES='nt' (expected auto, plain or streaming)");
  }
}

}  // namespace
}  // namespace kolo::collectives
