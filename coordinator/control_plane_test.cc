#include "coordinator/control_plane.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/node_key.h"
#include "common/status_macros.h"
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
  // Join, Heartbeat and Leave as the member would: its calls carry the credential its latest
  // Join returned (unless the request already names one).
  absl::StatusOr<v1::JoinResponse> Join(ControlPlane& plane, const v1::JoinRequest& request) {
    absl::StatusOr<v1::JoinResponse> joined = plane.Join(request);
    if (joined.ok()) credentials_[joined->worker_id()] = joined->member_credential();
    return joined;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(ControlPlane& plane,
                                                  v1::HeartbeatRequest request) {
    if (request.member_credential().empty()) {
      request.set_member_credential(credentials_[request.worker_id()]);
    }
    return plane.Heartbeat(request);
  }
  absl::Status Leave(ControlPlane& plane, v1::LeaveRequest request) {
    if (request.member_credential().empty()) {
      request.set_member_credential(credentials_[request.worker_id()]);
    }
    return plane.Leave(request);
  }
  // The member leaves as a worker that trained its last step does.
  absl::Status LeaveFinished(ControlPlane& plane, const std::string& worker_id) {
    v1::LeaveRequest request;
    request.set_worker_id(worker_id);
    request.set_reason("finished");
    return Leave(plane, request);
  }
  std::map<std::string, std::string> credentials_;

  // Worker a/0 joins and a run of 200 steps starts for it.
  absl::StatusOr<v1::RunInfo> StartOneWorkerRun(ControlPlane& plane) {
    LOCALSGD_RETURN_IF_ERROR(Join(plane, JoinAs("a", 0)).status());
    v1::StartRunRequest request = StartRequest(1);
    request.mutable_spec()->set_total_steps(200);
    return plane.StartRun(request);
  }

  std::unique_ptr<ControlPlane> Make(const std::string& state_dir = "") {
    ControlPlane::Options options;
    options.lease_timeout = absl::Seconds(10);
    options.heartbeat_interval = absl::Seconds(2);
    options.clock = clock_.AsFunction();
    if (!state_dir.empty()) {
      // A writer per plane, as a restarted coordinator has; it outlives its plane.
      absl::StatusOr<std::unique_ptr<StateWriter>> writer =
          StateWriter::Open(StateWriter::Options{state_dir, nullptr});
      EXPECT_THAT(writer, IsOk());
      writers_.push_back(std::move(*writer));
      options.state = writers_.back().get();
    }
    auto plane = ControlPlane::Create(options);
    EXPECT_THAT(plane, IsOk());
    return std::move(*plane);
  }
  std::vector<std::unique_ptr<StateWriter>> writers_;
  FakeClock clock_;
};

TEST_F(ControlPlaneTest, JoinReturnsLeaseAndRun) {
  auto plane = Make();
  auto joined = Join(*plane, JoinAs("a", 0));
  ASSERT_THAT(joined, IsOk());
  EXPECT_EQ(joined->worker_id(), "a/0");
  EXPECT_DOUBLE_EQ(joined->lease_timeout_seconds(), 10);
  EXPECT_DOUBLE_EQ(joined->heartbeat_interval_seconds(), 2);
  EXPECT_EQ(joined->run().state(), v1::RUN_STATE_IDLE);
}

TEST_F(ControlPlaneTest, RunWaitsForWorkersAndTheyLearnOfItByHeartbeat) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  auto run = plane->StartRun(StartRequest(2));
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  auto joined = Join(*plane, JoinAs("b", 0));
  ASSERT_THAT(joined, IsOk());
  EXPECT_EQ(joined->run().state(), v1::RUN_STATE_RUNNING);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(3);
  auto response = Heartbeat(*plane, beat);
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->run().run_id(), run->run_id());
  EXPECT_EQ(response->run().state(), v1::RUN_STATE_RUNNING);
}

// Issue 49: ranks sat for minutes at "waiting for a run" and nothing said who was missing.
// The run says how many of min_workers have joined, by node, until it runs.
TEST_F(ControlPlaneTest, AWaitingRunSaysWhoHasJoined) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0, 2)), IsOk());
  auto run = plane->StartRun(StartRequest(4));
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->waiting_for(), "1 of min_workers 4 workers have joined (a: 1 of 2 ranks)");
  ASSERT_THAT(Join(*plane, JoinAs("a", 1, 2)), IsOk());
  auto joined = Join(*plane, JoinAs("b", 0, 2));
  ASSERT_THAT(joined, IsOk());
  EXPECT_EQ(joined->run().waiting_for(),
            "3 of min_workers 4 workers have joined (a: 2 of 2 ranks; b: 1 of 2 ranks)");
  joined = Join(*plane, JoinAs("b", 1, 2));
  ASSERT_THAT(joined, IsOk());
  EXPECT_EQ(joined->run().state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(joined->run().waiting_for(), "");
}

// Issue 50, finding 4: a leader weighs the ranks of its node that joined and live, at most what
// it declared; not what it declares.
TEST_F(ControlPlaneTest, ALeaderStandsForTheRanksOfItsNodeThatJoined) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("big", 0, 1024)), IsOk());
  auto leaders = plane->LiveLeaders();
  ASSERT_EQ(leaders.size(), 1u);
  EXPECT_EQ(leaders[0].local_world_size, 1024);
  EXPECT_EQ(leaders[0].ranks, 1);
  ASSERT_THAT(Join(*plane, JoinAs("big", 1, 1024)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("other", 0, 1)), IsOk());
  leaders = plane->LiveLeaders();
  ASSERT_EQ(leaders.size(), 2u);
  for (const ControlPlane::Leader& leader : leaders) {
    EXPECT_EQ(leader.ranks, leader.worker_id == "big/0" ? 2 : 1) << leader.worker_id;
  }
}

TEST_F(ControlPlaneTest, StatusShowsMembersWithHeartbeatAge) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  clock_.Advance(absl::Seconds(4));
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(12);
  beat.set_loss(0.25);
  beat.set_samples_per_second(512);
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
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

// Issue 50, finding 5: a worker's steps trained alone show per member, and reaching the run's
// max_unsynced_steps (default 4 x local_sgd_steps = 32) makes one event, not one per heartbeat.
TEST_F(ControlPlaneTest, AWorkerReachingTheUnsyncedBoundIsAnEvent) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(1)), IsOk());
  const auto unsynced_events = [&] {
    int n = 0;
    const v1::CoordinatorStatus status = plane->Status();
    for (const v1::Event& event : status.events()) {
      if (event.kind() == "member_unsynced") n += static_cast<int>(event.times());
    }
    return n;
  };
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(40);
  beat.set_unsynced_steps(31);
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  EXPECT_EQ(plane->Status().members(0).unsynced_steps(), 31);
  EXPECT_EQ(unsynced_events(), 0);
  beat.set_unsynced_steps(32);
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  EXPECT_EQ(unsynced_events(), 1);
  beat.set_unsynced_steps(0);
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  beat.set_unsynced_steps(33);
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  EXPECT_EQ(unsynced_events(), 2);  // a second wait
}

// Issue 54: the run record names the newest checkpoint its node leaders reported, of its own
// committed rounds, and keeps it after the run's end; a malformed one is refused, naming the
// field, and changes nothing.
TEST_F(ControlPlaneTest, TheRunRecordsItsNewestCheckpoint) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(1)), IsOk());
  const std::string run_id = plane->Run().run_id();
  ASSERT_THAT(plane->CommitRound(run_id, 1, 8, 8), IsOk());
  ASSERT_THAT(plane->CommitRound(run_id, 2, 16, 16), IsOk());
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(16);
  auto report = [&](const std::string& run, int64_t round, int64_t step, const std::string& path) {
    v1::CheckpointInfo* checkpoint = beat.mutable_checkpoint();
    checkpoint->set_run_id(run);
    checkpoint->set_round(round);
    checkpoint->set_global_step(step);
    checkpoint->set_path(path);
    return Heartbeat(*plane, beat);
  };
  ASSERT_THAT(report(run_id, 1, 8, "/ckpt/a/checkpoint.bin"), IsOk());
  EXPECT_EQ(plane->Run().checkpoint().round(), 1);
  EXPECT_EQ(plane->Run().checkpoint().worker_id(), "a/0");
  EXPECT_EQ(plane->Status().members(0).checkpoint().path(), "/ckpt/a/checkpoint.bin");
  ASSERT_THAT(report(run_id, 3, 24, "/ckpt/a/checkpoint.bin"), IsOk());  // not committed
  ASSERT_THAT(report("another-run", 2, 16, "/ckpt/a/checkpoint.bin"), IsOk());
  EXPECT_EQ(plane->Run().checkpoint().round(), 1);
  EXPECT_THAT(report(run_id, 2, 16, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "checkpoint.path"));
  EXPECT_THAT(report(run_id, -1, 16, "/p"),
              StatusIs(absl::StatusCode::kInvalidArgument, "checkpoint: round"));
  beat.mutable_checkpoint()->set_round(2);
  beat.mutable_checkpoint()->set_worker_id("b/0");
  EXPECT_THAT(Heartbeat(*plane, beat), StatusIs(absl::StatusCode::kInvalidArgument, "worker_id"));
  beat.mutable_checkpoint()->clear_worker_id();
  EXPECT_EQ(plane->Run().checkpoint().round(), 1);
  // The run ends; the node's final checkpoint comes after.
  ASSERT_THAT(plane->StopRun(v1::StopRunRequest()), IsOk());
  ASSERT_THAT(report(run_id, 2, 16, "/ckpt/a/final.bin"), IsOk());
  EXPECT_EQ(plane->Run().checkpoint().round(), 2);
  EXPECT_EQ(plane->Run().checkpoint().path(), "/ckpt/a/final.bin");
}

// Issue 12, finding 6: a NaN loss used to be reported as 0.0 and the run completed.
TEST_F(ControlPlaneTest, NonFiniteLossesShowAndFailTheRunWhenEveryWorkerReportsOne) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_step(40);
  beat.set_loss(std::nan(""));
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  EXPECT_TRUE(std::isnan(plane->Status().members(0).loss()));
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_RUNNING);  // b still trains
  beat.set_worker_id("b/0");
  beat.set_loss(std::numeric_limits<double>::infinity());
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_FAILED);
  EXPECT_THAT(plane->Run().reason(), ::testing::HasSubstr("non-finite training loss"));
}

TEST_F(ControlPlaneTest, TickExpiresLeasesAndFailsTheRunAfterQuorumTimeout) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
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
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  v1::HeartbeatRequest done;
  done.set_worker_id("a/0");
  done.set_finished(true);
  done.set_test_accuracy(0.9);
  ASSERT_THAT(Heartbeat(*plane, done), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_RUNNING);
  // A finished leader will not sync again: rounds no longer wait for it.
  std::vector<ControlPlane::Leader> leaders = plane->LiveLeaders();
  ASSERT_EQ(leaders.size(), 1u);
  EXPECT_EQ(leaders[0].worker_id, "b/0");
  done.set_worker_id("b/0");
  ASSERT_THAT(Heartbeat(*plane, done), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  EXPECT_DOUBLE_EQ(plane->Status().members(0).test_accuracy(), 0.9);
  done.set_model_path("/shared/run/model.pt");
  done.set_test_accuracy(0.9);
  ASSERT_THAT(Heartbeat(*plane, done), IsOk());
  EXPECT_EQ(plane->Run().model_path(), "/shared/run/model.pt");
  done.set_test_accuracy(1.5);
  EXPECT_THAT(Heartbeat(*plane, done),
              StatusIs(absl::StatusCode::kInvalidArgument, "test_accuracy"));
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
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  watcher.join();
}

TEST_F(ControlPlaneTest, DrainRefusesJoinsAndStartsButServesTheRest) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  int64_t before_drain = plane->version();
  plane->Drain();
  EXPECT_GT(plane->AwaitChange(before_drain, absl::InfiniteDuration()), before_drain);
  EXPECT_THAT(Join(*plane, JoinAs("b", 0)), StatusIs(absl::StatusCode::kUnavailable, "shutting"));
  EXPECT_THAT(plane->StartRun(StartRequest(1)), StatusIs(absl::StatusCode::kUnavailable, ""));
  v1::LeaveRequest leave;
  leave.set_worker_id("a/0");
  EXPECT_THAT(Leave(*plane, leave), IsOk());
  EXPECT_TRUE(plane->draining());
}

TEST_F(ControlPlaneTest, BadRequestsChangeNothing) {
  auto plane = Make();
  int64_t before = plane->version();
  EXPECT_THAT(plane->StartRun(v1::StartRunRequest()),
              StatusIs(absl::StatusCode::kInvalidArgument, "spec"));
  EXPECT_THAT(Join(*plane, JoinAs("", 0)), StatusIs(absl::StatusCode::kInvalidArgument, "node"));
  v1::LeaveRequest leave;
  leave.set_worker_id("ghost/0");
  EXPECT_THAT(Leave(*plane, leave), StatusIs(absl::StatusCode::kNotFound, "ghost/0"));
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
    for (int i = 0; i < 300; ++i)
      ASSERT_THAT(Join(*plane, JoinAs(absl::StrCat("n", i), 0)), IsOk());
    ASSERT_THAT(Leave(*plane,
                      [] {
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

// Issue 13: the run's progress, its results kept after its end, events, series and history.
v1::HeartbeatRequest Beat(const std::string& id, int64_t step, double loss, double accuracy = 0,
                          int64_t total = 0) {
  v1::HeartbeatRequest beat;
  beat.set_worker_id(id);
  beat.set_step(step);
  beat.set_loss(loss);
  beat.set_test_accuracy(accuracy);
  beat.set_total_steps(total);
  beat.set_samples_per_second(100);
  return beat;
}

std::vector<std::string> Kinds(const v1::CoordinatorStatus& status) {
  std::vector<std::string> kinds;
  for (const v1::Event& event : status.events()) kinds.push_back(event.kind());
  return kinds;
}

TEST_F(ControlPlaneTest, ProgressOfAnEpochRunComesFromTheWorkersTotals) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  v1::StartRunRequest request = StartRequest(1);
  request.mutable_spec()->set_epochs(2);
  ASSERT_THAT(plane->StartRun(request), IsOk());
  EXPECT_EQ(plane->Status().progress().total_steps(), 0);  // not known yet
  EXPECT_EQ(plane->Status().progress().eta_seconds(), -1);
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 0, 0, 0, 400)), IsOk());
  ASSERT_THAT(plane->CommitRound(plane->Run().run_id(), 1, 100, 100), IsOk());
  clock_.Advance(absl::Seconds(50));
  v1::CoordinatorStatus status = plane->Status();
  EXPECT_EQ(status.run().total_steps(), 400);
  EXPECT_EQ(status.progress().global_step(), 100);
  EXPECT_DOUBLE_EQ(status.progress().percent(), 25);
  EXPECT_DOUBLE_EQ(status.progress().elapsed_seconds(), 50);
  EXPECT_DOUBLE_EQ(status.progress().eta_seconds(), 150);  // 300 steps at 2 steps/s
  // A run of total_steps keeps the spec's total whatever workers report.
  auto plain = Make();
  ASSERT_THAT(Join(*plain, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plain->StartRun(StartRequest(1)), IsOk());
  ASSERT_THAT(Heartbeat(*plain, Beat("a/0", 0, 0, 0, 5)), IsOk());
  EXPECT_EQ(plain->Status().progress().total_steps(), 1000);
}

// A rank whose first report of the run comes after the run completed (a short run, or the
// other nodes completed it): its final report is among the run's results all the same.
TEST_F(ControlPlaneTest, AFinalReportAfterTheEndCountsAmongTheResults) {
  auto plane = Make("");
  ASSERT_THAT(Join(*plane, JoinAs("a", 0, 2)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("a", 1, 2)), IsOk());
  v1::StartRunRequest request = StartRequest(1);
  request.mutable_spec()->set_total_steps(24);
  auto run = plane->StartRun(request);
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 24, 0.4)), IsOk());
  ASSERT_THAT(plane->CommitRound(run->run_id(), 1, 24, 24), IsOk());
  ASSERT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  v1::HeartbeatRequest late = Beat("a/1", 24, 0.5, 0.7);
  ASSERT_THAT(Heartbeat(*plane, late), IsOk());  // not finished: not a result
  EXPECT_EQ(plane->Run().member_results_size(), 1);
  late.set_finished(true);
  ASSERT_THAT(Heartbeat(*plane, late), IsOk());
  const v1::RunInfo done = plane->Run();
  ASSERT_EQ(done.member_results_size(), 2);
  EXPECT_EQ(done.member_results(1).worker_id(), "a/1");
  EXPECT_EQ(done.member_results(1).step(), 24);
}

TEST_F(ControlPlaneTest, TheRunKeepsItsResultsAfterItsEndAndInTheHistoryAcrossARestart) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/results";
  std::string first;
  {
    auto plane = Make(dir);
    ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
    ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
    v1::StartRunRequest request = StartRequest(2);
    request.mutable_spec()->set_total_steps(100);
    auto run = plane->StartRun(request);
    ASSERT_THAT(run, IsOk());
    first = run->run_id();
    ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 100, 0.4)), IsOk());
    ASSERT_THAT(Heartbeat(*plane, Beat("b/0", 100, 0.6)), IsOk());
    ASSERT_THAT(plane->CommitRound(first, 1, 100, 100), IsOk());
    EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
    // The final evaluation comes after the end; then the workers leave.
    ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 100, 0.4, 0.80)), IsOk());
    ASSERT_THAT(Heartbeat(*plane, Beat("b/0", 100, 0.6, 0.90)), IsOk());
    for (const char* id : {"a/0", "b/0"}) {
      ASSERT_THAT(LeaveFinished(*plane, id), IsOk());
    }
    v1::RunInfo done = plane->Run();
    EXPECT_DOUBLE_EQ(done.final_loss(), 0.5);
    EXPECT_DOUBLE_EQ(done.final_test_accuracy(), 0.85);
    ASSERT_EQ(done.member_results_size(), 2);
    EXPECT_EQ(done.member_results(1).worker_id(), "b/0");
    EXPECT_DOUBLE_EQ(done.member_results(1).test_accuracy(), 0.90);
    EXPECT_EQ(done.member_results(1).left_reason(), "finished");
    EXPECT_EQ(plane->Status().members_size(), 0);
    // A new run: the first one is history, with its results; rounds belong to their run.
    v1::RoundRecord record;
    record.set_round(1);
    record.set_outcome(v1::ROUND_OUTCOME_COMMITTED);
    plane->RecordRound(record);
    EXPECT_EQ(plane->Status().recent_rounds(0).run_id(), first);
    ASSERT_THAT(plane->StartRun(StartRequest(5)), IsOk());
    EXPECT_EQ(plane->Status().recent_rounds_size(), 0);
    ASSERT_EQ(plane->ListRuns().size(), 2u);
    EXPECT_EQ(plane->ListRuns()[1].run_id(), first);
  }
  auto restarted = Make(dir);
  std::vector<v1::RunInfo> runs = restarted->ListRuns();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  EXPECT_EQ(runs[1].run_id(), first);
  EXPECT_EQ(runs[1].state(), v1::RUN_STATE_COMPLETED);
  EXPECT_DOUBLE_EQ(runs[1].final_test_accuracy(), 0.85);
  // Series live in memory: a restarted coordinator says so.
  EXPECT_THAT(restarted->Series(first), StatusIs(absl::StatusCode::kNotFound, "no series"));
  // A new run never takes the id of one in the history.
  ASSERT_THAT(restarted->StopRun(v1::StopRunRequest()), IsOk());
  auto next = restarted->StartRun(StartRequest(1));
  ASSERT_THAT(next, IsOk());
  for (const v1::RunInfo& run : runs) EXPECT_NE(next->run_id(), run.run_id());
}

TEST_F(ControlPlaneTest, ARunWhoseEveryWorkerFailedBeforeTrainingFailsAtOnceWithTheirErrors) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  for (const char* id : {"a/0", "b/0"}) {
    v1::LeaveRequest leave;
    leave.set_worker_id(id);
    leave.set_reason("failed: dataset.path: cannot open /nope");
    leave.set_failed(true);
    if (std::string(id) == "a/0") {
      leave.set_preempted(true);  // one way or the other, not both
      EXPECT_THAT(Leave(*plane, leave),
                  StatusIs(absl::StatusCode::kInvalidArgument, "failed, preempted"));
      leave.set_preempted(false);
    }
    ASSERT_THAT(Leave(*plane, leave), IsOk());
  }
  v1::CoordinatorStatus status = plane->Status();
  EXPECT_EQ(status.run().state(), v1::RUN_STATE_FAILED);
  // Issue 37, finding 9: no worker reported a loss, so the run has none (not 0).
  EXPECT_FALSE(status.run().has_final_loss());
  EXPECT_THAT(status.run().reason(),
              ::testing::HasSubstr("every worker failed before training: a/0: failed: "
                                   "dataset.path: cannot open /nope; b/0"));
  EXPECT_THAT(Kinds(status), ::testing::ElementsAre("worker_joined", "worker_joined", "run_state",
                                                    "worker_failed", "worker_failed", "run_state"));
  EXPECT_EQ(status.events(status.events_size() - 1).severity(), v1::EVENT_SEVERITY_ERROR);
  EXPECT_EQ(status.events(3).worker_id(), "a/0");
  EXPECT_THAT(status.events(3).text(), ::testing::HasSubstr("cannot open /nope"));

  // One that trained, or one that only left, keeps the run waiting for its quorum as before.
  auto other = Make();
  ASSERT_THAT(Join(*other, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(other->StartRun(StartRequest(1)), IsOk());
  ASSERT_THAT(Heartbeat(*other, Beat("a/0", 5, 1.0)), IsOk());
  v1::LeaveRequest leave;
  leave.set_worker_id("a/0");
  leave.set_reason("failed: out of memory");
  leave.set_failed(true);
  ASSERT_THAT(Leave(*other, leave), IsOk());
  EXPECT_EQ(other->Run().state(), v1::RUN_STATE_RUNNING);

  // The field decides, not the text: a reason that reads "failed" is a plain leave.
  auto worded = Make();
  ASSERT_THAT(Join(*worded, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(worded->StartRun(StartRequest(1)), IsOk());
  v1::LeaveRequest text_only;
  text_only.set_worker_id("a/0");
  text_only.set_reason("failed: only in words");
  ASSERT_THAT(Leave(*worded, text_only), IsOk());
  EXPECT_NE(worded->Run().state(), v1::RUN_STATE_FAILED);
  EXPECT_THAT(Kinds(worded->Status()), ::testing::Contains("worker_left"));
}

TEST_F(ControlPlaneTest, RoundsMakeASeriesEventsAndHistogramCounts) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
  auto run = plane->StartRun(StartRequest(2));
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 8, 0.5, 0.7)), IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("b/0", 8, 0.7)), IsOk());
  v1::RoundRecord committed;
  committed.set_round(1);
  committed.set_outcome(v1::ROUND_OUTCOME_COMMITTED);
  committed.set_global_step(8);
  committed.set_duration_seconds(0.3);
  committed.set_slowest_wait_seconds(0.1);
  committed.set_bytes_received(4000);
  committed.add_members("a/0");
  v1::DroppedMember* dropped = committed.add_dropped();
  dropped->set_member_id("b/0");
  dropped->set_reason("missed the round deadline (60 s)");
  plane->RecordRound(committed);
  v1::RoundRecord aborted;
  aborted.set_round(2);
  aborted.set_outcome(v1::ROUND_OUTCOME_ABORTED);
  aborted.set_reason("quorum lost");
  aborted.set_duration_seconds(7);
  plane->RecordRound(aborted);

  auto series = plane->Series(run->run_id());
  ASSERT_THAT(series, IsOk());
  ASSERT_EQ(series->points_size(), 2);
  const v1::SeriesPoint& point = series->points(0);
  EXPECT_EQ(point.global_step(), 8);
  EXPECT_DOUBLE_EQ(point.loss_mean(), 0.6);
  EXPECT_DOUBLE_EQ(point.loss_min(), 0.5);
  EXPECT_DOUBLE_EQ(point.loss_max(), 0.7);
  EXPECT_DOUBLE_EQ(point.samples_per_second(), 200);
  EXPECT_DOUBLE_EQ(point.test_accuracy(), 0.7);
  EXPECT_EQ(point.bytes_received(), 4000);
  EXPECT_EQ(point.members(), 1);
  EXPECT_EQ(series->points(1).outcome(), v1::ROUND_OUTCOME_ABORTED);
  EXPECT_THAT(plane->Series("nope"), StatusIs(absl::StatusCode::kNotFound, "nope"));

  v1::CoordinatorStatus status = plane->Status();
  EXPECT_THAT(Kinds(status), ::testing::Contains("member_dropped"));
  EXPECT_THAT(Kinds(status), ::testing::Contains("round_aborted"));
  EXPECT_EQ(status.members_dropped_total().at("deadline"), 1);
  // Cumulative buckets: 0.3 s falls in (0.25, 0.5], 7 s in (5, 10].
  ASSERT_EQ(status.round_duration_bucket_bounds_size(),
            static_cast<int>(ControlPlane::RoundDurationBounds().size()));
  EXPECT_EQ(status.round_duration_bucket_counts(2), 0);  // <= 0.25
  EXPECT_EQ(status.round_duration_bucket_counts(3), 1);  // <= 0.5
  EXPECT_EQ(status.round_duration_bucket_counts(7), 2);  // <= 10
  EXPECT_EQ(status.round_duration_bucket_counts(status.round_duration_bucket_counts_size() - 1), 2);
  EXPECT_DOUBLE_EQ(status.round_duration_seconds_sum(), 7.3);
  EXPECT_EQ(ControlPlane::DropReasonClass("stream ended: cancelled"), "left");
  EXPECT_EQ(ControlPlane::DropReasonClass("refused: weight: beyond float"), "refused");
  EXPECT_EQ(ControlPlane::DropReasonClass("checksum mismatch"), "error");
}

// Finding 9 of issue 37: a worker that joins under a name the ended run's worker had (a
// restarted node waiting for the next run) changes nothing in that run's record.
TEST_F(ControlPlaneTest, AProcessJoiningAgainIsOneJoinAndItsResultKeepsItsHostAndSpeed) {
  auto plane = Make();
  v1::JoinRequest first = JoinAs("a", 0);
  first.set_hostname("host-a");
  first.set_pid(42);
  ASSERT_THAT(Join(*plane, first), IsOk());
  v1::StartRunRequest request = StartRequest(1);
  request.mutable_spec()->set_total_steps(100);
  ASSERT_THAT(plane->StartRun(request), IsOk());
  // The same process claims its node's lead with its data plane: it joined again, once.
  v1::JoinRequest lead = first;
  lead.set_node_leader(true);
  lead.set_data_address("10.0.0.1:7000");
  ASSERT_THAT(Join(*plane, lead), IsOk());
  // Another process under the same name (a restart) is a join of its own.
  v1::JoinRequest restarted = first;
  restarted.set_pid(43);
  ASSERT_THAT(Join(*plane, restarted), IsOk());
  v1::CoordinatorStatus status = plane->Status();
  EXPECT_THAT(Kinds(status), ::testing::ElementsAre("worker_joined", "run_state", "worker_rejoined",
                                                    "worker_joined"));
  EXPECT_EQ(status.events(2).text(),
            "worker a/0 joined again (generation 2, node leader, data plane at 10.0.0.1:7000)");
  v1::HeartbeatRequest last = Beat("a/0", 100, 0.4);
  last.set_finished(true);
  ASSERT_THAT(Heartbeat(*plane, last), IsOk());
  ASSERT_THAT(LeaveFinished(*plane, "a/0"), IsOk());
  EXPECT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  ASSERT_EQ(plane->Run().member_results_size(), 1);
  EXPECT_EQ(plane->Run().member_results(0).hostname(), "host-a");
  EXPECT_DOUBLE_EQ(plane->Run().member_results(0).samples_per_second(), 100);
}

TEST_F(ControlPlaneTest, AnEndedRunsResultsAreNotChangedByALaterWorkerOfTheSameName) {
  auto plane = Make("");
  absl::StatusOr<v1::RunInfo> run = StartOneWorkerRun(*plane);
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 200, 0.974)), IsOk());
  ASSERT_THAT(plane->CommitRound(run->run_id(), 1, 200, 200), IsOk());
  ASSERT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  ASSERT_THAT(LeaveFinished(*plane, "a/0"), IsOk());
  const v1::RunInfo before = plane->Run();
  // The node is started again: the same name, a new generation, step 0, then it leaves.
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  v1::HeartbeatRequest fresh = Beat("a/0", 0, 0);
  fresh.set_finished(true);
  ASSERT_THAT(Heartbeat(*plane, fresh), IsOk());
  v1::LeaveRequest leave;
  leave.set_worker_id("a/0");
  leave.set_reason("stopped by signal");
  ASSERT_THAT(Leave(*plane, leave), IsOk());
  const v1::RunInfo after = plane->Run();
  ASSERT_EQ(after.member_results_size(), 1);
  EXPECT_EQ(after.member_results(0).step(), 200);
  EXPECT_DOUBLE_EQ(after.member_results(0).loss(), 0.974);
  EXPECT_EQ(after.member_results(0).left_reason(), "finished");
  EXPECT_DOUBLE_EQ(after.final_loss(), before.final_loss());
}

// A member whose lease expired has left as far as the run's results say (node leaders holding
// the final model stop waiting for it); one that beats again during the run is back.
TEST_F(ControlPlaneTest, AnExpiredLeaseIsADepartureInTheRunsResults) {
  auto plane = Make();
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("c", 0)), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  v1::HeartbeatRequest beat = Beat("c/0", 10, 1.0);
  ASSERT_THAT(Heartbeat(*plane, beat), IsOk());
  // a and b beat on; c's lease expires, it joins again and beats: it is back.
  clock_.Advance(absl::Seconds(6));
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 20, 1.0)), IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("b/0", 20, 1.0)), IsOk());
  clock_.Advance(absl::Seconds(6));
  plane->Tick();
  ASSERT_EQ(plane->Status().leases_expired_total(), 1);
  ASSERT_THAT(Join(*plane, JoinAs("c", 0)), IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("c/0", 20, 1.0)), IsOk());
  // Now b's lease expires and the others finish: the run ends with b gone, c finished.
  clock_.Advance(absl::Seconds(6));
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 30, 1.0)), IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("c/0", 30, 1.0)), IsOk());
  clock_.Advance(absl::Seconds(6));
  plane->Tick();
  ASSERT_EQ(plane->Status().leases_expired_total(), 2);
  v1::HeartbeatRequest done = Beat("a/0", 40, 1.0);
  done.set_finished(true);
  ASSERT_THAT(Heartbeat(*plane, done), IsOk());
  done.set_worker_id("c/0");
  ASSERT_THAT(Heartbeat(*plane, done), IsOk());
  ASSERT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  const v1::RunInfo ended = plane->Run();
  std::map<std::string, std::string> left;
  for (const v1::MemberResult& r : ended.member_results()) left[r.worker_id()] = r.left_reason();
  EXPECT_EQ(left["a/0"], "");
  EXPECT_EQ(left["b/0"], "lease expired");
  EXPECT_EQ(left["c/0"], "");
}

// After the run's end, a new process that takes a member's name is not the run's member: the
// result says the one that was has gone; the same process joining again changes nothing.
TEST_F(ControlPlaneTest, ANewProcessOfAMembersNameAfterTheEndMarksTheMemberGone) {
  auto plane = Make();
  v1::JoinRequest a = JoinAs("a", 0);
  a.set_pid(1);
  v1::JoinRequest b = JoinAs("b", 0);
  b.set_pid(2);
  ASSERT_THAT(Join(*plane, a), IsOk());
  ASSERT_THAT(Join(*plane, b), IsOk());
  ASSERT_THAT(plane->StartRun(StartRequest(2)), IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 10, 1.0)), IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("b/0", 10, 1.0)), IsOk());
  ASSERT_THAT(plane->StopRun(v1::StopRunRequest()), IsOk());
  ASSERT_THAT(Join(*plane, a), IsOk());
  b.set_pid(3);
  ASSERT_THAT(Join(*plane, b), IsOk());
  const v1::RunInfo ended = plane->Run();
  std::map<std::string, std::string> left;
  for (const v1::MemberResult& r : ended.member_results()) left[r.worker_id()] = r.left_reason();
  EXPECT_EQ(left["a/0"], "");
  EXPECT_EQ(left["b/0"], "a new process took its name after the run ended");
}

// A worker that joined again during the run (a new generation) and had not reported since
// still gives its final report after the run ended.
TEST_F(ControlPlaneTest, AWorkerThatJoinedAgainDuringTheRunReportsAfterItsEnd) {
  auto plane = Make("");
  absl::StatusOr<v1::RunInfo> run = StartOneWorkerRun(*plane);
  ASSERT_THAT(run, IsOk());
  ASSERT_THAT(Heartbeat(*plane, Beat("a/0", 10, 2.0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(plane->CommitRound(run->run_id(), 1, 200, 200), IsOk());
  ASSERT_EQ(plane->Run().state(), v1::RUN_STATE_COMPLETED);
  v1::HeartbeatRequest last = Beat("a/0", 200, 0.5);
  last.set_finished(true);
  ASSERT_THAT(Heartbeat(*plane, last), IsOk());
  ASSERT_THAT(LeaveFinished(*plane, "a/0"), IsOk());
  const v1::RunInfo after = plane->Run();
  ASSERT_EQ(after.member_results_size(), 1);
  EXPECT_EQ(after.member_results(0).step(), 200);
  EXPECT_DOUBLE_EQ(after.member_results(0).loss(), 0.5);
  EXPECT_EQ(after.member_results(0).left_reason(), "finished");
}

// Finding 6 of issue 37: holding the run token is not enough to speak for another member.
TEST_F(ControlPlaneTest, NoMemberCanHeartbeatOrLeaveInAnothersName) {
  auto plane = Make("");
  ASSERT_THAT(Join(*plane, JoinAs("a", 0)), IsOk());
  ASSERT_THAT(Join(*plane, JoinAs("b", 0)), IsOk());
  v1::LeaveRequest leave;
  leave.set_worker_id("a/0");
  leave.set_member_credential(credentials_["b/0"]);
  EXPECT_THAT(plane->Leave(leave), StatusIs(absl::StatusCode::kPermissionDenied, "a/0"));
  v1::HeartbeatRequest beat = Beat("a/0", 10, 1.0);
  beat.set_finished(true);
  beat.set_member_credential(credentials_["b/0"]);
  EXPECT_THAT(plane->Heartbeat(beat),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential"));
  const v1::CoordinatorStatus status = plane->Status();
  ASSERT_EQ(status.members_size(), 2);
  EXPECT_EQ(status.members(0).step(), 0);
  EXPECT_FALSE(status.members(0).finished());
  EXPECT_THAT(Leave(*plane, leave),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential"));
  leave.clear_member_credential();
  EXPECT_THAT(Leave(*plane, leave), IsOk());
}

// Issue 50, finding 9: the run token admitted a Join in any node's name, so a token holder
// could take a live member's worker id (replacing it) or hold many identities. A coordinator
// that binds node names to keys admits a Join only with its node's key: the run token alone
// takes no seat, and one node's key takes no other node's.
TEST_F(ControlPlaneTest, WithNodeKeysAJoinNeedsItsNodesKey) {
  ControlPlane::Options options;
  options.clock = clock_.AsFunction();
  options.node_key_secret = "the operator's secret";
  std::unique_ptr<ControlPlane> plane = *ControlPlane::Create(options);
  v1::JoinRequest honest = JoinAs("a", 0);
  honest.set_node_key(NodeKey(options.node_key_secret, "a"));
  ASSERT_THAT(Join(*plane, honest), IsOk());
  const std::string credential = credentials_["a/0"];
  // An impostor with the run token only, or with another node's key, or a key of another secret.
  v1::JoinRequest impostor = JoinAs("a", 0);
  EXPECT_THAT(plane->Join(impostor),
              StatusIs(absl::StatusCode::kPermissionDenied, "node_key: required"));
  impostor.set_node_key(NodeKey(options.node_key_secret, "b"));
  EXPECT_THAT(plane->Join(impostor),
              StatusIs(absl::StatusCode::kPermissionDenied, "node_key: not the key of node \"a\""));
  impostor.set_node_key(NodeKey("a guess", "a"));
  EXPECT_THAT(plane->Join(impostor), StatusIs(absl::StatusCode::kPermissionDenied, "node_key"));
  // The member was not replaced: its credential still speaks for it.
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  beat.set_member_credential(credential);
  EXPECT_THAT(plane->Heartbeat(beat), IsOk());
  // Other nodes join with their own keys; a plane without a secret ignores the field.
  v1::JoinRequest other = JoinAs("b", 0);
  other.set_node_key(NodeKey(options.node_key_secret, "b"));
  EXPECT_THAT(plane->Join(other), IsOk());
  std::unique_ptr<ControlPlane> open = Make();
  EXPECT_THAT(open->Join(JoinAs("c", 0)), IsOk());
}

}  // namespace
}  // namespace localsgd
