#include "coordinator/run_series.h"

#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

v1::SeriesPoint Round(int64_t round) {
  v1::SeriesPoint point;
  point.set_round(round);
  point.set_global_step(round * 10);
  return point;
}

std::vector<int64_t> Rounds(const RunSeries& series) {
  std::vector<int64_t> rounds;
  for (const v1::SeriesPoint& point : series.Points()) rounds.push_back(point.round());
  return rounds;
}

TEST(RunSeriesTest, KeepsEveryRoundUpToItsCapacity) {
  RunSeries series(8);
  for (int r = 1; r <= 7; ++r) series.Add(Round(r));
  EXPECT_EQ(Rounds(series), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(RunSeriesTest, ALongRunStaysEvenlySpreadAndBoundedWithTheLatestRoundLast) {
  RunSeries series(8);
  for (int r = 1; r <= 8; ++r) series.Add(Round(r));
  // Full: every other round kept, the latest shown all the same.
  EXPECT_EQ(Rounds(series), (std::vector<int64_t>{1, 3, 5, 7, 8}));
  for (int r = 9; r <= 10'000; ++r) {
    series.Add(Round(r));
    ASSERT_LE(series.Points().size(), 9u);
  }
  const std::vector<int64_t> rounds = Rounds(series);
  EXPECT_EQ(series.added(), 10'000);
  EXPECT_EQ(rounds.front(), 1);
  EXPECT_EQ(rounds.back(), 10'000);
  EXPECT_GE(rounds.size(), 4u);
  // Evenly spread: the kept rounds (all but the latest) are one stride apart.
  const int64_t stride = rounds[1] - rounds[0];
  for (size_t i = 1; i + 1 < rounds.size(); ++i) EXPECT_EQ(rounds[i] - rounds[i - 1], stride);
  EXPECT_GT(stride, 1000);
}

}  // namespace
}  // namespace localsgd
