#include "coordinator/membership.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/fake_clock.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::FakeClock;
using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

v1::JoinRequest JoinAs(const std::string& node, int rank, int world = 2) {
  v1::JoinRequest request;
  request.mutable_identity()->set_node_name(node);
  request.mutable_identity()->set_local_rank(rank);
  request.mutable_identity()->set_local_world_size(world);
  request.set_hostname("host-" + node);
  request.set_pid(100 + rank);
  return request;
}

v1::HeartbeatRequest Beat(const std::string& id, int64_t step = 1) {
  v1::HeartbeatRequest request;
  request.set_worker_id(id);
  request.set_step(step);
  request.set_loss(0.5);
  request.set_samples_per_second(1000);
  return request;
}

class MembershipTest : public ::testing::Test {
 protected:
  Membership::Options Opts() {
    Membership::Options options;
    options.lease_timeout = absl::Seconds(10);
    return options;
  }
  FakeClock clock_;
  Membership membership_{Opts(), clock_.AsFunction()};
};

TEST_F(MembershipTest, JoinAssignsIdsAndOrders) {
  auto b = membership_.Join(JoinAs("node-b", 0));
  auto a = membership_.Join(JoinAs("node-a", 1));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(a->worker_id, "node-a/1");
  EXPECT_EQ(a->generation, 1);
  EXPECT_EQ(a->join_time, clock_.Now());
  auto members = membership_.Members();
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].worker_id, "node-a/1");
  EXPECT_EQ(members[1].worker_id, "node-b/0");
}

TEST_F(MembershipTest, LeaseExpiresWithoutHeartbeat) {
  ASSERT_THAT(membership_.Join(JoinAs("n", 0)), IsOk());
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(membership_.ExpireLeases().empty());  // exactly at the timeout: still alive
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(membership_.ExpireLeases(), ::testing::ElementsAre("n/0"));
  EXPECT_EQ(membership_.size(), 0);
  EXPECT_THAT(membership_.Heartbeat(Beat("n/0")), StatusIs(absl::StatusCode::kNotFound, "n/0"));
}

TEST_F(MembershipTest, HeartbeatRenewsTheLease) {
  ASSERT_THAT(membership_.Join(JoinAs("n", 0)), IsOk());
  ASSERT_THAT(membership_.Join(JoinAs("n", 1)), IsOk());
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(8));
    ASSERT_THAT(membership_.Heartbeat(Beat("n/0", i)), IsOk());
    // n/1 only renews on the first beat.
    if (i == 0) {
      ASSERT_THAT(membership_.Heartbeat(Beat("n/1", i)), IsOk());
    }
    auto expired = membership_.ExpireLeases();
    if (i == 2) {  // 16 s after its last beat
      EXPECT_THAT(expired, ::testing::ElementsAre("n/1"));
    } else {
      EXPECT_TRUE(expired.empty());
    }
  }
  const Member* member = membership_.Find("n/0");
  ASSERT_NE(member, nullptr);
  EXPECT_EQ(member->step, 4);
  EXPECT_DOUBLE_EQ(member->loss, 0.5);
  EXPECT_DOUBLE_EQ(member->samples_per_second, 1000);
  EXPECT_EQ(member->last_seen, clock_.Now());
}

TEST_F(MembershipTest, RejoinGetsTheSameSlotAndANewGeneration) {
  auto first = membership_.Join(JoinAs("n", 0));
  clock_.Advance(absl::Seconds(3));
  auto again = membership_.Join(JoinAs("n", 0));  // a retried or restarted worker
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->worker_id, first->worker_id);
  EXPECT_EQ(again->generation, 2);
  EXPECT_EQ(again->join_time, first->join_time);
  EXPECT_EQ(membership_.size(), 1);

  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(membership_.ExpireLeases().size(), 1u);
  auto after_expiry = membership_.Join(JoinAs("n", 0));
  ASSERT_THAT(after_expiry, IsOk());
  EXPECT_EQ(after_expiry->worker_id, "n/0");
  EXPECT_EQ(after_expiry->generation, 3);
  EXPECT_EQ(membership_.size(), 1);
}

TEST_F(MembershipTest, LeaveRemovesAndUnknownIsNotFound) {
  ASSERT_THAT(membership_.Join(JoinAs("n", 0)), IsOk());
  EXPECT_THAT(membership_.Leave("n/0"), IsOk());
  EXPECT_THAT(membership_.Leave("n/0"), StatusIs(absl::StatusCode::kNotFound, "n/0"));
  EXPECT_THAT(membership_.Leave(""), StatusIs(absl::StatusCode::kInvalidArgument, "worker_id"));
  EXPECT_EQ(membership_.size(), 0);
}

TEST_F(MembershipTest, BadIdentitiesNameTheField) {
  v1::JoinRequest no_identity;
  EXPECT_THAT(membership_.Join(no_identity),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity"));
  EXPECT_THAT(membership_.Join(JoinAs("", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.node_name"));
  EXPECT_THAT(membership_.Join(JoinAs("a/b", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.node_name"));
  EXPECT_THAT(membership_.Join(JoinAs(std::string(129, 'x'), 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.node_name"));
  EXPECT_THAT(membership_.Join(JoinAs("n", 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.local_rank"));
  EXPECT_THAT(membership_.Join(JoinAs("n", -1, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.local_rank"));
  EXPECT_THAT(membership_.Join(JoinAs("n", 0, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.local_world_size"));
  v1::JoinRequest bad_pid = JoinAs("n", 0);
  bad_pid.set_pid(-4);
  EXPECT_THAT(membership_.Join(bad_pid), StatusIs(absl::StatusCode::kInvalidArgument, "pid"));
  EXPECT_EQ(membership_.size(), 0);
}

TEST_F(MembershipTest, WorldSizeMustAgreeWithinANode) {
  ASSERT_THAT(membership_.Join(JoinAs("n", 0, 2)), IsOk());
  EXPECT_THAT(membership_.Join(JoinAs("n", 1, 4)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "local_world_size"));
  // The same worker may change its own world size (a restarted single-rank node).
  EXPECT_THAT(membership_.Join(JoinAs("n", 0, 4)), IsOk());
}

TEST_F(MembershipTest, BadHeartbeatsChangeNothing) {
  ASSERT_THAT(membership_.Join(JoinAs("n", 0)), IsOk());
  EXPECT_THAT(membership_.Heartbeat(Beat("n/0", -1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "step"));
  v1::HeartbeatRequest bad_rate = Beat("n/0", 5);
  bad_rate.set_samples_per_second(-1);
  EXPECT_THAT(membership_.Heartbeat(bad_rate),
              StatusIs(absl::StatusCode::kInvalidArgument, "samples_per_second"));
  EXPECT_THAT(membership_.Heartbeat(Beat("", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "worker_id"));
  EXPECT_EQ(membership_.Find("n/0")->step, 0);
}

TEST(MembershipLimitTest, FullMembershipIsResourceExhausted) {
  FakeClock clock;
  Membership::Options options;
  options.max_members = 2;
  Membership membership(options, clock.AsFunction());
  ASSERT_THAT(membership.Join(JoinAs("a", 0, 1)), IsOk());
  ASSERT_THAT(membership.Join(JoinAs("b", 0, 1)), IsOk());
  EXPECT_THAT(membership.Join(JoinAs("c", 0, 1)),
              StatusIs(absl::StatusCode::kResourceExhausted, "full"));
  EXPECT_THAT(membership.Join(JoinAs("a", 0, 1)), IsOk());  // an existing slot still rejoins
}

}  // namespace
}  // namespace localsgd
