#include "exchange/member_round.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr int64_t kValues = 10;  // chunks of 2: 5 chunks

// A sharded layout of 3 members over 5 chunks: a owns [0, 2), b [2, 4), c [4, 5).
v1::RoundHeader Header() {
  v1::RoundHeader header;
  header.set_round(7);
  header.set_exchange(v1::EXCHANGE_SHARDED);
  header.set_codec(v1::CODEC_FP32);
  header.set_chunk_values(2);
  header.set_num_chunks(5);
  const int bounds[] = {0, 2, 4, 5};
  for (int i = 0; i < 3; ++i) {
    const std::string id(1, static_cast<char>('a' + i));
    header.add_members(id);
    header.add_weights(1);
    v1::ShardRange* range = header.add_shards();
    range->set_owner_id(id);
    range->set_address(id + ":1");
    range->set_begin_chunk(bounds[i]);
    range->set_end_chunk(bounds[i + 1]);
  }
  return header;
}

std::unique_ptr<MemberRound> OpenAs(const std::string& id,
                                    const v1::RoundHeader& header = Header()) {
  absl::StatusOr<std::unique_ptr<MemberRound>> round = MemberRound::Open(header, id, kValues, true);
  EXPECT_THAT(round.status(), IsOk());
  return round.ok() ? std::move(*round) : nullptr;
}

TEST(MemberRoundTest, RefusesLayoutsThatDoNotFitTheVector) {
  EXPECT_THAT(MemberRound::Open(Header(), "a", 12, true).status(),
              StatusIs(absl::StatusCode::kInternal, "does not match the vector"));
  EXPECT_THAT(MemberRound::Open(Header(), "z", kValues, true).status(),
              StatusIs(absl::StatusCode::kInternal, "does not list this member"));
  v1::RoundHeader gap = Header();
  gap.mutable_shards(1)->set_begin_chunk(3);
  EXPECT_THAT(MemberRound::Open(gap, "a", kValues, true).status(),
              StatusIs(absl::StatusCode::kInternal, "do not tile the vector"));
  v1::RoundHeader star = Header();
  star.set_exchange(v1::EXCHANGE_STAR);
  EXPECT_THAT(MemberRound::Open(star, "a", kValues, true).status(),
              StatusIs(absl::StatusCode::kInternal, "star round"));
  EXPECT_THAT(MemberRound::Open(Header(), "a", kValues, false).status(),
              StatusIs(absl::StatusCode::kInternal, "without a data plane"));
}

TEST(MemberRoundTest, RefusesRingsThatAreNotOneRangePerMemberInSlotOrder) {
  v1::RoundHeader ring = Header();
  ring.set_ring(true);
  v1::RoundHeader out_of_order = ring;
  out_of_order.mutable_shards(0)->set_owner_id("b");
  out_of_order.mutable_shards(1)->set_owner_id("a");
  EXPECT_THAT(MemberRound::Open(out_of_order, "a", kValues, true).status(),
              StatusIs(absl::StatusCode::kInternal, "not the members' in slot order"));
  EXPECT_THAT(MemberRound::Open(ring, "a", kValues, false).status(),
              StatusIs(absl::StatusCode::kInternal, "without a data plane in a ring"));
  v1::RoundHeader two_ranges = ring;
  two_ranges.mutable_shards()->RemoveLast();
  two_ranges.mutable_shards(1)->set_end_chunk(ring.shards(2).end_chunk());
  EXPECT_THAT(MemberRound::Open(two_ranges, "a", kValues, true).status(),
              StatusIs(absl::StatusCode::kInternal, "one range"));
  ring.set_codec(v1::CODEC_BF16);  // sums and means travel in any codec
  std::unique_ptr<MemberRound> round = OpenAs("b", ring);
  ASSERT_NE(round, nullptr);
  EXPECT_TRUE(round->ring());
  EXPECT_FALSE(round->owns(1));  // a ring's sums end at the member: no ShardOwner
}

TEST(MemberRoundTest, KnowsItsSlotAndItsRanges) {
  std::unique_ptr<MemberRound> round = OpenAs("c");
  ASSERT_NE(round, nullptr);
  EXPECT_EQ(round->self(), 2);
  EXPECT_EQ(round->num_ranges(), 3);
  EXPECT_TRUE(round->owns(2));
  EXPECT_FALSE(round->owns(0));
  EXPECT_EQ(round->RangeOf(0), 0);
  EXPECT_EQ(round->RangeOf(3), 1);
  EXPECT_EQ(round->RangeOf(4), 2);
  EXPECT_EQ(round->RangeOf(5), -1);
  EXPECT_EQ(round->RangeOf(-1), -1);
}

TEST(MemberRoundTest, TakesEachChunkOnceFromItsOwnRangeAndIsCompleteAtTheLast) {
  std::unique_ptr<MemberRound> round = OpenAs("a");
  ASSERT_NE(round, nullptr);
  EXPECT_THAT(round->Expect(0, 2),
              StatusIs(absl::StatusCode::kInternal, "owner a sent an unexpected chunk 2"));
  EXPECT_THAT(round->Expect(0, 7), StatusIs(absl::StatusCode::kInternal, "unexpected chunk 7"));
  ASSERT_THAT(round->Expect(0, 0), IsOk());
  EXPECT_FALSE(round->Mark(0, 0));
  EXPECT_THAT(round->Expect(0, 0), StatusIs(absl::StatusCode::kInternal, "unexpected chunk 0"));
  EXPECT_THAT(round->RangeComplete(0),
              StatusIs(absl::StatusCode::kInternal, "owner a ended its stream before"));
  EXPECT_FALSE(round->Mark(0, 1));
  EXPECT_THAT(round->RangeComplete(0), IsOk());
  EXPECT_FALSE(round->Mark(1, 2));
  EXPECT_FALSE(round->Mark(1, 3));
  EXPECT_FALSE(round->complete());
  EXPECT_TRUE(round->Mark(2, 4));
  EXPECT_TRUE(round->complete());
}

TEST(MemberRoundTest, VerdictPutsTheCoordinatorFirstThenThisMembersOwnFailure) {
  std::unique_ptr<MemberRound> round = OpenAs("a");
  ASSERT_NE(round, nullptr);
  const absl::Status owner_failed = absl::UnavailableError("owner b at b:1: gone");
  // The coordinator's abort is the verdict, whatever this member saw.
  EXPECT_THAT(round->Verdict(false, absl::AbortedError("owner b died"), owner_failed),
              StatusIs(absl::StatusCode::kAborted, "owner b died"));
  // It cancelled the stream because an owner failed it: the round is over for it.
  EXPECT_THAT(round->Verdict(false, absl::CancelledError(""), owner_failed),
              StatusIs(absl::StatusCode::kAborted, "round 7 aborted for this member: owner b"));
  EXPECT_THAT(round->Verdict(false, absl::OkStatus(), absl::OkStatus()),
              StatusIs(absl::StatusCode::kInternal, "ended without a commit"));
  EXPECT_THAT(round->Verdict(false, absl::CancelledError("deadline"), absl::OkStatus()),
              StatusIs(absl::StatusCode::kCancelled, "deadline"));
  // Committed without this member's whole update (it was dropped): it adopts the model.
  EXPECT_THAT(round->Verdict(true, absl::OkStatus(), absl::OkStatus()),
              StatusIs(absl::StatusCode::kAborted, "without this member's whole update"));
  for (int c = 0; c < 5; ++c) round->Mark(round->RangeOf(c), c);
  EXPECT_THAT(round->Verdict(true, absl::OkStatus(), absl::OkStatus()), IsOk());
}

}  // namespace
}  // namespace localsgd
