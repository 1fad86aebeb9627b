#include "exchange/ring_inbox.h"

#include <string>
#include <thread>

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

ReceivedChunk Sum(int chunk) {
  v1::Chunk sum;
  sum.set_index(chunk);
  return ReceivedChunk::Of(v1::PassRequest::kSumFieldNumber, std::move(sum));
}

TEST(RingInboxTest, AStreamThatCameBeforeTheLayoutWaitsAndIsTakenInOrder) {
  RingInbox inbox;
  absl::StatusOr<int64_t> id = inbox.Open(Header(3, 1));
  ASSERT_THAT(id.status(), IsOk());
  ASSERT_THAT(inbox.Add(*id, Sum(5)), IsOk());
  ASSERT_THAT(inbox.Add(*id, Sum(6)), IsOk());
  inbox.Close(*id, absl::OkStatus());
  inbox.Follow("run", 3, 1, "m0");
  for (int chunk : {5, 6}) {
    absl::StatusOr<std::optional<ReceivedChunk>> next = inbox.Next();
    ASSERT_THAT(next.status(), IsOk());
    ASSERT_TRUE(next->has_value());
    EXPECT_EQ((*next)->field(), v1::PassRequest::kSumFieldNumber);
    EXPECT_EQ((*next)->index(), chunk);
  }
  absl::StatusOr<std::optional<ReceivedChunk>> end = inbox.Next();
  ASSERT_THAT(end.status(), IsOk());
  EXPECT_FALSE(end->has_value());
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

TEST(RingInboxTest, ABrokenStreamOrAnotherSenderIsAnError) {
  RingInbox inbox;
  absl::StatusOr<int64_t> id = inbox.Open(Header(3, 1));
  ASSERT_THAT(id.status(), IsOk());
  inbox.Close(*id, absl::UnavailableError("peer went away"));
  inbox.Follow("run", 3, 1, "m0");
  EXPECT_THAT(inbox.Next().status(), StatusIs(absl::StatusCode::kUnavailable, "went away"));

  ASSERT_THAT(inbox.Open(Header(5, 1, "intruder")).status(), IsOk());
  inbox.Follow("run", 5, 1, "m0");
  EXPECT_THAT(inbox.Next().status(), StatusIs(absl::StatusCode::kInvalidArgument, "intruder"));
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

}  // namespace
}  // namespace localsgd
