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

}  // namespace
}  // namespace localsgd
