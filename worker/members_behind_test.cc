#include "worker/members_behind.h"

#include <string>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

v1::RunInfo Ended(v1::RunState state = v1::RUN_STATE_COMPLETED) {
  v1::RunInfo run;
  run.set_state(state);
  run.set_global_step(600);
  return run;
}

void AddMember(v1::RunInfo& run, const std::string& id, int64_t step,
               const std::string& left = "") {
  v1::MemberResult* member = run.add_member_results();
  member->set_worker_id(id);
  member->set_step(step);
  member->set_left_reason(left);
}

TEST(MembersBehindTest, AMemberBelowTheRunsStepThatHasNotLeftIsBehind) {
  v1::RunInfo run = Ended();
  AddMember(run, "node-0/0", 600);
  AddMember(run, "node-1/0", 420);
  EXPECT_TRUE(MembersBehind(run, "node-0/0"));
  EXPECT_FALSE(MembersBehind(run, "node-1/0"));  // not others: itself
}

TEST(MembersBehindTest, EveryEndedStateCounts) {
  for (v1::RunState state :
       {v1::RUN_STATE_COMPLETED, v1::RUN_STATE_STOPPED, v1::RUN_STATE_FAILED}) {
    v1::RunInfo run = Ended(state);
    AddMember(run, "node-1/0", 0);
    EXPECT_TRUE(MembersBehind(run, "node-0/0")) << state;
  }
}

TEST(MembersBehindTest, MembersThatLeftOrHoldTheFinalStepAreNotWaitedFor) {
  v1::RunInfo run = Ended();
  AddMember(run, "node-1/0", 420, "failed: killed");
  AddMember(run, "node-2/0", 600);
  AddMember(run, "node-3/0", 640);  // trained past it (overlap), then took it
  EXPECT_FALSE(MembersBehind(run, "node-0/0"));
}

TEST(MembersBehindTest, ARunningRunHasNoneBehind) {
  for (v1::RunState state :
       {v1::RUN_STATE_RUNNING, v1::RUN_STATE_WAITING_FOR_WORKERS, v1::RUN_STATE_IDLE}) {
    v1::RunInfo run = Ended(state);
    AddMember(run, "node-1/0", 0);
    EXPECT_FALSE(MembersBehind(run, "node-0/0")) << state;
  }
}

}  // namespace
}  // namespace localsgd
