#include "exchange/ring_plan.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr int kSum = v1::PassRequest::kSumFieldNumber;
constexpr int kMean = v1::PassRequest::kMeanFieldNumber;

// A ring of `n` members, each owning `per` chunks of 2 values, with weights 1, 2, 3, ...
v1::RoundHeader Ring(int n, int per) {
  v1::RoundHeader header;
  header.set_exchange(v1::EXCHANGE_SHARDED);
  header.set_ring(true);
  header.set_chunk_values(2);
  header.set_num_chunks(n * per);
  for (int i = 0; i < n; ++i) {
    header.add_members(std::string(1, static_cast<char>('a' + i)));
    header.add_weights(i + 1);
    v1::ShardRange* range = header.add_shards();
    range->set_owner_id(header.members(i));
    range->set_begin_chunk(i * per);
    range->set_end_chunk((i + 1) * per);
  }
  return header;
}

TEST(RingPlanTest, NeighboursWeightsAndHowManyMessagesGoEachWay) {
  const v1::RoundHeader header = Ring(4, 3);
  const RingPlan plan(header, ChunkLayout{24, 2}, 0);
  EXPECT_EQ(plan.pred(), 3);
  EXPECT_EQ(plan.succ(), 1);
  EXPECT_FLOAT_EQ(plan.weight(), 1);
  EXPECT_FLOAT_EQ(plan.inverse_total(), 1.0f / 10);
  // In: sums of every range but pred's (9), means of every range but its own (9).
  EXPECT_EQ(plan.expected_in(), 9 + 9);
  // Out: sums of every range but its own (9), means of every range but succ's (9).
  EXPECT_EQ(plan.expected_out(), 9 + 9);
  EXPECT_EQ(plan.chain_begin(), 9);  // pred's range starts its chain here
  EXPECT_EQ(plan.chain_end(), 12);
  // In a ring of 2, one range's sums and the other's means each way.
  const RingPlan two(Ring(2, 3), ChunkLayout{12, 2}, 0);
  EXPECT_EQ(two.expected_in(), 3 + 3);
  EXPECT_EQ(two.expected_out(), 3 + 3);
}

// Sums travel in the round's codec: a bf16 sum is 2 bytes a value, and one of fp32's size is
// refused, naming the codec.
TEST(RingPlanTest, ASumIsTheChunksSizeInTheRoundsCodec) {
  v1::RoundHeader header = Ring(3, 2);
  header.set_codec(v1::CODEC_BF16);
  RingPlan plan(header, ChunkLayout{12, 2}, 0);  // pred (c) owns chunks 4 and 5
  EXPECT_THAT(plan.Accept(kSum, 2, 2 * sizeof(float)),
              StatusIs(absl::StatusCode::kInvalidArgument, "in bf16"));
  EXPECT_THAT(plan.Accept(kSum, 3, 2 * 2), IsOk());
}

TEST(RingPlanTest, TheChainLeadsTheSumsThatCameByAtMostKChainLead) {
  const RingPlan plan(Ring(3, 40), ChunkLayout{240, 2}, 1);
  const int begin = plan.chain_begin();
  EXPECT_TRUE(plan.MayStartChain(begin, 0));
  EXPECT_TRUE(plan.MayStartChain(begin + RingPlan::kChainLead - 1, 0));
  EXPECT_FALSE(plan.MayStartChain(begin + RingPlan::kChainLead, 0));
  // One more chunk of the chain for every N - 1 = 2 sums in.
  EXPECT_FALSE(plan.MayStartChain(begin + RingPlan::kChainLead, 1));
  EXPECT_TRUE(plan.MayStartChain(begin + RingPlan::kChainLead, 2));
  EXPECT_FALSE(plan.MayStartChain(plan.chain_end(), 1000));  // the chain is all started
}

TEST(RingPlanTest, SaysWhatToDoWithEachMessageFromPred) {
  // Member b (slot 1) of a, b, c, d: pred a owns [0, 2), b [2, 4), succ c [4, 6), d [6, 8).
  RingPlan plan(Ring(4, 2), ChunkLayout{16, 2}, 1);
  absl::StatusOr<RingPlan::Accepted> own = plan.Accept(kSum, 2, 8);
  ASSERT_THAT(own.status(), IsOk());
  EXPECT_EQ(own->action, RingPlan::Action::kCompleteAverage);
  EXPECT_EQ(own->range, 1);
  absl::StatusOr<RingPlan::Accepted> on = plan.Accept(kSum, 6, 8);
  ASSERT_THAT(on.status(), IsOk());
  EXPECT_EQ(on->action, RingPlan::Action::kAddAndPass);
  absl::StatusOr<RingPlan::Accepted> mean = plan.Accept(kMean, 7, 0);
  ASSERT_THAT(mean.status(), IsOk());
  EXPECT_EQ(mean->action, RingPlan::Action::kTakeMean);
  EXPECT_TRUE(mean->passes_on);
  absl::StatusOr<RingPlan::Accepted> succs = plan.Accept(kMean, 4, 0);
  ASSERT_THAT(succs.status(), IsOk());
  EXPECT_FALSE(succs->passes_on);                                       // succ owns it
  absl::StatusOr<RingPlan::Accepted> preds = plan.Accept(kMean, 0, 0);  // pred's own mean
  ASSERT_THAT(preds.status(), IsOk());
  EXPECT_TRUE(preds->passes_on);
}

TEST(RingPlanTest, RefusesWhatTheRingDoesNotSend) {
  RingPlan plan(Ring(4, 2), ChunkLayout{16, 2}, 1);
  EXPECT_THAT(plan.Accept(99, 2, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "neither sum nor mean"));
  EXPECT_THAT(plan.Accept(kSum, 8, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "chunk 8 is out of range"));
  EXPECT_THAT(plan.Accept(kMean, 2, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "a mean of chunk 2 came on the ring"));
  EXPECT_THAT(plan.Accept(kMean, 3, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "a mean of chunk 3 came on the ring"));
  EXPECT_THAT(plan.Accept(kSum, 1, 8).status(),  // pred's chain starts here
              StatusIs(absl::StatusCode::kInvalidArgument, "an unexpected sum of chunk 1"));
  EXPECT_THAT(plan.Accept(kSum, 5, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "4 bytes, expected 8"));
  EXPECT_THAT(plan.Accept(kSum, 5, 8).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "an unexpected sum of chunk 5"));
}

}  // namespace
}  // namespace localsgd
