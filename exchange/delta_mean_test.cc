#include "exchange/delta_mean.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "exchange/codec.h"
#include "gtest/gtest.h"
#include "tests/testutil/random_vector.h"

namespace localsgd {
namespace {

using ::localsgd::testing::RandomVector;

DeltaMean::Options Opts(int64_t n, int64_t chunk_values) {
  DeltaMean::Options options;
  options.layout = ChunkLayout{n, chunk_values};
  return options;
}

// Encodes `delta`'s chunk and feeds it to the mean as a member would.
absl::Status Feed(DeltaMean& engine, int slot, int chunk, const std::vector<float>& delta) {
  const ChunkLayout& layout = engine.layout();
  std::string bytes;
  Encode(v1::CODEC_FP32,
         absl::MakeConstSpan(delta.data() + layout.begin(chunk), layout.size(chunk)), &bytes);
  std::vector<float> scratch;
  LOCALSGD_RETURN_IF_ERROR(engine.Check(chunk, bytes, &scratch));
  return engine.Add(slot, chunk, bytes, scratch);
}

// Value `i` of the mean (its chunk taken).
float MeanAt(DeltaMean& engine, int64_t i) {
  const int chunk = static_cast<int>(i / engine.layout().chunk_values);
  return engine.Mean(chunk)[static_cast<size_t>(i - engine.layout().begin(chunk))];
}

TEST(DeltaMeanTest, TheWeightedMeanOfAChunkIsReadyOnceEveryMemberStillInSentIt) {
  DeltaMean engine(Opts(512, 256));
  engine.BeginRound(3);
  for (int m = 0; m < 3; ++m) ASSERT_TRUE(engine.SetWeight(m, 1 + m).ok());
  const std::vector<float> a = RandomVector(512, 1), b = RandomVector(512, 2),
                           c = RandomVector(512, 3);
  ASSERT_TRUE(Feed(engine, 0, 1, a).ok());
  ASSERT_TRUE(Feed(engine, 1, 1, b).ok());
  EXPECT_TRUE(engine.TakeCompleted().empty());
  engine.Drop(2);  // chunk 1 no longer waits for slot 2
  EXPECT_EQ(engine.TakeCompleted(), std::vector<int>{1});
  EXPECT_TRUE(engine.TakeCompleted().empty());  // each chunk once
  for (int64_t i = 256; i < 512; ++i) {
    ASSERT_FLOAT_EQ(MeanAt(engine, i), static_cast<float>((1 * a[i] + 2 * b[i]) / 3.0)) << i;
  }
  EXPECT_FALSE(engine.AllComplete());
  EXPECT_FALSE(Feed(engine, 2, 0, c).ok());  // dropped
  EXPECT_FALSE(Feed(engine, 0, 1, a).ok());  // twice
}

TEST(DeltaMeanTest, ScreeningExcludesANormOutlierFromEveryChunk) {
  DeltaMean::Options options = Opts(1000, 300);  // 4 chunks
  options.max_norm_ratio = 5;
  DeltaMean engine(options);
  engine.BeginRound(4);
  std::vector<std::vector<float>> deltas;
  for (int m = 0; m < 4; ++m) {
    ASSERT_TRUE(engine.SetWeight(m, 1 + m).ok());
    deltas.push_back(RandomVector(1000, 10 + m, 0.1f));
  }
  for (float& v : deltas[2]) v *= 100;  // slot 2: norm ~100x the others'
  for (int m = 0; m < 4; ++m) ASSERT_TRUE(Feed(engine, m, 0, deltas[m]).ok());
  // Chunk 0 is complete, but nothing is final before every chunk has arrived.
  EXPECT_TRUE(engine.TakeCompleted().empty());
  for (int chunk = 1; chunk < 4; ++chunk) {
    for (int m = 0; m < 4; ++m) ASSERT_TRUE(Feed(engine, m, chunk, deltas[m]).ok());
  }
  EXPECT_EQ(engine.TakeCompleted().size(), 4u);
  std::vector<DeltaMean::Exclusion> excluded = engine.TakeExclusions();
  ASSERT_EQ(excluded.size(), 1u);
  EXPECT_EQ(excluded[0].slot, 2);
  EXPECT_GT(excluded[0].norm, 50 * excluded[0].others_median);
  for (int i = 0; i < 1000; ++i) {  // the weighted mean of slots 0, 1 and 3 alone
    const double mean = (1 * deltas[0][i] + 2 * deltas[1][i] + 4 * deltas[3][i]) / 7.0;
    ASSERT_NEAR(MeanAt(engine, i), mean, 1e-6) << i;
  }
}

TEST(DeltaMeanTest, ScreeningKeepsMembersOfSimilarNorms) {
  DeltaMean::Options options = Opts(256, 256);
  options.max_norm_ratio = 3;
  DeltaMean engine(options);
  engine.BeginRound(2);
  std::vector<float> a = RandomVector(256, 1), b = RandomVector(256, 2, 2.0f);  // 2x: kept
  ASSERT_TRUE(engine.SetWeight(0, 1).ok());
  ASSERT_TRUE(engine.SetWeight(1, 1).ok());
  ASSERT_TRUE(Feed(engine, 0, 0, a).ok());
  ASSERT_TRUE(Feed(engine, 1, 0, b).ok());
  EXPECT_EQ(engine.TakeCompleted().size(), 1u);
  EXPECT_TRUE(engine.TakeExclusions().empty());
  EXPECT_NEAR(MeanAt(engine, 9), (a[9] + b[9]) / 2, 1e-6);
}

// Issue 37, finding 4: one member's within-ratio delta with a large weight, or a poisoned
// delta, set the update. A trimmed mean leaves each value's extremes out.
TEST(DeltaMeanTest, TheTrimmedMeanLeavesOutEachValuesExtremes) {
  DeltaMean::Options options = Opts(600, 256);  // 3 chunks
  options.trim_fraction = 0.25;                 // 4 members: one off each end
  DeltaMean engine(options);
  engine.BeginRound(4);
  std::vector<std::vector<float>> deltas;
  for (int m = 0; m < 4; ++m) {
    ASSERT_TRUE(engine.SetWeight(m, m == 3 ? 3 : 1).ok());
    deltas.push_back(RandomVector(600, 20 + m));
  }
  for (int i = 0; i < 600; i += 2) deltas[1][i] = 1e30f;  // poisoned on every other value
  for (int chunk = 0; chunk < 3; ++chunk) {
    for (int m = 0; m < 4; ++m) ASSERT_TRUE(Feed(engine, m, chunk, deltas[m]).ok());
  }
  EXPECT_EQ(engine.TakeCompleted().size(), 3u);
  EXPECT_TRUE(engine.TakeExclusions().empty());
  for (int i = 0; i < 600; ++i) {
    std::vector<std::pair<float, double>> column;
    for (int m = 0; m < 4; ++m) column.push_back({deltas[m][i], m == 3 ? 3.0 : 1.0});
    std::sort(column.begin(), column.end());
    const double mean = (column[1].first * column[1].second + column[2].first * column[2].second) /
                        (column[1].second + column[2].second);
    ASSERT_NEAR(MeanAt(engine, i), mean, 1e-5) << i;
    ASSERT_LT(std::abs(MeanAt(engine, i)), 10) << i;  // the poison never reaches the model
  }
}

TEST(DeltaMeanTest, TooFewMembersToTrimGiveThePlainMeanAndScreeningComesFirst) {
  DeltaMean::Options options = Opts(256, 256);
  options.trim_fraction = 0.34;  // 3 members: the median; 2 members: nothing to trim
  options.max_norm_ratio = 5;
  DeltaMean engine(options);
  engine.BeginRound(3);
  std::vector<float> a = RandomVector(256, 1), b = RandomVector(256, 2), c = RandomVector(256, 3);
  for (float& v : c) v *= 100;  // screened out: the other two are averaged, not trimmed
  for (int m = 0; m < 3; ++m) ASSERT_TRUE(engine.SetWeight(m, 1).ok());
  ASSERT_TRUE(Feed(engine, 0, 0, a).ok());
  ASSERT_TRUE(Feed(engine, 1, 0, b).ok());
  ASSERT_TRUE(Feed(engine, 2, 0, c).ok());
  EXPECT_EQ(engine.TakeCompleted().size(), 1u);
  EXPECT_EQ(engine.TakeExclusions().size(), 1u);
  for (int i = 0; i < 256; ++i) ASSERT_NEAR(MeanAt(engine, i), (a[i] + b[i]) / 2, 1e-6) << i;
}

}  // namespace
}  // namespace localsgd
