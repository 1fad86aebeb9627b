#include "coordinator/sharded_round.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/fake_clock.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::FakeClock;
using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using Phase = ShardedRound::Phase;

class ShardedRoundTest : public ::testing::Test {
 protected:
  // A round of `members` leaders (m0, m1, ...; all serve a data plane unless listed in
  // `no_address`) over `chunks` chunks of 256 values, the last one 100 values short.
  ShardedRound Make(int members, int chunks, int min_workers = 1, std::vector<int> no_address = {},
                    int64_t min_shard_values = 0, bool owners_hold_deltas = false,
                    RoundGrace grace = RoundGrace()) {
    std::vector<ShardedRound::Candidate> candidates;
    for (int i = 0; i < members; ++i) {
      const bool serves = std::find(no_address.begin(), no_address.end(), i) == no_address.end();
      candidates.push_back({absl::StrCat("m", i), 1, serves ? absl::StrCat("h:", i) : ""});
    }
    ShardedRound::Options options;
    options.number = 7;
    options.layout = ChunkLayout{int64_t{chunks} * 256 - 100, 256};
    options.opened = clock_.Now();
    options.deadline = absl::Seconds(10);
    options.min_workers = min_workers;
    options.min_shard_values = min_shard_values;
    options.owners_hold_deltas = owners_hold_deltas;
    options.grace = grace;
    return ShardedRound(options, std::move(candidates));
  }

  void ArriveAll(ShardedRound& round, int members) {
    for (int i = 0; i < members; ++i) {
      ASSERT_THAT(round.Arrive(absl::StrCat("m", i), 1.0 + i, 8 * (i + 1), clock_.Now()), IsOk());
    }
  }

  // The member delivers digests that agree with Reference's.
  absl::Status Deliver(ShardedRound& round, const std::string& member_id) {
    return round.Deliver(member_id, Reference(round), clock_.Now());
  }
  static std::vector<DigestPair> Reference(const ShardedRound& round) {
    std::vector<DigestPair> digests;
    for (size_t s = 0; s < round.shards().size(); ++s) digests.push_back({1000 + s, 2000 + s});
    return digests;
  }

  FakeClock clock_;
};

// A quorum of 2 of 4 in, the grace window (2 s) from the second arrival: then the round is laid
// out without the one still out, which is not held at fault; a member in before the window's
// end is in the round.
TEST_F(ShardedRoundTest, TheGraceWindowLaysOutWithoutTheLateOnesAfterAQuorum) {
  ShardedRound round = Make(4, 8, 1, {}, 0, false, RoundGrace(absl::Seconds(2), 0.5));
  ASSERT_THAT(round.Arrive("m0", 1, 8, clock_.Now()), IsOk());
  clock_.Advance(absl::Seconds(3));  // one alone is no quorum: no window yet
  round.Tick(clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kGathering);
  ASSERT_THAT(round.Arrive("m1", 1, 8, clock_.Now()), IsOk());
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(round.Arrive("m2", 1, 8, clock_.Now()), IsOk());
  clock_.Advance(absl::Seconds(1));
  round.Tick(clock_.Now());  // at the window's end, not past it
  EXPECT_EQ(round.phase(), Phase::kGathering);
  clock_.Advance(absl::Milliseconds(1));
  round.Tick(clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kExchanging);
  EXPECT_TRUE(round.TakeLaidOut());
  EXPECT_THAT(round.members(), ElementsAre("m0", "m1", "m2"));
  EXPECT_THAT(round.TakeDrops(),
              ElementsAre(Pair("m3",
                               "did not arrive within the grace window (2s after 2 of 4 "
                               "members)")));
  EXPECT_THAT(round.Faults(), IsEmpty());
  EXPECT_THAT(round.Arrive("m3", 1, 8, clock_.Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "was laid out without"));
}

// A leader starting up (not heard in the run yet) is not left out by the grace window: the
// round waits for it (up to the deadline).
TEST_F(ShardedRoundTest, TheGraceWindowWaitsForALeaderStartingUp) {
  ShardedRound::Options options;
  options.number = 7;
  options.layout = ChunkLayout{1000, 256};
  options.opened = clock_.Now();
  options.deadline = absl::Seconds(10);
  options.grace = RoundGrace(absl::Seconds(1), 0.5);
  ShardedRound round(options, {{"m0", 1, "h:0"}, {"m1", 1, "h:1"}, {"m2", 1, "h:2", false}});
  ASSERT_THAT(round.Arrive("m0", 1, 8, clock_.Now()), IsOk());
  ASSERT_THAT(round.Arrive("m1", 1, 8, clock_.Now()), IsOk());
  clock_.Advance(absl::Seconds(5));
  round.Tick(clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kGathering);
  ASSERT_THAT(round.Arrive("m2", 1, 8, clock_.Now()), IsOk());
  EXPECT_EQ(round.phase(), Phase::kExchanging);
  EXPECT_THAT(round.members(), ElementsAre("m0", "m1", "m2"));
}

TEST_F(ShardedRoundTest, LaysOutBalancedChunkAlignedRangesOnceEveryoneArrived) {
  ShardedRound round = Make(3, 10);
  ASSERT_THAT(round.Arrive("m0", 1, 8, clock_.Now()), IsOk());
  ASSERT_THAT(round.Arrive("m1", 2, 16, clock_.Now()), IsOk());
  EXPECT_EQ(round.phase(), Phase::kGathering);
  EXPECT_FALSE(round.TakeLaidOut());
  ASSERT_THAT(round.Arrive("m2", 3, 8, clock_.Now()), IsOk());
  EXPECT_EQ(round.phase(), Phase::kExchanging);
  EXPECT_TRUE(round.TakeLaidOut());
  EXPECT_FALSE(round.TakeLaidOut());  // once
  EXPECT_THAT(round.members(), ElementsAre("m0", "m1", "m2"));
  EXPECT_THAT(round.weights(), ElementsAre(1, 2, 3));
  ASSERT_EQ(round.shards().size(), 3u);
  // 10 chunks over 3 owners: 3, 3, 4, contiguous and covering every chunk once.
  EXPECT_EQ(round.shards()[0].begin_chunk, 0);
  EXPECT_EQ(round.shards()[0].end_chunk, 3);
  EXPECT_EQ(round.shards()[1].begin_chunk, 3);
  EXPECT_EQ(round.shards()[1].end_chunk, 6);
  EXPECT_EQ(round.shards()[2].begin_chunk, 6);
  EXPECT_EQ(round.shards()[2].end_chunk, 10);
  EXPECT_EQ(round.shards()[1].address, "h:1");
}

// The ring schedule needs 2 or more members, each owning one range (in any codec: sums travel
// encoded and are added to in fp32).
TEST_F(ShardedRoundTest, RingsOnlyWhenTwoOrMoreMembersOwnOneRangeEach) {
  ShardedRound three = Make(3, 10);
  ArriveAll(three, 3);
  EXPECT_TRUE(three.ring());
  ShardedRound two = Make(2, 10);
  ArriveAll(two, 2);
  EXPECT_TRUE(two.ring());
  ShardedRound one = Make(1, 10);
  ArriveAll(one, 1);
  EXPECT_FALSE(one.ring());
  ShardedRound few_chunks = Make(4, 2);  // two owners for four members
  ArriveAll(few_chunks, 4);
  EXPECT_FALSE(few_chunks.ring());
  ShardedRound small = Make(4, 8, 1, {}, 600);  // three owners
  ArriveAll(small, 4);
  EXPECT_FALSE(small.ring());
  ShardedRound no_data_plane = Make(4, 10, 1, {2});
  ArriveAll(no_data_plane, 4);
  EXPECT_FALSE(no_data_plane.ring());
  // Screening or a trimmed mean needs each member's delta at the owner, not a running sum.
  ShardedRound robust = Make(3, 10, 1, {}, 0, /*owners_hold_deltas=*/true);
  ArriveAll(robust, 3);
  EXPECT_FALSE(robust.ring());
}

TEST_F(ShardedRoundTest, MoreOwnersThanChunksLeavesSomeWithoutARange) {
  ShardedRound round = Make(4, 2);
  ArriveAll(round, 4);
  ASSERT_EQ(round.shards().size(), 2u);
  EXPECT_EQ(round.shards()[0].end_chunk - round.shards()[0].begin_chunk, 1);
  EXPECT_EQ(round.shards()[1].end_chunk, 2);
}

TEST_F(ShardedRoundTest, ASmallVectorHasFewerOwnersEachWithAtLeastTheMinimumShard) {
  // 8 chunks (1948 values) over 4 members: at least 600 values an owner leaves room for 3.
  ShardedRound round = Make(4, 8, 1, {}, 600);
  ArriveAll(round, 4);
  ASSERT_EQ(round.shards().size(), 3u);
  for (const ShardedRound::Shard& shard : round.shards()) {
    EXPECT_GE(shard.end_chunk - shard.begin_chunk, 2);
  }
  EXPECT_EQ(round.shards()[2].end_chunk, 8);
  EXPECT_THAT(round.members(), ElementsAre("m0", "m1", "m2", "m3"));  // m3 takes part
  // Below one minimum shard, one owner; a minimum of 0 (or 1 value) lets every member own.
  ShardedRound tiny = Make(4, 8, 1, {}, 5000);
  ArriveAll(tiny, 4);
  ASSERT_EQ(tiny.shards().size(), 1u);
  EXPECT_EQ(tiny.shards()[0].end_chunk, 8);
  ShardedRound every = Make(4, 8, 1, {}, 1);
  ArriveAll(every, 4);
  EXPECT_EQ(every.shards().size(), 4u);
}

// Every member computes the same outer step: when it overflows, they all deliver kNotFinite
// for the range, agree on it, and nothing commits.
TEST_F(ShardedRoundTest, AnUpdateTheMembersAgreeIsNotFiniteAbortsTheRound) {
  ShardedRound round = Make(2, 4);
  ArriveAll(round, 2);
  std::vector<DigestPair> overflowed = Reference(round);
  overflowed[1] = kNotFinite;
  ASSERT_THAT(round.Deliver("m0", overflowed, clock_.Now()), IsOk());
  ASSERT_THAT(round.Deliver("m1", overflowed, clock_.Now()), IsOk());
  ASSERT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_FALSE(round.Verify());
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(), HasSubstr("the update of range 1 (m1) overflows fp32"));
  EXPECT_THAT(round.Faults(), IsEmpty());  // nobody's fault
}

TEST_F(ShardedRoundTest, MembersWithoutADataPlaneTakePartButOwnNothing) {
  ShardedRound round = Make(3, 6, 1, {1});
  ArriveAll(round, 3);
  ASSERT_EQ(round.shards().size(), 2u);
  EXPECT_EQ(round.shards()[0].owner_id, "m0");
  EXPECT_EQ(round.shards()[1].owner_id, "m2");
  EXPECT_EQ(round.shards()[1].owner_slot, 2);
  EXPECT_THAT(round.members(), ElementsAre("m0", "m1", "m2"));
}

TEST_F(ShardedRoundTest, CommitsOnlyWhenEveryChunkIsInAndEveryMemberDelivered) {
  ShardedRound round = Make(2, 5);
  ArriveAll(round, 2);
  EXPECT_EQ(round.phase(), Phase::kExchanging);
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  EXPECT_EQ(round.phase(), Phase::kExchanging);
  clock_.Advance(absl::Milliseconds(30));
  ASSERT_THAT(Deliver(round, "m1"), IsOk());
  EXPECT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_THAT(round.Included(), ElementsAre("m0", "m1"));
  EXPECT_EQ(round.Step(0), 16);
  EXPECT_EQ(round.SlowestWait(), absl::Milliseconds(30));
}

TEST_F(ShardedRoundTest, ACopyThatDiffersAbortsTheRoundNamingItsMember) {
  ShardedRound round = Make(3, 6);
  ArriveAll(round, 3);
  ASSERT_EQ(round.shards().size(), 3u);
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  std::vector<DigestPair> differs = Reference(round);
  differs[2].with_momentum ^= 1;
  ASSERT_THAT(round.Deliver("m1", differs, clock_.Now()), IsOk());
  ASSERT_THAT(Deliver(round, "m2"), IsOk());
  ASSERT_EQ(round.phase(), Phase::kCommitted);  // complete: the digests are checked now
  EXPECT_FALSE(round.Verify());
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(), HasSubstr("the digests of m1 (range 2) differ"));
  EXPECT_THAT(round.diverged(), ElementsAre("m1"));
  // Held against m1 alone (Suspensions).
  std::vector<std::string> blamed;
  for (const RoundFault& fault : round.Faults()) blamed.push_back(fault.member_id);
  EXPECT_THAT(blamed, ElementsAre("m1"));

  // Agreeing copies commit.
  ShardedRound agreed = Make(3, 6);
  ArriveAll(agreed, 3);
  for (const char* id : {"m0", "m1", "m2"}) ASSERT_THAT(Deliver(agreed, id), IsOk());
  EXPECT_TRUE(agreed.Verify());
  EXPECT_EQ(agreed.phase(), Phase::kCommitted);
  EXPECT_THAT(agreed.diverged(), IsEmpty());
  EXPECT_EQ(agreed.agreed(), Reference(agreed));

  // The values' digest counts on its own: a copy whose momentum digest agrees but not its
  // values' differs.
  ShardedRound values_differ = Make(2, 4);
  ArriveAll(values_differ, 2);
  ASSERT_THAT(Deliver(values_differ, "m0"), IsOk());
  std::vector<DigestPair> values_only = Reference(values_differ);
  values_only[0].values ^= 1;
  ASSERT_THAT(values_differ.Deliver("m1", values_only, clock_.Now()), IsOk());
  EXPECT_FALSE(values_differ.Verify());
  // Two members, no majority: range 0's owner (m0) breaks the tie.
  EXPECT_THAT(values_differ.diverged(), ElementsAre("m1"));

  // A tie goes to the range's owner: m1 owns range 1, and m0 is the one that differs there.
  ShardedRound tie = Make(2, 4);
  ArriveAll(tie, 2);
  std::vector<DigestPair> others = Reference(tie);
  others[1].with_momentum ^= 1;
  ASSERT_THAT(tie.Deliver("m0", others, clock_.Now()), IsOk());
  ASSERT_THAT(Deliver(tie, "m1"), IsOk());
  EXPECT_FALSE(tie.Verify());
  EXPECT_THAT(tie.diverged(), ElementsAre("m0"));
  EXPECT_THAT(tie.abort_reason(), HasSubstr("the digests of m0 (range 1) differ"));
}

// Without a majority and without the range's owner, nobody can say which copy stands.
TEST_F(ShardedRoundTest, ATieWithoutTheRangesOwnerAbortsTheRound) {
  // m0 owns range 0; m2, with no data plane, owns nothing; m1 owns range 1 and leaves after
  // every other member delivered.
  ShardedRound round = Make(3, 4, 1, {2});
  ArriveAll(round, 3);
  ASSERT_EQ(round.shards().size(), 2u);
  std::vector<DigestPair> others = Reference(round);
  others[1].values ^= 1;
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  ASSERT_THAT(round.Deliver("m2", others, clock_.Now()), IsOk());
  round.Leave("m1", "stream broke", clock_.Now());
  ASSERT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_FALSE(round.Verify());
  EXPECT_THAT(round.abort_reason(), HasSubstr("no majority of the members agrees on range 1 (m1)"));
}

// Issue 50, finding 3: a member refused for bringing another fragment than the round's (a
// step apart after a failover) sits the round out but is not held against it: two nodes out
// of phase suspended each other.
TEST_F(ShardedRoundTest, AnExcusedMemberIsDroppedButNotHeldAgainstIt) {
  ShardedRound round = Make(3, 6);
  round.Leave("m2", "refused: fragment: 1, round 7 carries fragment 0", clock_.Now(),
              /*excused=*/true);
  round.Leave("m1", "stream ended", clock_.Now());
  std::vector<std::string> dropped;
  for (const auto& [id, reason] : round.dropped()) dropped.push_back(id);
  EXPECT_THAT(dropped, ElementsAre("m2", "m1"));
  std::vector<std::string> faulted;
  for (const RoundFault& fault : round.Faults()) faulted.push_back(fault.member_id);
  EXPECT_THAT(faulted, ElementsAre("m1"));
}

TEST_F(ShardedRoundTest, DigestsMustBeOnePerRange) {
  ShardedRound round = Make(2, 4);
  ArriveAll(round, 2);
  EXPECT_THAT(round.Deliver("m0", {}, clock_.Now()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "delivered.range_digests: 0 digests for 2 ranges"));
  EXPECT_THAT(round.Deliver("m0", {{1, 1}, {2, 2}, {3, 3}}, clock_.Now()),
              StatusIs(absl::StatusCode::kInvalidArgument, "3 digests for 2 ranges"));
  EXPECT_THAT(Deliver(round, "m0"), IsOk());
}

TEST_F(ShardedRoundTest, DeliveriesOutsideTheExchangeAreRefused) {
  ShardedRound round = Make(2, 4);
  EXPECT_THAT(Deliver(round, "m0"), StatusIs(absl::StatusCode::kFailedPrecondition, "not"));
  ArriveAll(round, 2);
  EXPECT_THAT(Deliver(round, "m9"), StatusIs(absl::StatusCode::kFailedPrecondition, ""));
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  EXPECT_THAT(Deliver(round, "m0"), StatusIs(absl::StatusCode::kInvalidArgument, "twice"));
}

TEST_F(ShardedRoundTest, LateAndUnexpectedMembersAreToldSo) {
  ShardedRound round = Make(2, 4);
  EXPECT_THAT(round.Arrive("stranger", 1, 0, clock_.Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "opened without member stranger"));
  ASSERT_THAT(round.Arrive("m0", 1, 0, clock_.Now()), IsOk());
  EXPECT_THAT(round.Arrive("m0", 1, 0, clock_.Now()),
              StatusIs(absl::StatusCode::kAlreadyExists, "already"));
  clock_.Advance(absl::Seconds(11));
  round.Tick(clock_.Now());  // m1 never came: laid out without it
  EXPECT_EQ(round.phase(), Phase::kExchanging);
  EXPECT_THAT(round.members(), ElementsAre("m0"));
  EXPECT_THAT(round.TakeDrops(), ElementsAre(Pair("m1", ::testing::HasSubstr("did not arrive"))));
  ASSERT_EQ(round.Faults().size(), 1u);
  EXPECT_TRUE(round.Faults()[0].silent);  // it alone did not arrive
  EXPECT_THAT(round.Arrive("m1", 1, 0, clock_.Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "laid out without member m1"));
}

TEST_F(ShardedRoundTest, AMemberLeavingWhileGatheringIsLeftOutAtOnce) {
  ShardedRound round = Make(3, 4);
  ASSERT_THAT(round.Arrive("m0", 1, 0, clock_.Now()), IsOk());
  ASSERT_THAT(round.Arrive("m1", 1, 0, clock_.Now()), IsOk());
  round.Leave("m2", "lease expired", clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kExchanging);  // no need to wait for the deadline
  EXPECT_THAT(round.members(), ElementsAre("m0", "m1"));
}

TEST_F(ShardedRoundTest, AnOwnerLeavingBeforeEveryMemberHeldItsRangeAbortsTheRound) {
  ShardedRound round = Make(3, 6);
  ArriveAll(round, 3);
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  round.Leave("m1", "stream broke", clock_.Now());  // m2 has not delivered
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(),
              ::testing::HasSubstr("owner m1 left before every member held its range"));
}

TEST_F(ShardedRoundTest, AnOwnerLeavingOnceTheOthersHeldItsRangeIsOnlyDropped) {
  ShardedRound round = Make(3, 6);
  ArriveAll(round, 3);
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  ASSERT_THAT(Deliver(round, "m2"), IsOk());
  round.Leave("m1", "stream broke", clock_.Now());
  EXPECT_THAT(round.TakeDrops(), ElementsAre(Pair("m1", "stream broke")));
  EXPECT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_TRUE(round.Verify());
  EXPECT_THAT(round.Included(), ElementsAre("m0", "m2"));
  EXPECT_EQ(round.Step(0), 24);
}

TEST_F(ShardedRoundTest, AnOwnerAMemberCannotReachAbortsTheRoundNamingBoth) {
  ShardedRound round = Make(3, 6);
  ArriveAll(round, 3);
  EXPECT_THAT(round.Unreachable("m0", "nobody", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, "owns no range"));
  ASSERT_THAT(round.Unreachable("m0", "m2", "connection refused"), IsOk());
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_EQ(round.abort_reason(), "m0 could not exchange with owner m2: connection refused");
}

TEST_F(ShardedRoundTest, AStalledOwnerAbortsAtTheDeadlineCountedFromTheLayout) {
  ShardedRound round = Make(2, 4);
  clock_.Advance(absl::Seconds(9));  // gathering took most of the deadline
  ArriveAll(round, 2);
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  clock_.Advance(absl::Seconds(9));
  round.Tick(clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kExchanging);  // 9 s after the layout: still in time
  clock_.Advance(absl::Seconds(2));
  round.Tick(clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(), ::testing::HasSubstr("owner m1 did not average its range"));
}

TEST_F(ShardedRoundTest, AMemberThatMissesTheUpdateIsDroppedAtTheDeadline) {
  ShardedRound round = Make(3, 3, 1, {1});  // m1 owns nothing
  ArriveAll(round, 3);
  ASSERT_THAT(Deliver(round, "m0"), IsOk());
  ASSERT_THAT(Deliver(round, "m2"), IsOk());
  clock_.Advance(absl::Seconds(11));
  round.Tick(clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_THAT(round.Included(), ElementsAre("m0", "m2"));
  EXPECT_THAT(round.dropped(), ElementsAre(Pair("m1", ::testing::HasSubstr("whole update"))));
}

TEST_F(ShardedRoundTest, QuorumIsCheckedInEveryPhase) {
  ShardedRound empty = Make(0, 4);
  EXPECT_EQ(empty.phase(), Phase::kAborted);
  ShardedRound alone = Make(1, 4, /*min_workers=*/2);
  EXPECT_EQ(alone.phase(), Phase::kAborted);
  EXPECT_THAT(alone.Arrive("m0", 1, 0, clock_.Now()),
              StatusIs(absl::StatusCode::kAborted, "quorum lost: 1 of min_workers 2"));
  ShardedRound round = Make(3, 6, /*min_workers=*/3, {2});  // m2 owns nothing
  ArriveAll(round, 3);
  round.Leave("m2", "left", clock_.Now());
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(), ::testing::HasSubstr("quorum lost: 2 of min_workers 3"));
}

TEST_F(ShardedRoundTest, NoDataPlaneAnywhereAbortsWithAHint) {
  ShardedRound round = Make(2, 4, 1, {0, 1});
  ArriveAll(round, 2);
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(), ::testing::HasSubstr("--data_address"));
  EXPECT_FALSE(round.TakeLaidOut());
}

}  // namespace
}  // namespace localsgd
