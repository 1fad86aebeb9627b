#include "coordinator/round_backoff.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

RoundBackoff::Options Opts() { return {3, absl::Seconds(1), absl::Seconds(8)}; }

TEST(RoundBackoffTest, AfterTheFreeAbortsRoundsWaitDoublingUpToTheLongest) {
  RoundBackoff backoff(Opts());
  absl::Time now = kStart;
  EXPECT_EQ(backoff.Aborted(now, "a,b", "quorum lost"), std::nullopt);
  EXPECT_EQ(backoff.Aborted(now, "a,b", "quorum lost"), std::nullopt);
  EXPECT_TRUE(backoff.MayOpen(now, "a,b"));  // two aborts are free
  // The third starts the back-off, and says so once.
  EXPECT_THAT(backoff.Aborted(now, "a,b", "quorum lost: 1 of min_workers 2 left"),
              ::testing::Optional(HasSubstr("rounds back off for 1s")));
  std::string why;
  EXPECT_FALSE(backoff.MayOpen(now + absl::Milliseconds(999), "a,b", &why));
  EXPECT_THAT(why, HasSubstr("after 3 aborted in a row"));
  EXPECT_THAT(why, HasSubstr("(last: quorum lost: 1 of min_workers 2 left)"));
  EXPECT_TRUE(backoff.MayOpen(now + absl::Seconds(1), "a,b"));
  // 2 s, 4 s, 8 s, then no longer than 8 s.
  for (absl::Duration wait :
       {absl::Seconds(2), absl::Seconds(4), absl::Seconds(8), absl::Seconds(8)}) {
    now += absl::Seconds(100);
    backoff.Aborted(now, "a,b", "quorum lost");
    EXPECT_FALSE(backoff.MayOpen(now + wait - absl::Milliseconds(1), "a,b"));
    EXPECT_TRUE(backoff.MayOpen(now + wait, "a,b"));
  }
}

TEST(RoundBackoffTest, ACommitOrOtherMembersEndTheBackoff) {
  RoundBackoff backoff(Opts());
  for (int i = 0; i < 5; ++i) backoff.Aborted(kStart, "a", "quorum lost");
  EXPECT_FALSE(backoff.MayOpen(kStart, "a"));
  EXPECT_TRUE(backoff.MayOpen(kStart, "a,b"));  // another member joined: try at once
  backoff.Committed();
  EXPECT_EQ(backoff.aborts(), 0);
  backoff.Aborted(kStart, "a", "deadline");
  EXPECT_TRUE(backoff.MayOpen(kStart, "a"));  // free again after the commit
}

TEST(RoundBackoffTest, AbortsWithOtherMembersCountFromTheFirst) {
  RoundBackoff backoff(Opts());
  backoff.Aborted(kStart, "a", "x");
  backoff.Aborted(kStart, "a", "x");
  backoff.Aborted(kStart, "a,b", "x");  // the members changed: the first abort with them
  EXPECT_EQ(backoff.aborts(), 1);
  EXPECT_TRUE(backoff.MayOpen(kStart, "a,b"));
}

}  // namespace
}  // namespace localsgd
