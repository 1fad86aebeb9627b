#include "coordinator/control_plane.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/fake_clock.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::FakeClock;
using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

v1::JoinRequest JoinAs(const std::string& node, int rank, int world = 1) {
  v1::JoinRequest request;
  request.mutable_identity()->set_node_name(node);
  request.mutable_identity()->set_local_rank(rank);
  request.mutable_identity()->set_local_world_size(world);
  return request;
}

v1::StartRunRequest StartRequest(int min_workers) {
  v1::StartRunRequest request;
  request.mutable_spec()->mutable_model()->set_builtin("mlp");
  request.mutable_spec()->set_min_workers(min_workers);
  request.mutable_spec()->set_quorum_timeout_seconds(60);
  return request;
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  std::unique_ptr<ControlPlane> Make(const std::string& state_dir = "") {
    ControlPlane::Options options;
    options.lease_timeout = absl::Seconds(10);
    options.heartbeat_interval = absl::Seconds(2);
    options.clock = clock_.AsFunction();
    options.state_dir = state_dir;
    auto plane = ControlPlane::Create(options);
    EXPECT_THAT(plane, IsOk());
    return std::move(*plane);
  }
  FakeClock clock_;
};

TEST_F(ControlPlaneTest, JoinReturnsLeaseAndRun) {
  auto plane = Make();
  auto joined = plane->Join(JoinAs("a", 0));
  ASSERT_THAT(joined, IsOk());
  EXPECT_EQ(joined->worker_id(), "a/0");
  EXPECT_DOUBLE_EQ(joined->lease_timeout_seconds(), 10);
  EXPECT_DOUBLE_EQ(joined->heartbeat_interval_seconds(), 2);
  EXPECT_EQ(joined->run().state(), v1::RUN_STATE_IDLE);
}

TEST_F(ControlPlaneTest, RunWaitsForWorkersAndTheyLearnOfItByHeartbeat) {
  auto plane = Make();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  auto run = plane->StartRun(StartRequest(2));
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  auto joined = plane->Join(JoinAs("b", 0));
  ASSERT_THAT(joined, IsOk());
  EXPECT_EQ(joined->run().state(), v1::RUN_STATE_RUNNING);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(3);
  auto response = plane->Heartbeat(beat);
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->run().run_id(), run->run_id());
  EXPECT_EQ(response->run().state(), v1::RUN_STATE_RUNNING);
}

TEST_F(ControlPlaneTest, StatusShowsMembersWithHeartbeatAge) {
  auto plane = Make();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  clock_.Advance(absl::Seconds(4));
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(12);
  beat.set_loss(0.25);
  beat.set_samples_per_second(512);
  ASSERT_THAT(plane->Heartbeat(beat), IsOk());
  clock_.Advance(absl::Milliseconds(1500));
  v1::CoordinatorStatus status = plane->Status();
  ASSERT_EQ(status.members_size(), 1);
  EXPECT_EQ(status.members(0).step(), 12);
  EXPECT_DOUBLE_EQ(status.members(0).loss(), 0.25);
  EXPECT_DOUBLE_EQ(status.members(0).samples_per_second(), 512);
  EXPECT_DOUBLE_EQ(status.members(0).heartbeat_age_seconds(), 1.5);
  EXPECT_DOUBLE_EQ(status.uptime_seconds(), 5.5);
  EXPECT_EQ(status.joins_total(), 1);
  EXPECT_EQ(status.heartbeats_total(), 1);
}

// Issue 12, finding 6: a NaN loss used to be reported as 0.0 and the run completed.
TEST_F(ControlPlaneTest, NonFiniteLossesShowAndFailTheRunWhenEveryWorkerReportsOne) {
  auto plane = Make();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plane->Join(JoinAs("b", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(40);
  beat.set_loss(std::nan(""));
  ASSERT_THAT(plane->Heartbeat(beat), IsOk());
  EXPECT_TRUE(std::isnan(plane->Status().members(0).loss()));
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_RUNNING);  // b still trains
  beat.set_worker_id("b/0");
  beat.set_loss(std::numeric_limits<double>::infinity());
  ASSERT_THAT(plane->Heartbeat(beat), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_FAILED);
  EXPECT_THAT(plane->Run().reason(), ::testing::HasSubstr("non-finite training loss"));
}

TEST_F(ControlPlaneTest, TickExpiresLeasesAndFailsTheRunAfterQuorumTimeout) {
  auto plane = Make();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(1)), IsOk());
  clock_.Advance(absl::Seconds(11));
  plane->Tick();
  EXPECT_EQ(plane->Status().members_size(), 0);
  EXPECT_EQ(plane->Status().leases_expired_total(), 1);
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_RUNNING);
  clock_.Advance(absl::Seconds(61));
  plane->Tick();
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_FAILED);
}

TEST_F(ControlPlaneTest, RunCompletesWhenEveryWorkerFinished) {
  auto plane = Make();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plane->Join(JoinAs("b", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  v1::HeartbeatRequest done;
  done.set_worker_id("a/0");
  done.set_finished(true);
  done.set_test_accuracy(0.9);
  ASSERT_THAT(plane->Heartbeat(done), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_RUNNING);
  // A finished leader will not sync again: rounds no longer wait for it.
  std::vector<ControlPlane::Leader> leaders = plane->LiveLeaders();
  ASSERT_EQ(leaders.size(), 1u);
  EXPECT_EQ(leaders[0].worker_id, "b/0");
  done.set_worker_id("b/0");
  ASSERT_THAT(plane->Heartbeat(done), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  EXPECT_DOUBLE_EQ(plane->Status().members(0).test_accuracy(), 0.9);
  done.set_model_path("/shared/run/model.pt");
  done.set_test_accuracy(0.9);
  ASSERT_THAT(plane->Heartbeat(done), IsOk());
  EXPECT_EQ(plane->Run().model_path(), "/shared/run/model.pt");
  done.set_test_accuracy(1.5);
  EXPECT_THAT(plane->Heartbeat(done), StatusIs(absl::StatusCode::kInvalidArgument, "test_accuracy"));
}

TEST_F(ControlPlaneTest, AwaitChangeWakesOnChange) {
  auto plane = Make();
  int64_t seen = plane->version();
  EXPECT_EQ(plane->AwaitChange(seen, absl::ZeroDuration()), seen);
  absl::Notification waiting;
  std::thread watcher([&] {
    waiting.Notify();
    EXPECT_GT(plane->AwaitChange(seen, absl::InfiniteDuration()), seen);
  });
  waiting.WaitForNotification();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  watcher.join();
}

TEST_F(ControlPlaneTest, DrainRefusesJoinsAndStartsButServesTheRest) {
  auto plane = Make();
  ASSERT_THAT(plane->Join(JoinAs("a", 0)), IsOk());
  int64_t before_drain = plane->version();
  plane->Drain();
  EXPECT_GT(plane->AwaitChange(before_drain, absl::InfiniteDuration()), before_drain);
  EXPECT_THAT(plane->Join(JoinAs("b", 0)), StatusIs(absl::StatusCode::kUnavailable, "shutting"));
  EXPECT_THAT(plane->StartRun(StartRequest(1)), StatusIs(absl::StatusCode::kUnavailable, ""));
  v1::LeaveRequest leave;
  leave.set_worker_id("a/0");
  EXPECT_THAT(plane->Leave(leave), IsOk());
  EXPECT_TRUE(plane->draining());
}

TEST_F(ControlPlaneTest, BadRequestsChangeNothing) {
  auto plane = Make();
  int64_t before = plane->version();
  EXPECT_THAT(plane->StartRun(v1::StartRunRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument, "spec"));
  EXPECT_THAT(plane->Join(JoinAs("", 0)), StatusIs(absl::StatusCode::kInvalidArgument, "node"));
  v1::LeaveRequest leave;
  leave.set_worker_id("ghost/0");
  EXPECT_THAT(plane->Leave(leave), StatusIs(absl::StatusCode::kNotFound, "ghost/0"));
  v1::StopRunRequest stop;
  stop.set_reason(std::string(2000, 'x'));
  EXPECT_THAT(plane->StopRun(stop), StatusIs(absl::StatusCode::kInvalidArgument, "reason"));
  EXPECT_EQ(plane->version(), before);
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_IDLE);
}

TEST_F(ControlPlaneTest, RunSurvivesARestartOnTheSameStateDir) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/state";
  std::string run_id;
  {
    auto plane = Make(dir);
    auto run = plane->StartRun(StartRequest(3));
    ASSERT_THAT(run, IsOk());
    run_id = run->run_id();
  }
  auto restarted = Make(dir);
  EXPECT_EQ(restarted->Run().run_id(), run_id);
  EXPECT_EQ(restarted->Run().state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  EXPECT_EQ(restarted->Run().spec().min_workers(), 3);
  EXPECT_THAT(restarted->StartRun(StartRequest(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition, run_id));
  ASSERT_THAT(restarted->StopRun(v1::StopRunRequest()), IsOk());
  EXPECT_EQ(Make(dir)->Run().state(), v1::RUN_STATE_STOPPED);
}

// Issue 12, finding 9: Joins no longer write the whole state file under the lock one by
// one; a writer thread saves the members, many joins in one write. What was saved is what a
// restart finds, and the run record is saved at once on a run change.
TEST_F(ControlPlaneTest, MembersAreSavedOffTheLockAndRestored) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/members";
  {
    auto plane = Make(dir);
    for (int i = 0; i < 300; ++i) ASSERT_THAT(plane->Join(JoinAs(absl::StrCat("n", i), 0)), IsOk());
    ASSERT_THAT(plane->Leave([] {
                  v1::LeaveRequest leave;
                  leave.set_worker_id("n7/0");
                  return leave;
                }()),
                IsOk());
    ASSERT_THAT(plane->StartRun(StartRequest(500)), IsOk());  // a run change: saved now
  }  // the destructor saves what the writer had not saved yet
  auto restarted = Make(dir);
  v1::CoordinatorStatus status = restarted->Status();
  EXPECT_EQ(status.members_size(), 299);
  EXPECT_EQ(restarted->Run().state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
}

}  // namespace
}  // namespace localsgd
