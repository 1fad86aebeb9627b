#include "coordinator/membership.h"

#include <map>
#include <string>

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

class MembershipTest : public ::testing::Test {
 protected:
  Membership::Options Opts() {
    Membership::Options options;
    options.lease_timeout = absl::Seconds(10);
    return options;
  }
  // Joins and keeps the credential for the member's later calls.
  absl::StatusOr<Member> Join(const v1::JoinRequest& request) {
    absl::StatusOr<Membership::Joined> joined = membership_.Join(request);
    if (!joined.ok()) return joined.status();
    credentials_[joined->member.worker_id] = joined->credential;
    return joined->member;
  }
  // A heartbeat of `id` with its credential.
  v1::HeartbeatRequest Beat(const std::string& id, int64_t step = 1) {
    v1::HeartbeatRequest request;
    request.set_worker_id(id);
    request.set_member_credential(credentials_[id]);
    request.set_step(step);
    request.set_loss(0.5);
    request.set_samples_per_second(1000);
    return request;
  }
  absl::Status Leave(const std::string& id) { return membership_.Leave(id, credentials_[id]); }

  FakeClock clock_;
  Membership membership_{Opts(), clock_.AsFunction()};
  std::map<std::string, std::string> credentials_;
};

TEST_F(MembershipTest, JoinAssignsIdsAndOrders) {
  auto b = Join(JoinAs("node-b", 0));
  auto a = Join(JoinAs("node-a", 1));
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
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(membership_.ExpireLeases().empty());  // exactly at the timeout: still alive
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(membership_.ExpireLeases(), ::testing::ElementsAre("n/0"));
  EXPECT_EQ(membership_.size(), 0);
  EXPECT_THAT(membership_.Heartbeat(Beat("n/0")), StatusIs(absl::StatusCode::kNotFound, "n/0"));
}

TEST_F(MembershipTest, HeartbeatRenewsTheLease) {
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());
  ASSERT_THAT(Join(JoinAs("n", 1)), IsOk());
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
  auto first = Join(JoinAs("n", 0));
  clock_.Advance(absl::Seconds(3));
  auto again = Join(JoinAs("n", 0));  // a retried or restarted worker
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->worker_id, first->worker_id);
  EXPECT_EQ(again->generation, 2);
  EXPECT_EQ(again->join_time, first->join_time);
  EXPECT_EQ(membership_.size(), 1);

  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(membership_.ExpireLeases().size(), 1u);
  auto after_expiry = Join(JoinAs("n", 0));
  ASSERT_THAT(after_expiry, IsOk());
  EXPECT_EQ(after_expiry->worker_id, "n/0");
  EXPECT_EQ(after_expiry->generation, 3);
  EXPECT_EQ(membership_.size(), 1);
}

TEST_F(MembershipTest, LeaveRemovesAndUnknownIsNotFound) {
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());
  EXPECT_THAT(Leave("n/0"), IsOk());
  EXPECT_THAT(Leave("n/0"), StatusIs(absl::StatusCode::kNotFound, "n/0"));
  EXPECT_THAT(Leave(""), StatusIs(absl::StatusCode::kInvalidArgument, "worker_id"));
  EXPECT_EQ(membership_.size(), 0);
}

TEST_F(MembershipTest, BadIdentitiesNameTheField) {
  v1::JoinRequest no_identity;
  EXPECT_THAT(Join(no_identity), StatusIs(absl::StatusCode::kInvalidArgument, "identity"));
  EXPECT_THAT(Join(JoinAs("", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.node_name"));
  EXPECT_THAT(Join(JoinAs("a/b", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.node_name"));
  EXPECT_THAT(Join(JoinAs(std::string(129, 'x'), 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.node_name"));
  EXPECT_THAT(Join(JoinAs("n", 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.local_rank"));
  EXPECT_THAT(Join(JoinAs("n", -1, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.local_rank"));
  EXPECT_THAT(Join(JoinAs("n", 0, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, "identity.local_world_size"));
  v1::JoinRequest bad_pid = JoinAs("n", 0);
  bad_pid.set_pid(-4);
  EXPECT_THAT(Join(bad_pid), StatusIs(absl::StatusCode::kInvalidArgument, "pid"));
  EXPECT_EQ(membership_.size(), 0);
}

TEST_F(MembershipTest, WorldSizeMustAgreeWithinANode) {
  ASSERT_THAT(Join(JoinAs("n", 0, 2)), IsOk());
  EXPECT_THAT(Join(JoinAs("n", 1, 4)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "local_world_size"));
  // The same worker may change its own world size (a restarted single-rank node).
  EXPECT_THAT(Join(JoinAs("n", 0, 4)), IsOk());
}

TEST_F(MembershipTest, BadHeartbeatsChangeNothing) {
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());
  EXPECT_THAT(membership_.Heartbeat(Beat("n/0", -1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "step"));
  v1::HeartbeatRequest bad_rate = Beat("n/0", 5);
  bad_rate.set_samples_per_second(-1);
  EXPECT_THAT(membership_.Heartbeat(bad_rate),
              StatusIs(absl::StatusCode::kInvalidArgument, "samples_per_second"));
  EXPECT_THAT(membership_.Heartbeat(Beat("", 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, "worker_id"));
  for (int64_t unsynced : {-1, 6}) {
    v1::HeartbeatRequest bad_unsynced = Beat("n/0", 5);
    bad_unsynced.set_unsynced_steps(unsynced);
    EXPECT_THAT(membership_.Heartbeat(bad_unsynced),
                StatusIs(absl::StatusCode::kInvalidArgument, "unsynced_steps"));
  }
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

// Finding 6 of issue 37: only the generation that joined last speaks for a member.
TEST_F(MembershipTest, CallsInAMembersNameNeedItsLatestCredential) {
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());
  ASSERT_THAT(Join(JoinAs("m", 0)), IsOk());
  v1::HeartbeatRequest without = Beat("n/0");
  without.clear_member_credential();
  EXPECT_THAT(membership_.Heartbeat(without),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential: required"));
  v1::HeartbeatRequest others = Beat("n/0");
  others.set_member_credential(credentials_["m/0"]);
  EXPECT_THAT(membership_.Heartbeat(others),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential"));
  EXPECT_THAT(membership_.Leave("n/0", credentials_["m/0"]),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential"));
  EXPECT_EQ(membership_.size(), 2);

  const std::string first = credentials_["n/0"];
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());  // started again
  EXPECT_NE(credentials_["n/0"], first);
  EXPECT_THAT(membership_.Authenticate("n/0", first),
              StatusIs(absl::StatusCode::kPermissionDenied, "generation 2"));
  EXPECT_THAT(membership_.Authenticate("n/0", credentials_["n/0"]), IsOk());
  EXPECT_THAT(membership_.Authenticate("x/0", first), StatusIs(absl::StatusCode::kNotFound, "x/0"));
  EXPECT_THAT(membership_.Heartbeat(Beat("n/0")), IsOk());
  EXPECT_THAT(Leave("n/0"), IsOk());
}

TEST_F(MembershipTest, ARestoredMemberKeepsItsCredential) {
  ASSERT_THAT(Join(JoinAs("n", 0)), IsOk());
  const Member* saved = membership_.Find("n/0");
  v1::MemberStatus status;
  *status.mutable_identity() = saved->identity;
  status.set_generation(saved->generation);
  Membership restored(Opts(), clock_.AsFunction());
  ASSERT_THAT(restored.Restore(status, saved->credential_digest), IsOk());
  EXPECT_THAT(restored.Authenticate("n/0", credentials_["n/0"]), IsOk());
  EXPECT_THAT(restored.Authenticate("n/0", saved->credential_digest),
              StatusIs(absl::StatusCode::kPermissionDenied, "member_credential"));
}

}  // namespace
}  // namespace localsgd
