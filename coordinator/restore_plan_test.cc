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

// A checkpoint offer is of a round the run committed, at that round's step when it is the
// record's, within total_steps otherwise, with momentum exactly when the run keeps one.
TEST(CheckCheckpointOfferTest, NamesTheFieldThatDoesNotFitTheRun) {
  v1::RunInfo run;
  run.set_run_id("run-1");
  run.set_round(5);
  run.set_global_step(40);
  run.set_total_steps(100);
  auto offer = [](int64_t round, int64_t step, bool momentum = false) {
    v1::InitModelHeader header;
    header.set_from_checkpoint(true);
    header.set_checkpoint_round(round);
    header.set_checkpoint_global_step(step);
    header.set_has_momentum(momentum);
    return header;
  };
  EXPECT_THAT(CheckCheckpointOffer(offer(5, 40), run), IsOk());
  EXPECT_THAT(CheckCheckpointOffer(offer(3, 64), run), IsOk());  // a restore took the step back
  EXPECT_THAT(CheckCheckpointOffer(offer(6, 48), run),
              StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint_round"));
  EXPECT_THAT(CheckCheckpointOffer(offer(-1, 0), run),
              StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint_round"));
  EXPECT_THAT(CheckCheckpointOffer(offer(5, 32), run),
              StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint_global_step"));
  EXPECT_THAT(CheckCheckpointOffer(offer(3, 101), run),
              StatusIs(absl::StatusCode::kFailedPrecondition, "checkpoint_global_step"));
  EXPECT_THAT(CheckCheckpointOffer(offer(3, 24, /*momentum=*/true), run),
              StatusIs(absl::StatusCode::kInvalidArgument, "has_momentum"));
  run.mutable_spec()->mutable_outer_optimizer()->set_momentum(0.9);
  EXPECT_THAT(CheckCheckpointOffer(offer(3, 24), run),
              StatusIs(absl::StatusCode::kInvalidArgument, "has_momentum"));
  EXPECT_THAT(CheckCheckpointOffer(offer(3, 24, /*momentum=*/true), run), IsOk());
}

}  // namespace
}  // namespace localsgd
