#include "exchange/fragment_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::StatusIs;

TEST(FragmentPlanTest, FragmentsAreRunsOfWholeChunksBalancedByChunks) {
  // 10 chunks of 256 values, the last 56 short.
  const ChunkLayout layout{10 * 256 - 56, 256};
  absl::StatusOr<FragmentPlan> plan = FragmentPlan::Make(layout, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 4);
  // Chunks [0, 2), [2, 5), [5, 7), [7, 10).
  EXPECT_EQ(plan->begin(0), 0);
  EXPECT_EQ(plan->values(0), 2 * 256);
  EXPECT_EQ(plan->begin(1), 2 * 256);
  EXPECT_EQ(plan->values(1), 3 * 256);
  EXPECT_EQ(plan->begin(2), 5 * 256);
  EXPECT_EQ(plan->values(2), 2 * 256);
  EXPECT_EQ(plan->begin(3), 7 * 256);
  EXPECT_EQ(plan->values(3), 3 * 256 - 56);
  // One fragment is the whole vector, by default too.
  absl::StatusOr<FragmentPlan> whole = FragmentPlan::Make(layout, 1);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 1);
  EXPECT_EQ(whole->values(0), layout.num_values);
  EXPECT_EQ(FragmentPlan().size(), 1);
}

TEST(FragmentPlanTest, AModelWithFewerChunksThanFragmentsIsRefusedNamingTheField) {
  EXPECT_THAT(FragmentPlan::Make(ChunkLayout{3 * 256, 256}, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "fragments: 4 needs as many chunks"));
  EXPECT_FALSE(FragmentPlan::Make(ChunkLayout{3 * 256, 256}, 0).ok());
}

// K = 8, P = 4: a round every 2 steps; fragment f at the steps s with s - 2 f a multiple of 8.
TEST(FragmentPlanTest, FragmentFSyncsAtTheStepsFKOverPApartFromMultiplesOfK) {
  EXPECT_FALSE(FragmentPlan::RoundAt(0, 8, 4));
  EXPECT_FALSE(FragmentPlan::RoundAt(3, 8, 4));
  EXPECT_TRUE(FragmentPlan::RoundAt(2, 8, 4));
  EXPECT_EQ(FragmentPlan::FragmentAt(2, 8, 4), 1);
  EXPECT_EQ(FragmentPlan::FragmentAt(4, 8, 4), 2);
  EXPECT_EQ(FragmentPlan::FragmentAt(6, 8, 4), 3);
  EXPECT_EQ(FragmentPlan::FragmentAt(8, 8, 4), 0);
  EXPECT_EQ(FragmentPlan::FragmentAt(10, 8, 4), 1);
  // Without fragments: every K steps, the whole model.
  EXPECT_TRUE(FragmentPlan::RoundAt(16, 8, 1));
  EXPECT_FALSE(FragmentPlan::RoundAt(12, 8, 1));
  EXPECT_EQ(FragmentPlan::FragmentAt(16, 8, 1), 0);
}

// A member whose round at step 10 (fragment 1) meets an open round of fragment f moves by the
// steps that make its round at the moved step carry f (issue 50, finding 3).
TEST(FragmentPlanTest, StepsToPhaseMoveARoundIntoTheOpenRoundsFragment) {
  EXPECT_EQ(FragmentPlan::StepsToPhase(10, 8, 4, 1), 0);
  EXPECT_EQ(FragmentPlan::StepsToPhase(10, 8, 4, 2), 2);
  EXPECT_EQ(FragmentPlan::StepsToPhase(10, 8, 4, 0), 6);
  for (int f = 0; f < 4; ++f) {
    EXPECT_EQ(FragmentPlan::FragmentAt(10 + FragmentPlan::StepsToPhase(10, 8, 4, f), 8, 4), f);
  }
  EXPECT_EQ(FragmentPlan::StepsToPhase(12, 8, 2, 0), 4);
  EXPECT_EQ(FragmentPlan::StepsToPhase(10, 8, 4, 4), 0);  // no such fragment
  EXPECT_EQ(FragmentPlan::StepsToPhase(10, 8, 4, -1), 0);
}

}  // namespace
}  // namespace localsgd
