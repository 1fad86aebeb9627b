#include "coordinator/model_upload.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

v1::Chunk ChunkOf(int index, const std::vector<float>& values) {
  v1::Chunk chunk;
  chunk.set_index(index);
  chunk.set_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return chunk;
}

TEST(ModelUploadTest, AShardedRunsUploadKeepsOnlyTheDigestsOfTheModel) {
  const std::vector<float> values = {1, 2, 3, 4, 5};
  const std::vector<float> momentum = {0.5, 0, 0, 0, -1};
  const ChunkLayout layout{5, 2};
  ModelUpload upload(layout, /*has_momentum=*/true, /*keep_values=*/false,
                     /*keeps_momentum=*/true);
  // Any order, the momentum after.
  for (int c : {2, 0, 1}) {
    v1::Chunk chunk =
        ChunkOf(c, std::vector<float>(values.begin() + layout.begin(c),
                                      values.begin() + layout.begin(c) + layout.size(c)));
    ASSERT_TRUE(upload.Take(false, &chunk).ok());
  }
  EXPECT_FALSE(upload.Complete().ok());  // no momentum yet
  for (int c = 0; c < 3; ++c) {
    v1::Chunk chunk =
        ChunkOf(c, std::vector<float>(momentum.begin() + layout.begin(c),
                                      momentum.begin() + layout.begin(c) + layout.size(c)));
    ASSERT_TRUE(upload.Take(true, &chunk).ok());
  }
  ASSERT_TRUE(upload.Complete().ok());
  const std::vector<DigestPair> digests = upload.ChunkDigests();
  ASSERT_EQ(digests.size(), 3u);
  RangeDigests whole(3, 0);
  for (int c = 0; c < 3; ++c) whole.Set(c, digests[c]);
  EXPECT_EQ(whole.Of(0, 3), ModelDigest(values, momentum, layout));
}

// An initial model comes without momentum; a run that keeps one starts it at zero.
TEST(ModelUploadTest, WithoutAnUploadedMomentumTheDigestsCountAZeroOne) {
  const std::vector<float> values = {1, 2, 3};
  const ChunkLayout layout{3, 2};
  ModelUpload upload(layout, /*has_momentum=*/false, /*keep_values=*/false,
                     /*keeps_momentum=*/true);
  v1::Chunk first = ChunkOf(0, {1, 2});
  v1::Chunk second = ChunkOf(1, {3});
  ASSERT_TRUE(upload.Take(false, &first).ok());
  ASSERT_TRUE(upload.Take(false, &second).ok());
  ASSERT_TRUE(upload.Complete().ok());
  RangeDigests whole(2, 0);
  for (int c = 0; c < 2; ++c) whole.Set(c, upload.ChunkDigests()[c]);
  EXPECT_EQ(whole.Of(0, 2), ModelDigest(values, std::vector<float>(3, 0.0f), layout));
}

TEST(ModelUploadTest, AStarRunsUploadKeepsTheValues) {
  ModelUpload upload(ChunkLayout{3, 2}, false, true, false);
  v1::Chunk second = ChunkOf(1, {3});
  v1::Chunk first = ChunkOf(0, {1, 2});
  ASSERT_TRUE(upload.Take(false, &second).ok());
  ASSERT_TRUE(upload.Take(false, &first).ok());
  ASSERT_TRUE(upload.Complete().ok());
  EXPECT_EQ(upload.TakeValues(), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(upload.TakeMomentum().has_value());
}

TEST(ModelUploadTest, BadChunksAreRefusedNamingTheField) {
  ModelUpload upload(ChunkLayout{3, 2}, false, false, false);
  v1::Chunk outside = ChunkOf(2, {1});
  EXPECT_NE(upload.Take(false, &outside).message().find("chunk.index: 2 is out of range"),
            std::string::npos);
  v1::Chunk short_chunk = ChunkOf(0, {1});
  EXPECT_NE(upload.Take(false, &short_chunk).message().find("expected 8"), std::string::npos);
  v1::Chunk nan = ChunkOf(0, {1, std::nanf("")});
  EXPECT_NE(upload.Take(false, &nan).message().find("NaN"), std::string::npos);
  v1::Chunk good = ChunkOf(0, {1, 2});
  ASSERT_TRUE(upload.Take(false, &good).ok());
  v1::Chunk again = ChunkOf(0, {1, 2});
  EXPECT_NE(upload.Take(false, &again).message().find("sent twice"), std::string::npos);
  v1::Chunk momentum = ChunkOf(1, {1});
  EXPECT_NE(upload.Take(true, &momentum).message().find("no momentum follows"), std::string::npos);
  EXPECT_NE(upload.Complete().message().find("got 1 of 2 chunks"), std::string::npos);
}

}  // namespace
}  // namespace localsgd
