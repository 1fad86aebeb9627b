#include "common/round_schedule.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

const RoundSchedule k8 = RoundSchedule::Make(8).value();
const RoundSchedule k8p2 = RoundSchedule::Make(8, 0, 2).value();
const RoundSchedule k8p4 = RoundSchedule::Make(8, 0, 4).value();

// K = 8, P = 4: a round every 2 steps; fragment f at the steps s with s - 2 f a multiple of 8.
TEST(RoundScheduleTest, FragmentFSyncsAtTheStepsFKOverPApartFromMultiplesOfK) {
  EXPECT_FALSE(k8p4.RoundAt(0));
  EXPECT_FALSE(k8p4.RoundAt(3));
  EXPECT_TRUE(k8p4.RoundAt(2));
  EXPECT_EQ(k8p4.FragmentAt(2), 1);
  EXPECT_EQ(k8p4.FragmentAt(4), 2);
  EXPECT_EQ(k8p4.FragmentAt(6), 3);
  EXPECT_EQ(k8p4.FragmentAt(8), 0);
  EXPECT_EQ(k8p4.FragmentAt(10), 1);
  // Without fragments: every K steps, the whole model.
  EXPECT_TRUE(k8.RoundAt(16));
  EXPECT_FALSE(k8.RoundAt(12));
  EXPECT_EQ(k8.FragmentAt(16), 0);
}

// A member whose round at step 10 (fragment 1) meets an open round of fragment f moves by the
// steps that make its round at the moved step carry f (issue 50, finding 3).
TEST(RoundScheduleTest, StepsToPhaseMoveARoundIntoTheOpenRoundsFragment) {
  EXPECT_EQ(k8p4.StepsToPhase(10, 1), 0);
  EXPECT_EQ(k8p4.StepsToPhase(10, 2), 2);
  EXPECT_EQ(k8p4.StepsToPhase(10, 0), 6);
  for (int f = 0; f < 4; ++f) {
    EXPECT_EQ(k8p4.FragmentAt(10 + k8p4.StepsToPhase(10, f)), f);
  }
  EXPECT_EQ(k8p2.StepsToPhase(12, 0), 4);
  EXPECT_EQ(k8p4.StepsToPhase(10, 4), 0);  // no such fragment
  EXPECT_EQ(k8p4.StepsToPhase(10, -1), 0);
}

TEST(RoundScheduleTest, EachFieldOutOfItsRangeIsRefusedByName) {
  using ::testing::HasSubstr;
  const auto refusal = [](int k, int tau, int p) {
    return std::string(RoundSchedule::Make(k, tau, p).status().message());
  };
  EXPECT_THAT(refusal(0, 0, 1), HasSubstr("spec.local_sgd_steps: must be in [1, 1000000], got 0"));
  EXPECT_THAT(refusal(8, 8, 1),
              HasSubstr("spec.overlap_steps: 8 is not in [0, local_sgd_steps = 8)"));
  EXPECT_THAT(refusal(8, -1, 1), HasSubstr("spec.overlap_steps"));
  EXPECT_THAT(refusal(8, 0, 0), HasSubstr("spec.fragments: must be in [1, 64], got 0"));
  EXPECT_THAT(refusal(8, 0, 3), HasSubstr("spec.fragments: 3 does not divide local_sgd_steps = 8"));
  EXPECT_THAT(refusal(8, 2, 4),
              HasSubstr("spec.overlap_steps: 2 is not below local_sgd_steps / fragments = 2"));
  const RoundSchedule ok = RoundSchedule::Make(8, 1, 4).value();
  EXPECT_EQ(ok.local_sgd_steps(), 8);
  EXPECT_EQ(ok.overlap_steps(), 1);
  EXPECT_EQ(ok.fragments(), 4);
}

}  // namespace
}  // namespace localsgd
