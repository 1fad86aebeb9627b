#include "coordinator/suspensions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

Suspensions::Options Opts() { return Suspensions::Options{3, absl::Seconds(30), absl::Minutes(2)}; }

std::vector<RoundFault> Missed(const std::string& id) {
  return {RoundFault{id, "did not arrive within the round deadline", ""}};
}

TEST(SuspensionsTest, ThreeFailedRoundsInARowSuspendAndACommitInBetweenForgives) {
  Suspensions s(Opts());
  EXPECT_THAT(s.RoundEnded(kStart, {"a"}, Missed("b")), IsEmpty());
  EXPECT_THAT(s.RoundEnded(kStart, {"a"}, Missed("b")), IsEmpty());
  s.RoundEnded(kStart, {"a", "b"}, {});  // b was committed with: its record is cleared
  EXPECT_THAT(s.RoundEnded(kStart, {"a"}, Missed("b")), IsEmpty());
  EXPECT_THAT(s.RoundEnded(kStart, {"a"}, Missed("b")), IsEmpty());
  EXPECT_FALSE(s.Suspended("b", kStart));
  auto verdicts = s.RoundEnded(kStart, {"a"}, Missed("b"));
  ASSERT_THAT(verdicts, SizeIs(1));
  EXPECT_EQ(verdicts[0].member_id, "b");
  EXPECT_EQ(verdicts[0].length, absl::Seconds(30));
  EXPECT_EQ(verdicts[0].failed_rounds, 3);
  std::string why;
  EXPECT_TRUE(s.Suspended("b", kStart + absl::Seconds(29), &why));
  EXPECT_THAT(why, HasSubstr("did not arrive"));
  EXPECT_FALSE(s.Suspended("a", kStart));
  EXPECT_FALSE(s.Suspended("b", kStart + absl::Seconds(30)));
}

// Issue 50, finding 6: a member silent in a round (it alone did not arrive: the round waited
// its whole deadline for it) is suspended after that one round.
TEST(SuspensionsTest, OneSilentRoundSuspends) {
  Suspensions s(Opts());
  std::vector<RoundFault> silent = Missed("b");
  silent[0].silent = true;
  auto verdicts = s.RoundEnded(kStart, {"a"}, silent);
  ASSERT_THAT(verdicts, SizeIs(1));
  EXPECT_EQ(verdicts[0].member_id, "b");
  EXPECT_EQ(verdicts[0].failed_rounds, 1);
  EXPECT_TRUE(s.Suspended("b", kStart));
}

// Aborted rounds (no one committed) count against the member blamed, not its fellows.
TEST(SuspensionsTest, AbortedRoundsStrikeOnlyTheMemberBlamed) {
  Suspensions s(Opts());
  for (int i = 0; i < 2; ++i) s.RoundEnded(kStart, {}, Missed("b"));
  auto verdicts = s.RoundEnded(kStart, {}, Missed("b"));
  EXPECT_THAT(verdicts, ElementsAre(Field(&Suspensions::Verdict::member_id, "b")));
  EXPECT_FALSE(s.Suspended("a", kStart));
}

TEST(SuspensionsTest, AReadmittedMemberIsOnProbationAndEachSuspensionDoublesUpToTheLongest) {
  Suspensions s(Opts());
  absl::Time now = kStart;
  for (int i = 0; i < 3; ++i) s.RoundEnded(now, {}, Missed("b"));
  EXPECT_THAT(s.TakeReadmitted(now + absl::Seconds(29)), IsEmpty());
  now += absl::Seconds(30);
  EXPECT_THAT(s.TakeReadmitted(now), ElementsAre("b"));
  EXPECT_THAT(s.TakeReadmitted(now), IsEmpty());  // once
  // On probation: one more failure suspends it again, for twice as long.
  auto again = s.RoundEnded(now, {}, Missed("b"));
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0].length, absl::Seconds(60));
  // Failures while suspended change nothing.
  EXPECT_THAT(s.RoundEnded(now + absl::Seconds(1), {}, Missed("b")), IsEmpty());
  now += absl::Seconds(60);
  EXPECT_EQ(s.RoundEnded(now, {}, Missed("b"))[0].length, absl::Minutes(2));
  now += absl::Minutes(2);
  EXPECT_EQ(s.RoundEnded(now, {}, Missed("b"))[0].length, absl::Minutes(2));  // the longest
  // Committed with after its suspension: a clean record.
  now += absl::Minutes(2);
  s.RoundEnded(now, {"b"}, {});
  EXPECT_THAT(s.RoundEnded(now, {}, Missed("b")), IsEmpty());
}

TEST(SuspensionsTest, AnOwnerReportedUnreachableIsStruckAndTheClaimantIsNot) {
  Suspensions s(Opts());
  std::vector<Suspensions::Verdict> verdicts;
  for (const char* claimant : {"a", "c", "a"}) {
    verdicts = s.RoundEnded(kStart, {}, {RoundFault{"b", "connection refused", claimant}});
  }
  ASSERT_THAT(verdicts, SizeIs(1));
  EXPECT_EQ(verdicts[0].member_id, "b");
  EXPECT_THAT(verdicts[0].reason, HasSubstr("could not reach it: connection refused"));
  EXPECT_FALSE(s.Suspended("a", kStart));
  EXPECT_FALSE(s.Suspended("c", kStart));
}

// A member that cannot reach anyone (or claims so) names owner after owner: it is the one
// struck, and the owners it named are left alone.
TEST(SuspensionsTest, AClaimantNamingDifferentOwnersIsStruckInsteadOfThem) {
  Suspensions s(Opts());
  std::vector<Suspensions::Verdict> verdicts;
  for (const char* owner : {"b", "c", "d", "b"}) {
    verdicts = s.RoundEnded(kStart, {}, {RoundFault{owner, "timed out", "a"}});
  }
  ASSERT_THAT(verdicts, SizeIs(1));
  EXPECT_EQ(verdicts[0].member_id, "a");
  EXPECT_THAT(verdicts[0].reason, HasSubstr("reported 3 different owners unreachable"));
  for (const char* owner : {"b", "c", "d"}) EXPECT_FALSE(s.Suspended(owner, kStart)) << owner;
}

TEST(SuspensionsTest, NoStrikesNeverSuspends) {
  Suspensions s(Suspensions::Options{0, absl::Seconds(30), absl::Minutes(2)});
  for (int i = 0; i < 10; ++i) EXPECT_THAT(s.RoundEnded(kStart, {}, Missed("b")), IsEmpty());
  EXPECT_FALSE(s.Suspended("b", kStart));
}

}  // namespace
}  // namespace localsgd
