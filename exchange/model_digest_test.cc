#include "exchange/model_digest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "exchange/outer_step.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(Crc32cTest, KnownValueAndContinuation) {
  const std::string text = "123456789";
  EXPECT_EQ(Crc32c(text.data(), text.size()), 0xe3069283u);  // CRC-32C's check value
  EXPECT_EQ(Crc32c(text.data() + 4, 5, Crc32c(text.data(), 4)), 0xe3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  // Lengths that are not multiples of 8 (the hardware path's word).
  const std::string odd = "abcdefghijk";
  uint32_t byte_by_byte = 0;
  for (char c : odd) byte_by_byte = Crc32c(&c, 1, byte_by_byte);
  EXPECT_EQ(Crc32c(odd.data(), odd.size()), byte_by_byte);
}

TEST(LaneCrcTest, PiecesGiveTheWholesDigestAndEveryByteCounts) {
  std::string data;
  for (int i = 0; i < 203; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  LaneCrc whole;
  whole.Update(data.data(), data.size());
  // In pieces of whole words, the last one not.
  for (size_t piece : {8, 16, 24, 40, 200}) {
    LaneCrc pieces;
    size_t at = 0;
    for (; at + piece <= data.size() - 3; at += piece) pieces.Update(data.data() + at, piece);
    pieces.Update(data.data() + at, data.size() - at);
    EXPECT_EQ(pieces.Digest(), whole.Digest()) << piece;
  }
  // Any one bit flipped, or two words swapped, changes it.
  for (size_t i = 0; i < data.size(); ++i) {
    std::string changed = data;
    changed[i] ^= 0x10;
    LaneCrc other;
    other.Update(changed.data(), changed.size());
    EXPECT_NE(other.Digest(), whole.Digest()) << i;
  }
  std::string swapped = data;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 24);
  LaneCrc other;
  other.Update(swapped.data(), swapped.size());
  EXPECT_NE(other.Digest(), whole.Digest());
}

std::vector<float> Values(size_t n, float scale) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>((i * 7919) % 1000) / 1000.0f;
  return out;
}

// A member's digest from the mean equals the coordinator's from its stepped copy, for every
// outer optimizer and a chunk that is not a multiple of the block.
TEST(ModelDigestTest, NextChunkDigestIsTheSteppedChunksDigest) {
  const size_t n = 2500;
  const std::vector<float> mean = Values(n, 0.01f);
  const std::vector<float> global = Values(n, 1.0f);
  const std::vector<float> momentum = Values(n, 0.1f);
  for (const OuterOptimizer& outer : {OuterOptimizer{1.0, 0, false}, OuterOptimizer{0.7, 0.9, true},
                                      OuterOptimizer{0.5, 0.9, false}}) {
    const bool has_momentum = outer.momentum != 0;
    std::vector<float> next = mean;
    std::vector<float> next_momentum(has_momentum ? n : 0);
    ASSERT_TRUE(
        OuterStepInto(outer, absl::MakeSpan(next), global,
                      has_momentum ? absl::MakeConstSpan(momentum) : absl::Span<const float>(),
                      absl::MakeSpan(next_momentum)));
    const DigestPair expected = ChunkDigest(next, next_momentum);
    EXPECT_EQ(
        NextChunkDigest(outer, mean, global,
                        has_momentum ? absl::MakeConstSpan(momentum) : absl::Span<const float>()),
        expected);
    // In place, as a member installs the commit: the same bytes.
    std::vector<float> in_place = global;
    std::vector<float> in_place_momentum = has_momentum ? momentum : std::vector<float>();
    OuterStepInPlace(outer, mean, absl::MakeSpan(in_place), absl::MakeSpan(in_place_momentum));
    EXPECT_EQ(ChunkDigest(in_place, in_place_momentum), expected);
  }
}

TEST(ModelDigestTest, OneValueChangesTheDigest) {
  const std::vector<float> mean = Values(1000, 0.01f);
  std::vector<float> global = Values(1000, 1.0f);
  const DigestPair before = *NextChunkDigest(OuterOptimizer{}, mean, global, {});
  global[999] = std::nextafter(global[999], 2.0f);
  const DigestPair after = *NextChunkDigest(OuterOptimizer{}, mean, global, {});
  EXPECT_NE(after.with_momentum, before.with_momentum);
  EXPECT_NE(after.values, before.values);
}

// A member that cannot make the step says so rather than deliver a copy with infinities.
TEST(ModelDigestTest, AStepThatOverflowsHasNoDigest) {
  std::vector<float> mean = Values(1000, 0.01f);
  mean[500] = 3e38f;
  const std::vector<float> global = Values(1000, 3e38f);
  EXPECT_FALSE(NextChunkDigest(OuterOptimizer{}, mean, global, {}).has_value());
}

DigestPair Pair(uint64_t d) { return {d, d + 1000}; }

TEST(RangeDigestsTest, OrderFreeAndEveryChunkCounts) {
  RangeDigests a(4, 0);
  RangeDigests b(4, 0);
  for (int c = 0; c < 4; ++c) a.Set(c, Pair(100 + c));
  for (int c = 3; c >= 0; --c) b.Set(c, Pair(100 + c));
  EXPECT_EQ(a.Of(0, 4), b.Of(0, 4));
  EXPECT_EQ(a.Of(1, 3), b.Of(1, 3));
  // Swapping two chunks' digests is a change (the index is in each term).
  b.Set(1, Pair(102));
  b.Set(2, Pair(101));
  EXPECT_NE(a.Of(0, 4), b.Of(0, 4));
  // A change outside the range does not touch it.
  b.Set(1, Pair(101));
  b.Set(2, Pair(102));
  b.Set(3, Pair(7));
  EXPECT_EQ(a.Of(0, 3), b.Of(0, 3));
  EXPECT_NE(a.Of(0, 4), b.Of(0, 4));
  EXPECT_EQ(RangeDigests(2, 0).Of(0, 0), DigestPair());
  // Ranges combine into their union.
  EXPECT_EQ(RangeDigests::Combine(a.Of(0, 1), a.Of(1, 4)), a.Of(0, 4));
}

// A fragment's chunks counted from its first chunk in the model: the fragments' digests
// combine into the whole model's, however the model is cut.
TEST(RangeDigestsTest, FragmentsCombineIntoTheModelsDigest) {
  const ChunkLayout layout{1000, 100};  // 10 chunks
  const std::vector<float> values = Values(1000, 1.0f);
  const std::vector<float> momentum = Values(1000, 0.3f);
  const DigestPair whole = ModelDigest(values, momentum, layout);
  for (const std::vector<int>& cuts :
       std::vector<std::vector<int>>{{0, 10}, {0, 3, 10}, {0, 1, 5, 9, 10}}) {
    DigestPair combined;
    for (size_t f = 0; f + 1 < cuts.size(); ++f) {
      RangeDigests fragment(cuts[f + 1] - cuts[f], cuts[f]);
      for (int c = 0; c < cuts[f + 1] - cuts[f]; ++c) {
        const int64_t begin = layout.begin(cuts[f] + c);
        const int64_t size = layout.size(cuts[f] + c);
        fragment.Set(c, ChunkDigest(absl::MakeConstSpan(values).subspan(begin, size),
                                    absl::MakeConstSpan(momentum).subspan(begin, size)));
      }
      combined = RangeDigests::Combine(combined, fragment.Of(0, cuts[f + 1] - cuts[f]));
    }
    EXPECT_EQ(combined, whole) << cuts.size();
  }
  // Counted from 0 instead, a fragment's digest is another.
  RangeDigests wrong(7, 0);
  RangeDigests right(7, 3);
  for (int c = 0; c < 7; ++c) {
    const DigestPair d =
        ChunkDigest(absl::MakeConstSpan(values).subspan(layout.begin(3 + c), 100), {});
    wrong.Set(c, d);
    right.Set(c, d);
  }
  EXPECT_NE(wrong.Of(0, 7), right.Of(0, 7));
}

TEST(ModelDigestTest, AModelsDigestIsItsChunksAndCountsTheMomentum) {
  const ChunkLayout layout{1000, 256};  // 4 chunks, the last short
  std::vector<float> values = Values(1000, 1.0f);
  std::vector<float> momentum = Values(1000, 0.5f);
  RangeDigests chunks(layout.num_chunks(), 0);
  for (int c = 0; c < layout.num_chunks(); ++c) {
    chunks.Set(c,
               ChunkDigest(absl::MakeConstSpan(values).subspan(layout.begin(c), layout.size(c)),
                           absl::MakeConstSpan(momentum).subspan(layout.begin(c), layout.size(c))));
  }
  const DigestPair digest = ModelDigest(values, momentum, layout);
  EXPECT_EQ(digest, chunks.Of(0, layout.num_chunks()));
  // The values' digest is the model's without its momentum.
  const DigestPair plain = ModelDigest(values, {}, layout);
  EXPECT_NE(plain.with_momentum, digest.with_momentum);
  EXPECT_EQ(plain.values, digest.values);
  EXPECT_EQ(plain.with_momentum, plain.values);
  momentum[999] = std::nextafter(momentum[999], 1.0f);
  const DigestPair changed = ModelDigest(values, momentum, layout);
  EXPECT_NE(changed.with_momentum, digest.with_momentum);
  EXPECT_EQ(changed.values, digest.values);  // the values did not change
  values[0] = std::nextafter(values[0], 2.0f);
  EXPECT_NE(ModelDigest(values, momentum, layout).values, digest.values);
}

}  // namespace
}  // namespace localsgd
