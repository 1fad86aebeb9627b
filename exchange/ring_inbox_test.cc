#include "exchange/ring_inbox.h"

#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

v1::ReduceHeader Header(int64_t round, uint64_t attempt, const std::string& from = "m0") {
  v1::ReduceHeader header;
  header.set_run_id("run");
  header.set_round(round);
  header.set_attempt(attempt);
  header.set_member_id(from);
  return header;
}

ReceivedChunk Sum(int chunk, size_t bytes = 0) {
  v1::Chunk sum;
  sum.set_index(chunk);
  sum.set_data(std::string(bytes, '\0'));
  return ReceivedChunk::Of(v1::PassRequest::kSumFieldNumber, std::move(sum));
}

// Takes the followed stream's next message and expects the sum of chunk `chunk`.
void ExpectSum(RingInbox& inbox, int chunk) {
  absl::StatusOr<std::optional<ReceivedChunk>> next = inbox.Next();
  ASSERT_THAT(next.status(), IsOk());
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->field(), v1::PassRequest::kSumFieldNumber);
  EXPECT_EQ((*next)->index(), chunk);
}

// Expects the followed stream to have ended OK with every message taken.
void ExpectEnd(RingInbox& inbox) {
  absl::StatusOr<std::optional<ReceivedChunk>> end = inbox.Next();
  ASSERT_THAT(end.status(), IsOk());
  EXPECT_FALSE(end->has_value());
}

TEST(RingInboxTest, AStreamThatCameBeforeTheLayoutWaitsAndIsTakenInOrder) {
  RingInbox inbox;
  absl::StatusOr<int64_t> id = inbox.Open(Header(3, 1));
  ASSERT_THAT(id.status(), IsOk());
  ASSERT_THAT(inbox.Add(*id, Sum(5)), IsOk());
  ASSERT_THAT(inbox.Add(*id, Sum(6)), IsOk());
  inbox.Close(*id, absl::OkStatus());
  inbox.Follow("run", 3, 1, "m0");
  ExpectSum(inbox, 5);
  ExpectSum(inbox, 6);
  ExpectEnd(inbox);
}

TEST(RingInboxTest, NextWaitsForTheFollowedStream) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0");
  std::thread sender([&inbox] {
    absl::StatusOr<int64_t> id = inbox.Open(Header(3, 1));
    ASSERT_THAT(id.status(), IsOk());
    ASSERT_THAT(inbox.Add(*id, Sum(1)), IsOk());
  });
  absl::StatusOr<std::optional<ReceivedChunk>> next = inbox.Next();
  sender.join();
  ASSERT_THAT(next.status(), IsOk());
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->index(), 1);
}

TEST(RingInboxTest, OlderAttemptsAndSecondStreamsAreRefused) {
  RingInbox inbox;
  absl::StatusOr<int64_t> old_id = inbox.Open(Header(3, 1));
  ASSERT_THAT(old_id.status(), IsOk());
  inbox.Follow("run", 3, 2, "m0");
  EXPECT_THAT(inbox.Add(*old_id, Sum(0)), StatusIs(absl::StatusCode::kFailedPrecondition, "newer"));
  EXPECT_THAT(inbox.Open(Header(3, 1)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "round 3 attempt 1 is over"));
  EXPECT_THAT(inbox.Open(Header(2, 9)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "is over"));
  ASSERT_THAT(inbox.Open(Header(3, 2)).status(), IsOk());
  EXPECT_THAT(inbox.Open(Header(3, 2)).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "second stream"));
  // A newer attempt's stream may come before this member follows it, and is kept.
  absl::StatusOr<int64_t> newer = inbox.Open(Header(4, 1));
  ASSERT_THAT(newer.status(), IsOk());
  inbox.Follow("run", 4, 1, "m0");
  EXPECT_THAT(inbox.Add(*newer, Sum(0)), IsOk());
}

TEST(RingInboxTest, ABrokenStreamIsAnError) {
  RingInbox inbox;
  absl::StatusOr<int64_t> id = inbox.Open(Header(3, 1));
  ASSERT_THAT(id.status(), IsOk());
  inbox.Close(*id, absl::UnavailableError("peer went away"));
  inbox.Follow("run", 3, 1, "m0");
  EXPECT_THAT(inbox.Next().status(), StatusIs(absl::StatusCode::kUnavailable, "went away"));
}

// Only the followed member's stream of the followed attempt is read (streams are given to the
// inbox once their tags were checked, so another sender's is one the coordinator scheduled in
// another layout); the others of that attempt are forgotten.
TEST(RingInboxTest, OnlyThePredecessorsStreamIsRead) {
  RingInbox inbox;
  absl::StatusOr<int64_t> other = inbox.Open(Header(4, 1, "m2"));
  absl::StatusOr<int64_t> real = inbox.Open(Header(4, 1, "m0"));
  ASSERT_THAT(other.status(), IsOk());
  ASSERT_THAT(real.status(), IsOk());
  ASSERT_THAT(inbox.Add(*other, Sum(9)), IsOk());
  ASSERT_THAT(inbox.Add(*real, Sum(1)), IsOk());
  inbox.Follow("run", 4, 1, "m0");
  EXPECT_THAT(inbox.Add(*other, Sum(9)), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  absl::StatusOr<std::optional<ReceivedChunk>> first = inbox.Next();
  ASSERT_THAT(first.status(), IsOk());
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->index(), 1);
}

TEST(RingInboxTest, StopEndsTheWaitAndDropsWhatStillComes) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0");
  std::thread stopper([&inbox] { inbox.Stop(); });
  EXPECT_THAT(inbox.Next().status(), StatusIs(absl::StatusCode::kCancelled, "ended"));
  stopper.join();
  absl::StatusOr<int64_t> id = inbox.Open(Header(3, 1));
  ASSERT_THAT(id.status(), IsOk());
  EXPECT_THAT(inbox.Add(*id, Sum(0)), IsOk());  // dropped
  inbox.Follow("run", 3, 2, "m0");
  EXPECT_THAT(inbox.Add(*id, Sum(0)), StatusIs(absl::StatusCode::kFailedPrecondition, "newer"));
}

// Issue 37, finding 1: a peer cannot make a leader hold more than a round's bytes per stream,
// nor streams for rounds far ahead, nor many streams.
// A round without a ring (all-to-all) is followed too, taking nothing: the ring round after
// it is then one ahead, not two (found with fragments, whose rounds alternate between ring and
// all-to-all layouts when fragments differ in size).
TEST(RingInboxTest, FollowingARoundWithoutARingLetsTheNextRingRoundIn) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0", 1000);
  inbox.Follow("run", 4, 1, "", 1000);
  absl::StatusOr<int64_t> id = inbox.Open(Header(5, 1));
  ASSERT_THAT(id.status(), IsOk());
  inbox.Follow("run", 5, 1, "m0", 1000);
  EXPECT_THAT(inbox.Add(*id, Sum(0)), IsOk());
}

// Issue 50, finding 2: a member readmitted after a suspension follows a round far ahead of the
// last one it followed, and its predecessor's stream for it may come first.
TEST(RingInboxTest, AStreamForARoundFarAheadWaitsForTheMemberToFollowIt) {
  RingInbox inbox;
  inbox.Follow("run", 30, 1, "m0", 1000);
  absl::StatusOr<int64_t> id = inbox.Open(Header(1758, 40));
  ASSERT_THAT(id.status(), IsOk());
  ASSERT_THAT(inbox.Add(*id, Sum(3)), IsOk());
  inbox.Follow("run", 1758, 40, "m0", 1000);
  absl::StatusOr<std::optional<ReceivedChunk>> next = inbox.Next();
  ASSERT_THAT(next.status(), IsOk());
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->index(), 3);
}

TEST(RingInboxTest, AStreamThatBringsMoreThanARoundIsCutAndForgotten) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0", 1000);
  absl::StatusOr<int64_t> early = inbox.Open(Header(4, 1));
  ASSERT_THAT(early.status(), IsOk());
  ASSERT_THAT(inbox.Add(*early, Sum(0, 600)), IsOk());
  EXPECT_THAT(inbox.Add(*early, Sum(1, 600)),
              StatusIs(absl::StatusCode::kResourceExhausted, "more than a round's 1000"));
  // Forgotten: what it brought is freed, and the stream's next message ends it.
  EXPECT_THAT(inbox.Add(*early, Sum(2, 1)), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  // The followed stream is cut the same way, and the leader sees why.
  absl::StatusOr<int64_t> followed = inbox.Open(Header(3, 1));
  ASSERT_THAT(followed.status(), IsOk());
  ASSERT_THAT(inbox.Add(*followed, Sum(0, 1000)), IsOk());
  absl::StatusOr<std::optional<ReceivedChunk>> first = inbox.Next();
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_THAT(inbox.Add(*followed, Sum(1, 1)), StatusIs(absl::StatusCode::kResourceExhausted, ""));
  EXPECT_THAT(inbox.Next().status(), StatusIs(absl::StatusCode::kResourceExhausted, ""));
}

// Issue 50, finding 1: streams that ended stay no longer than they can matter. When
// kMaxStreams are open, the oldest one not followed gives way to a newer stream; the followed
// one never does, and an older stream than all of them is refused.
TEST(RingInboxTest, TheOldestEarlyStreamGivesWayToANewerOne) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0");
  absl::StatusOr<int64_t> followed = inbox.Open(Header(3, 1));
  ASSERT_THAT(followed.status(), IsOk());
  absl::StatusOr<int64_t> early = inbox.Open(Header(3, 5));
  ASSERT_THAT(early.status(), IsOk());
  inbox.Close(*early, absl::OkStatus());
  ASSERT_THAT(inbox.Open(Header(4, 6)).status(), IsOk());
  ASSERT_THAT(inbox.Open(Header(4, 7)).status(), IsOk());  // (3, 5) gives way
  EXPECT_THAT(inbox.Add(*early, Sum(0)), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(inbox.Open(Header(3, 2)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "open here already"));
  ASSERT_THAT(inbox.Add(*followed, Sum(1)), IsOk());  // the followed one stays
  absl::StatusOr<std::optional<ReceivedChunk>> next = inbox.Next();
  ASSERT_THAT(next.status(), IsOk());
  EXPECT_TRUE(next->has_value());
  // Following a round forgets the streams of earlier attempts: room again.
  inbox.Follow("run", 4, 7, "m0");
  EXPECT_THAT(inbox.Open(Header(5, 1)).status(), IsOk());
  EXPECT_THAT(inbox.Open(Header(5, 2)).status(), IsOk());
}

v1::ReduceHeader Stripe(uint32_t stripe, uint32_t stripes, const std::string& from = "m0") {
  v1::ReduceHeader header = Header(3, 1, from);
  header.set_stripe(stripe);
  header.set_stripes(stripes);
  return header;
}

// A sender's stripes are one stream: their messages in the order they came, ending once every
// stripe has.
TEST(RingInboxTest, StripesAreTakenAsOneStreamThatEndsWithTheLast) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0");
  absl::StatusOr<int64_t> a = inbox.Open(Stripe(0, 2));
  absl::StatusOr<int64_t> b = inbox.Open(Stripe(1, 2));
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_THAT(inbox.Add(*b, Sum(7)), IsOk());
  ASSERT_THAT(inbox.Add(*a, Sum(2)), IsOk());
  inbox.Close(*a, absl::OkStatus());
  ExpectSum(inbox, 7);
  ExpectSum(inbox, 2);
  std::thread last([&inbox, b] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_THAT(inbox.Add(*b, Sum(9)), IsOk());
    inbox.Close(*b, absl::OkStatus());
  });
  ExpectSum(inbox, 9);  // waited for: stripe 1 was still open
  last.join();
  ExpectEnd(inbox);
}

TEST(RingInboxTest, AStripeThatBreaksBreaksTheStream) {
  RingInbox inbox;
  inbox.Follow("run", 3, 1, "m0");
  absl::StatusOr<int64_t> a = inbox.Open(Stripe(0, 2));
  absl::StatusOr<int64_t> b = inbox.Open(Stripe(1, 2));
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  inbox.Close(*a, absl::OkStatus());
  inbox.Close(*b, absl::UnavailableError("the member before this one left"));
  EXPECT_THAT(inbox.Next().status(), StatusIs(absl::StatusCode::kUnavailable, "left"));
}

TEST(RingInboxTest, StripesOutOfRangeTwiceOrUnlikeTheirStreamsAreRefused) {
  RingInbox inbox;
  EXPECT_THAT(inbox.Open(Stripe(2, 2)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "header.stripe: 2 of 2"));
  EXPECT_THAT(inbox.Open(Stripe(0, kMaxRingStreams + 1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "header.stripe"));
  ASSERT_THAT(inbox.Open(Stripe(0, 2)).status(), IsOk());
  EXPECT_THAT(inbox.Open(Stripe(0, 2)).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "(stripe 0)"));
  EXPECT_THAT(inbox.Open(Stripe(1, 3)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "header.stripes: 3"));
  EXPECT_THAT(inbox.Open(Stripe(1, 2)).status(), IsOk());
  // Another sender's stripes are a stream of their own.
  EXPECT_THAT(inbox.Open(Stripe(0, 2, "m5")).status(), IsOk());
}

}  // namespace
}  // namespace localsgd
