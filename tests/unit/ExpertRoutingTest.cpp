//===- ExpertRoutingTest.cpp - Rows per expert of the tools' GEMMs --------===//
//
// tools/common/ExpertRouting.h: routeTotalRows gives every routing exactly
// the rows asked for (a moss-tune shape's M), keeps routeRows's empty and
// one-row experts, and names a bad routing.
//
//===----------------------------------------------------------------------===//

#include "ExpertRouting.h"

#include "gtest/gtest.h"

#include <numeric>

using namespace moss::jit;

namespace {

int64_t sum(const std::vector<int64_t> &rows) {
  return std::accumulate(rows.begin(), rows.end(), int64_t(0));
}

TEST(ExpertRoutingTest, UniformSplitsTheRowsEvenly) {
  std::mt19937_64 rng(1);
  llvm::Expected<std::vector<int64_t>> rows =
      routeTotalRows(64, 16384 + 5, "uniform", rng);
  ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
  ASSERT_EQ(rows->size(), 64u);
  EXPECT_EQ(sum(*rows), 16384 + 5);
  for (size_t g = 0; g < rows->size(); ++g)
    EXPECT_EQ((*rows)[g], 256 + (g < 5 ? 1 : 0)) << g;
}

TEST(ExpertRoutingTest, EveryRoutingGivesExactlyTheRowsAsked) {
  for (const char *routing : {"uniform", "random", "skewed", "sparse"})
    for (int64_t groups : {1, 3, 8, 64, 256})
      for (int64_t total : {0, 1, 127, 4096, 16384, 65536}) {
        std::mt19937_64 rng(uint64_t(groups * 7 + total));
        llvm::Expected<std::vector<int64_t>> rows =
            routeTotalRows(groups, total, routing, rng);
        ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
        EXPECT_EQ(int64_t(rows->size()), groups);
        EXPECT_EQ(sum(*rows), total) << routing << " " << groups;
        for (int64_t r : *rows)
          EXPECT_GE(r, 0) << routing << " " << groups << " " << total;
      }
}

TEST(ExpertRoutingTest, DrawnRoutingsKeepTheirEmptyAndOneRowExperts) {
  std::mt19937_64 rng(5);
  llvm::Expected<std::vector<int64_t>> rows =
      routeTotalRows(64, 16384, "skewed", rng);
  ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
  EXPECT_EQ((*rows)[0], 0);
  EXPECT_EQ((*rows)[1], 1);
  // One expert takes about half of all rows.
  EXPECT_GE(*std::max_element(rows->begin(), rows->end()), 16384 / 2);
}

TEST(ExpertRoutingTest, ABadRoutingIsNamed) {
  std::mt19937_64 rng(1);
  llvm::Expected<std::vector<int64_t>> rows =
      routeTotalRows(8, 1024, "zipf", rng);
  ASSERT_FALSE(bool(rows));
  EXPECT_NE(llvm::toString(rows.takeError()).find("'zipf'"), std::string::npos);
  EXPECT_FALSE(isTotalRouting("zipf"));
  EXPECT_TRUE(isTotalRouting("uniform"));
}

} // namespace
