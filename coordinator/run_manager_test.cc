#include "coordinator/run_manager.h"

#include "common/proto_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/fake_clock.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::FakeClock;
using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

v1::RunSpec Spec(int min_workers = 2, int64_t total_steps = 16) {
  v1::RunSpec spec;
  spec.mutable_model()->set_builtin("mlp");
  spec.set_min_workers(min_workers);
  spec.set_total_steps(total_steps);
  spec.set_quorum_timeout_seconds(30);
  return spec;
}

class RunManagerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  RunManager runs_{clock_.AsFunction()};
};

TEST_F(RunManagerTest, StartsIdle) {
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_IDLE);
  EXPECT_FALSE(runs_.active());
  EXPECT_THAT(runs_.Stop("", ""), StatusIs(absl::StatusCode::kFailedPrecondition, "no run"));
  EXPECT_THAT(runs_.CommitRound(1, 8, 8), StatusIs(absl::StatusCode::kFailedPrecondition, "IDLE"));
}

TEST_F(RunManagerTest, WaitsForWorkersThenRunsThenCompletes) {
  auto run = runs_.Start(Spec(), /*live_workers=*/1);
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  EXPECT_EQ(run->spec().local_sgd_steps(), 8);  // defaults filled in
  EXPECT_EQ(run->spec().name(), run->run_id());
  EXPECT_FALSE(run->run_id().empty());
  EXPECT_EQ(FromProtoTime(run->create_time()), clock_.Now());

  EXPECT_FALSE(runs_.Update(1));
  clock_.Advance(absl::Seconds(5));
  EXPECT_TRUE(runs_.Update(2));
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(FromProtoTime(runs_.info().start_time()), clock_.Now());

  ASSERT_THAT(runs_.CommitRound(1, 8, 8), IsOk());
  EXPECT_EQ(runs_.info().round(), 1);
  EXPECT_EQ(runs_.info().global_step(), 8);
  EXPECT_THAT(runs_.CommitRound(1, 8, 8), StatusIs(absl::StatusCode::kFailedPrecondition, "round"));
  EXPECT_THAT(runs_.CommitRound(3, 24, 24),
              StatusIs(absl::StatusCode::kFailedPrecondition, "round"));
  EXPECT_THAT(runs_.CommitRound(2, 4, 4),
              StatusIs(absl::StatusCode::kFailedPrecondition, "global_step"));
  EXPECT_EQ(runs_.info().round(), 1);
  ASSERT_THAT(runs_.CommitRound(2, 16, 16), IsOk());
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_COMPLETED);
  EXPECT_EQ(runs_.info().reason(), "reached total_steps");
  EXPECT_TRUE(runs_.info().has_end_time());
  EXPECT_FALSE(runs_.active());
}

TEST_F(RunManagerTest, StartsRunningWhenWorkersAreAlreadyThere) {
  auto run = runs_.Start(Spec(2), 3);
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->state(), v1::RUN_STATE_RUNNING);
}

TEST_F(RunManagerTest, OneActiveRunAtATime) {
  auto first = runs_.Start(Spec(), 0);
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(runs_.Start(Spec(), 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, first->run_id()));
  EXPECT_EQ(runs_.info().run_id(), first->run_id());
  ASSERT_THAT(runs_.Stop("", "operator said so"), IsOk());
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_STOPPED);
  EXPECT_EQ(runs_.info().reason(), "operator said so");
  auto second = runs_.Start(Spec(), 0);
  ASSERT_THAT(second, IsOk());
  EXPECT_NE(second->run_id(), first->run_id());
}

TEST_F(RunManagerTest, StopChecksTheRunId) {
  auto run = runs_.Start(Spec(), 0);
  ASSERT_THAT(run, IsOk());
  EXPECT_THAT(runs_.Stop("run-nope", ""), StatusIs(absl::StatusCode::kNotFound, "run-nope"));
  EXPECT_TRUE(runs_.active());
  ASSERT_THAT(runs_.Stop(run->run_id(), ""), IsOk());
  EXPECT_EQ(runs_.info().reason(), "stopped by operator");
  EXPECT_THAT(runs_.Stop(run->run_id(), ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, "already ended"));
}

TEST_F(RunManagerTest, BadSpecChangesNothing) {
  v1::RunSpec bad = Spec();
  bad.set_local_sgd_steps(0);
  EXPECT_THAT(runs_.Start(bad, 5),
              StatusIs(absl::StatusCode::kInvalidArgument, "spec.local_sgd_steps"));
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_IDLE);
  EXPECT_TRUE(runs_.info().run_id().empty());
}

TEST_F(RunManagerTest, FailsAfterQuorumTimeoutBelowMinWorkers) {
  ASSERT_THAT(runs_.Start(Spec(2), 2), IsOk());
  EXPECT_FALSE(runs_.Update(1));  // below quorum: the timer starts
  clock_.Advance(absl::Seconds(20));
  EXPECT_FALSE(runs_.Update(1));
  EXPECT_FALSE(runs_.Update(2));  // back above: the timer resets
  EXPECT_FALSE(runs_.Update(1));
  clock_.Advance(absl::Seconds(29));
  EXPECT_FALSE(runs_.Update(1));
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_RUNNING);
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(runs_.Update(1));
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_FAILED);
  EXPECT_THAT(runs_.info().reason(), ::testing::HasSubstr("quorum_timeout_seconds"));
}

// With fragments a round at total_steps syncs one part of the model: the run completes once
// every part has synced there (synced_step), not at the first such round.
TEST_F(RunManagerTest, WithFragmentsTheRunCompletesOnceEveryFragmentSyncedAtTheEnd) {
  ASSERT_THAT(runs_.Start(Spec(1, 16), 1), IsOk());
  runs_.Update(1);
  ASSERT_EQ(runs_.info().state(), v1::RUN_STATE_RUNNING);
  ASSERT_THAT(runs_.CommitRound(1, 16, 12), IsOk());
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(runs_.info().global_step(), 16);
  ASSERT_THAT(runs_.CommitRound(2, 16, 16), IsOk());
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_COMPLETED);
}

TEST_F(RunManagerTest, EpochRunsEndThroughComplete) {
  v1::RunSpec spec = Spec(1);
  spec.set_epochs(1);
  ASSERT_THAT(runs_.Start(spec, 1), IsOk());
  ASSERT_THAT(runs_.CommitRound(1, 100000, 100000), IsOk());
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_RUNNING);
  ASSERT_THAT(runs_.Complete("every worker finished its epochs"), IsOk());
  EXPECT_EQ(runs_.info().state(), v1::RUN_STATE_COMPLETED);
  EXPECT_THAT(runs_.Fail("late"), StatusIs(absl::StatusCode::kFailedPrecondition, "no active"));
}

TEST_F(RunManagerTest, RestoreReplacesState) {
  v1::RunInfo saved;
  saved.set_run_id("run-x");
  saved.set_state(v1::RUN_STATE_RUNNING);
  *saved.mutable_spec() = Spec();
  saved.set_round(4);
  saved.set_global_step(32);
  runs_.Restore(saved);
  EXPECT_TRUE(runs_.active());
  ASSERT_THAT(runs_.CommitRound(5, 40, 40), IsOk());
}

// Found by tests/stop_race_test.sh: a restarted coordinator counted run ids from 1 again, so
// a run started within the second of the restored one got its id (and its model).
TEST_F(RunManagerTest, ANewRunNeverTakesTheRestoredRunsId) {
  auto first = runs_.Start(Spec(), 2);
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(runs_.Stop("", "done"), IsOk());
  RunManager restarted(clock_.AsFunction());  // same second, counting from 1 again
  restarted.Restore(runs_.info());
  auto second = restarted.Start(Spec(), 2);
  ASSERT_THAT(second, IsOk());
  EXPECT_NE(second->run_id(), first->run_id());
}

}  // namespace
}  // namespace localsgd
