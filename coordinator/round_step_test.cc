#include "coordinator/round_step.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(RoundStepTest, HonestMembersClaimTheSameStep) {
  EXPECT_EQ(RoundStep({16, 16, 16, 16}, 8), 16);
  EXPECT_EQ(RoundStep({16}, 8), 16);
}

TEST(RoundStepTest, OneMemberOfThreeOrMoreCannotMoveIt) {
  const int64_t huge = int64_t{1} << 60;
  EXPECT_EQ(RoundStep({16, huge, 16}, 8), 16);  // would end a total_steps run at once
  EXPECT_EQ(RoundStep({16, 16, 0}, 8), 16);     // would hold the run back
  EXPECT_EQ(RoundStep({16, 16, huge, 16, 0}, 8), 16);
}

TEST(RoundStepTest, OneOrTwoMembersGiveTheLargestClaimAndNeverGoBack) {
  EXPECT_EQ(RoundStep({8, 16}, 0), 16);
  EXPECT_EQ(RoundStep({16, 8}, 0), 16);
  EXPECT_EQ(RoundStep({4, 8}, 100), 100);
  EXPECT_EQ(RoundStep({}, 100), 100);
}

// Issue 50, finding 9: two identities of one token holder among four members are half the
// claims, and the upper median is theirs: it ended a total_steps run at once. Under the run's
// bound on unsynchronised training no honest member is further ahead than the bound and two
// boundaries, and no round moves the step further.
TEST(RoundStepTest, NoRoundMovesTheStepPastWhatAnHonestMemberCanBeAhead) {
  const int64_t huge = int64_t{1} << 60;
  const int64_t ceiling = StepCeiling(/*floor=*/80, /*max_unsynced_steps=*/32, /*K=*/8);
  EXPECT_EQ(ceiling, 80 + 32 + 16);
  EXPECT_EQ(RoundStep({88, 88, huge, huge}, 80, ceiling), 128);
  EXPECT_EQ(RoundStep({88, 88, 88, huge}, 80, ceiling), 88);   // honest claims stand
  EXPECT_EQ(RoundStep({120, 128}, 80, ceiling), 128);          // a node that trained on alone
  EXPECT_EQ(StepCeiling(80, /*max_unsynced_steps=*/0, 8), 0);  // no bound: no ceiling
  EXPECT_EQ(RoundStep({88, huge}, 80, 0), huge);
}

}  // namespace
}  // namespace localsgd
