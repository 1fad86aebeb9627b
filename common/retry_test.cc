#include "common/retry.h"

#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

// A clock that moves only when slept on.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1000);
  RetryClock clock() {
    return RetryClock{[this] { return now; }, [this](absl::Duration d) { now += d; }};
  }
};

const absl::Status kDown = absl::UnavailableError("down");

// Answers with `outcomes` in turn, then OK; counts the calls.
struct Script {
  std::vector<absl::Status> outcomes;
  int calls = 0;
  absl::Status operator()() {
    const size_t i = static_cast<size_t>(calls++);
    return i < outcomes.size() ? outcomes[i] : absl::OkStatus();
  }
};

TEST(RetryTest, TransientFailuresAreRetriedWithADoublingPauseUpToItsCap) {
  FakeClock fake;
  RetryPolicy policy;
  policy.backoff = absl::Milliseconds(100);
  policy.max_backoff = absl::Milliseconds(350);
  Script script{{kDown, kDown, kDown, kDown}};
  std::vector<absl::Duration> pauses;
  const absl::Status status = Retry(
      policy, [&] { return script(); },
      [&](const absl::Status& why, int retry, absl::Duration pause) {
        EXPECT_TRUE(absl::IsUnavailable(why));
        EXPECT_EQ(retry, static_cast<int>(pauses.size()) + 1);
        pauses.push_back(pause);
      },
      fake.clock());
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(script.calls, 5);
  EXPECT_EQ(pauses,
            (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200),
                                         absl::Milliseconds(350), absl::Milliseconds(350)}));
  EXPECT_EQ(fake.now - absl::FromUnixSeconds(1000), absl::Seconds(1));
}

TEST(RetryTest, AFailureThePolicyDoesNotPassEndsTheWaitAtOnce) {
  FakeClock fake;
  Script script{{kDown, absl::InvalidArgumentError("bad")}};
  const absl::Status status = Retry(
      RetryPolicy(), [&] { return script(); }, fake.clock());
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_EQ(script.calls, 2);
}

TEST(RetryTest, NoRetryWhosePauseWouldEndPastTheBudget) {
  FakeClock fake;
  RetryPolicy policy;
  policy.budget = absl::Milliseconds(2500);  // pauses of 1 s: two fit
  Script script{std::vector<absl::Status>(10, kDown)};
  EXPECT_TRUE(absl::IsUnavailable(Retry(
      policy, [&] { return script(); }, fake.clock())));
  EXPECT_EQ(script.calls, 3);
  EXPECT_EQ(fake.now - absl::FromUnixSeconds(1000), absl::Seconds(2));
}

TEST(RetryTest, AtMostMaxRetriesAfterTheFirstAttempt) {
  FakeClock fake;
  RetryPolicy policy;
  policy.max_retries = 3;
  Script script{std::vector<absl::Status>(10, kDown)};
  EXPECT_TRUE(absl::IsUnavailable(Retry(
      policy, [&] { return script(); }, fake.clock())));
  EXPECT_EQ(script.calls, 4);
}

TEST(RetryTest, AStopDuringAPauseEndsTheWaitWithTheLastOutcome) {
  FakeClock fake;
  RetryPolicy policy;
  policy.backoff = policy.max_backoff = absl::Seconds(10);
  const absl::Time stop_at = fake.now + absl::Milliseconds(250);
  policy.stop = [&] { return fake.now >= stop_at; };
  Script script{std::vector<absl::Status>(10, kDown)};
  EXPECT_TRUE(absl::IsUnavailable(Retry(
      policy, [&] { return script(); }, fake.clock())));
  EXPECT_EQ(script.calls, 1);
  EXPECT_EQ(fake.now - absl::FromUnixSeconds(1000), absl::Milliseconds(300));  // 100 ms slices
}

TEST(RetryTest, AStatusOrIsRetriedAndItsValueReturned) {
  FakeClock fake;
  int calls = 0;
  const absl::StatusOr<int> result = Retry(
      RetryPolicy(),
      [&]() -> absl::StatusOr<int> {
        if (++calls < 3) return kDown;
        return 7;
      },
      fake.clock());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(*result, 7);
}

TEST(RetryTest, WhatPassesForEachKindOfWait) {
  const absl::Status rejoining = absl::NotFoundError("member_id: \"node-0/0\" is not a member");
  const absl::Status replaced =
      absl::PermissionDeniedError("member_credential: not the one the latest Join gave");
  const absl::Status no_run = absl::NotFoundError("run_id: no run has started");
  const absl::Status opened_without = absl::FailedPreconditionError("round 3 opened without");
  const absl::Status aborted = absl::AbortedError("round 3 aborted");
  const absl::Status denied = absl::PermissionDeniedError("token: wrong");

  EXPECT_TRUE(IsUnreachable(kDown));
  EXPECT_TRUE(IsUnreachable(absl::DeadlineExceededError("")));
  EXPECT_FALSE(IsUnreachable(aborted));

  EXPECT_TRUE(IsTransientCall(kDown));
  EXPECT_TRUE(IsTransientCall(absl::CancelledError("reset")));
  EXPECT_TRUE(IsTransientCall(absl::InternalError("reset")));
  EXPECT_TRUE(IsTransientCall(rejoining));
  EXPECT_TRUE(IsTransientCall(replaced));
  EXPECT_FALSE(IsTransientCall(no_run));
  EXPECT_FALSE(IsTransientCall(denied));
  EXPECT_FALSE(IsTransientCall(opened_without));

  EXPECT_TRUE(IsPassingRoundFailure(opened_without));
  EXPECT_TRUE(IsPassingRoundFailure(aborted));
  EXPECT_TRUE(IsPassingRoundFailure(rejoining));
  EXPECT_TRUE(IsPassingRoundFailure(replaced));
  EXPECT_FALSE(IsPassingRoundFailure(denied));
  EXPECT_FALSE(IsPassingRoundFailure(absl::InvalidArgumentError("fragment")));
  EXPECT_FALSE(IsPassingRoundFailure(absl::OutOfRangeError("the run ended")));
}

}  // namespace
}  // namespace localsgd
