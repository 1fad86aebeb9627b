#include "coordinator/member_standing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Pair;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

RoundFault Silent(const std::string& id) {
  return RoundFault{id, "did not arrive within the round deadline", "", /*silent=*/true};
}

v1::RunSpec Strikes(int strikes) {
  v1::RunSpec spec;
  spec.set_suspend_after_failed_rounds(strikes);
  return spec;
}

TEST(MemberStandingTest, SilenceCountsOnlyForAMemberHeardInTheRunButNotSinceTheLastCommit) {
  MemberStanding standing(Strikes(3));
  // Never heard: its first round may find it starting up; one failed round is one strike.
  EXPECT_THAT(standing.RoundEnded(kStart, {"a"}, {Silent("b")}), IsEmpty());
  standing.Heard("b", "cred-1");
  // Heard since the last commit (a stale member told so comes back at its next boundary).
  EXPECT_THAT(standing.RoundEnded(kStart, {}, {Silent("b")}), IsEmpty());
  EXPECT_FALSE(standing.Suspended("b", kStart));
  standing.RoundEnded(kStart, {"a"}, {});  // a commit: nobody heard since
  EXPECT_THAT(standing.RoundEnded(kStart, {"a"}, {Silent("b")}),
              ElementsAre(Field(&Suspensions::Verdict::member_id, "b")));
  EXPECT_TRUE(standing.Suspended("b", kStart));
}

TEST(MemberStandingTest, ANewCredentialIsANewProcessWhoseFailuresAreForgotten) {
  MemberStanding standing(Strikes(1));
  standing.Heard("b", "cred-1");
  standing.RoundEnded(kStart, {"a"}, {});
  standing.RoundEnded(kStart, {"a"}, {Silent("b")});
  ASSERT_TRUE(standing.Suspended("b", kStart));
  standing.Heard("b", "cred-1");  // the same process: still suspended
  EXPECT_TRUE(standing.Suspended("b", kStart));
  standing.Heard("b", "cred-2");  // restarted
  EXPECT_FALSE(standing.Suspended("b", kStart));
}

TEST(MemberStandingTest, RefusalsBeforeARoundGoToThatRoundOnlyAndAreTakenOnce) {
  MemberStanding standing;
  standing.RefuseBefore("b", 5, "refused: codec");
  standing.RefuseBefore("c", 6, "refused: fragment");
  EXPECT_THAT(standing.TakeRefusals(5), ElementsAre(Pair("b", "refused: codec")));
  EXPECT_THAT(standing.TakeRefusals(6), IsEmpty());  // every refusal went with round 5's
}

TEST(MemberStandingTest, TheRunSpecSaysHowManyFailedRoundsSuspend) {
  MemberStanding never(Strikes(0));
  never.Heard("b", "c");
  for (int i = 0; i < 5; ++i) never.RoundEnded(kStart, {"a"}, {RoundFault{"b", "left", ""}});
  EXPECT_FALSE(never.Suspended("b", kStart));
  MemberStanding two(Strikes(2));
  two.RoundEnded(kStart, {"a"}, {RoundFault{"b", "left", ""}});
  EXPECT_FALSE(two.Suspended("b", kStart));
  two.RoundEnded(kStart, {"a"}, {RoundFault{"b", "left", ""}});
  EXPECT_TRUE(two.Suspended("b", kStart));
}

}  // namespace
}  // namespace localsgd
