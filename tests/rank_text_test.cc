// How messages name ranks (src/common/rank_text.h).
#include "common/rank_text.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kolo {
namespace {

TEST(RankText, OneRankOrMany) {
  EXPECT_EQ(rankList({3}), "rank 3");
  EXPECT_EQ(rankList({0, 2, 5}), "ranks 0,2,5");
  EXPECT_EQ(rankNumbers({1, 3}), "1,3");
  EXPECT_EQ(rankNumbers({}), "");
}

TEST(RankText, LongListsAreCut) {
  std::vector<int> ranks(40);
  std::iota(ranks.begin(), ranks.end(), 0);
  EXPECT_EQ(rankList(ranks, 3), "ranks 0,1,2,... (40 ranks)");
  EXPECT_EQ(rankNumbers({7, 8, 9}, 3), "7,8,9");
}

TEST(RankText, WhereARankRuns) {
  EXPECT_EQ(rankText(3), "rank 3");
  EXPECT_EQ(rankText(3, "", 1234), "rank 3 (pid 1234)");
  EXPECT_EQ(rankText(3, "node7"), "rank 3 on host node7");
  EXPECT_EQ(rankText(3, "node7", 1234), "rank 3 on host node7 (pid 1234)");
}

}  // namespace
}  // namespace kolo
