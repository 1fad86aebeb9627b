#include "coordinator/restore_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

v1::RunInfo Record(int64_t round, int64_t step, v1::RunState state = v1::RUN_STATE_RUNNING) {
  v1::RunInfo run;
  run.set_round(round);
  run.set_global_step(step);
  run.set_state(state);
  return run;
}

TEST(RestorePlanTest, AModelTheRecordHoldsIsRestoredAsItIs) {
  absl::StatusOr<RestorePlan> plan = PlanRestore(5, 40, Record(5, 40));
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->round, 5);
  EXPECT_EQ(plan->global_step, 40);
  EXPECT_FALSE(plan->commit);
  EXPECT_FALSE(plan->lost_rounds);
  EXPECT_EQ(plan->note, "");
}

TEST(RestorePlanTest, AModelOneCommitAheadIsRecordedFirst) {
  absl::StatusOr<RestorePlan> plan = PlanRestore(6, 48, Record(5, 40));
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->round, 6);
  EXPECT_EQ(plan->global_step, 48);
  EXPECT_TRUE(plan->commit);
  EXPECT_FALSE(plan->restored);
  EXPECT_FALSE(plan->lost_rounds);
  EXPECT_THAT(plan->note, ::testing::HasSubstr("round 6 was saved but not recorded"));
}

TEST(RestorePlanTest, AModelMoreThanOneCommitAheadIsRefused) {
  EXPECT_THAT(PlanRestore(7, 56, Record(5, 40)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "more than one commit ahead"));
}

// Rounds only move forward: a running run goes on from the saved model as the round after the
// record's, at the saved model's global step, and says which rounds were lost.
TEST(RestorePlanTest, ARunningRunBehindItsRecordGoesOnFromTheSavedModelAsTheNextRound) {
  absl::StatusOr<RestorePlan> plan = PlanRestore(3, 24, Record(5, 40));
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->round, 6);
  EXPECT_EQ(plan->global_step, 24);
  EXPECT_TRUE(plan->commit);
  EXPECT_TRUE(plan->restored);
  EXPECT_TRUE(plan->lost_rounds);
  EXPECT_THAT(plan->note, ::testing::HasSubstr("rounds 4 to 5 were committed"));
  EXPECT_THAT(plan->note, ::testing::HasSubstr("as round 6 at global step 24"));
}

// An ended run takes no commit: its latest saved model is what is kept.
TEST(RestorePlanTest, AnEndedRunBehindItsRecordKeepsItsLatestSavedModel) {
  for (v1::RunState state :
       {v1::RUN_STATE_COMPLETED, v1::RUN_STATE_STOPPED, v1::RUN_STATE_FAILED}) {
    absl::StatusOr<RestorePlan> plan = PlanRestore(3, 24, Record(5, 40, state));
    ASSERT_THAT(plan, IsOk());
    EXPECT_EQ(plan->round, 3);
    EXPECT_FALSE(plan->commit);
    EXPECT_TRUE(plan->lost_rounds);
    EXPECT_THAT(plan->note, ::testing::HasSubstr("the run ended at round 5"));
  }
}

}  // namespace
}  // namespace localsgd
