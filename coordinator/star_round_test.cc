// The star round's decisions with a fake clock: deadline, quorum, screening, commit.
#include "coordinator/star_round.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/fake_clock.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::FakeClock;
using ::localsgd::testing::IsOkAndHolds;
using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using Phase = StarRound::Phase;

class StarRoundTest : public ::testing::Test {
 protected:
  // A round of `members` leaders m0, m1, ... of one worker each, a 10 s deadline.
  StarRound Make(int members, int min_workers = 1, RoundGrace grace = RoundGrace()) {
    std::vector<StarRound::Candidate> candidates;
    for (int i = 0; i < members; ++i) candidates.push_back({absl::StrCat("m", i), 1});
    for (int i = 0; i < members; ++i) live_.push_back(absl::StrCat("m", i));
    StarRound::Options options;
    options.number = 3;
    options.opened = clock_.Now();
    options.deadline = absl::Seconds(10);
    options.min_workers = min_workers;
    options.grace = grace;
    return StarRound(options, std::move(candidates));
  }

  FakeClock clock_;
  std::vector<std::string> live_;
};

TEST_F(StarRoundTest, CommitsOnceAveragedWithTheStepOfItsMembersAndTheirSlowestWait) {
  StarRound round = Make(2);
  EXPECT_THAT(round.Arrive("m1", 16, 1, clock_.Now()), IsOkAndHolds(1));
  EXPECT_THAT(round.Arrive("m0", 8, 1, clock_.Now()), IsOkAndHolds(0));
  EXPECT_THAT(round.Arrive("m0", 8, 1, clock_.Now()),
              StatusIs(absl::StatusCode::kAlreadyExists, "already"));
  EXPECT_THAT(round.Arrive("stranger", 8, 1, clock_.Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "opened without member stranger"));
  round.Delivered(0, clock_.Now());
  clock_.Advance(absl::Seconds(2));
  round.Delivered(1, clock_.Now());
  round.Tick(clock_.Now(), live_);
  EXPECT_EQ(round.phase(), Phase::kOpen);
  round.Averaged();
  EXPECT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_THAT(round.Included(), ElementsAre("m0", "m1"));
  EXPECT_EQ(round.Step(0), 16);
  EXPECT_EQ(round.Step(100), 100);
  EXPECT_EQ(round.SlowestWait(), absl::Seconds(2));
  EXPECT_THAT(round.TakeDrops(), IsEmpty());
}

TEST_F(StarRoundTest, TheDeadlineDropsWhoHasNotDeliveredAndTheRoundGoesOnWithoutIt) {
  StarRound round = Make(3);
  ASSERT_THAT(round.Arrive("m0", 8, 1, clock_.Now()), IsOkAndHolds(0));
  ASSERT_THAT(round.Arrive("m1", 8, 1, clock_.Now()), IsOkAndHolds(1));  // arrives, never delivers
  round.Delivered(0, clock_.Now());                                      // m2 never comes
  clock_.Advance(absl::Seconds(10));
  round.Tick(clock_.Now(), live_);
  EXPECT_THAT(round.TakeDrops(), IsEmpty());  // at the deadline, not yet past it
  clock_.Advance(absl::Milliseconds(1));
  round.Tick(clock_.Now(), live_);
  std::vector<StarRound::Drop> drops = round.TakeDrops();
  ASSERT_EQ(drops.size(), 2u);
  EXPECT_EQ(drops[0].slot, 1);
  EXPECT_EQ(drops[1].slot, 2);
  EXPECT_THAT(drops[0].status, StatusIs(absl::StatusCode::kDeadlineExceeded, ""));
  EXPECT_THAT(round.dropped(), ElementsAre(Pair("m1", "missed the round deadline (10 s)"),
                                           Pair("m2", "missed the round deadline (10 s)")));
  // m2 alone never arrived: silent (one such round suspends it); m1 arrived.
  std::vector<RoundFault> faults = round.Faults();
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_FALSE(faults[0].silent);
  EXPECT_TRUE(faults[1].silent);
  EXPECT_THAT(round.Arrive("m2", 8, 1, clock_.Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "was dropped from round 3"));
  EXPECT_EQ(round.phase(), Phase::kOpen);
  round.Averaged();
  EXPECT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_THAT(round.Included(), ElementsAre("m0"));
  EXPECT_THAT(round.Present(), ElementsAre("m0"));
}

// With a grace window of 1 s after 2 of 3: the one that has not arrived is left out, not held at
// fault; one that arrived but is slow to deliver stays until the deadline.
TEST_F(StarRoundTest, TheGraceWindowDropsWhoHasNotArrivedAfterAQuorum) {
  StarRound round = Make(3, 1, RoundGrace(absl::Seconds(1), 0.5));
  ASSERT_THAT(round.Arrive("m0", 8, 1, clock_.Now()), IsOkAndHolds(0));
  clock_.Advance(absl::Seconds(4));
  round.Tick(clock_.Now(), live_);
  EXPECT_THAT(round.TakeDrops(), IsEmpty());  // no quorum yet
  ASSERT_THAT(round.Arrive("m1", 8, 1, clock_.Now()), IsOkAndHolds(1));
  clock_.Advance(absl::Seconds(1));
  round.Tick(clock_.Now(), live_);
  EXPECT_THAT(round.TakeDrops(), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  round.Tick(clock_.Now(), live_);
  std::vector<StarRound::Drop> drops = round.TakeDrops();
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].slot, 2);
  EXPECT_THAT(round.dropped(),
              ElementsAre(Pair("m2",
                               "did not arrive within the grace window (1s after 2 of 3 "
                               "members)")));
  EXPECT_THAT(round.Faults(), IsEmpty());
  EXPECT_EQ(round.phase(), Phase::kOpen);
  round.Averaged();
  EXPECT_THAT(round.Included(), ElementsAre("m0", "m1"));
}

// Two that never arrive: neither is silent (the round did not wait for one member alone).
TEST_F(StarRoundTest, MembersMissingTogetherAreNotSilent) {
  StarRound round = Make(3);
  ASSERT_THAT(round.Arrive("m0", 8, 1, clock_.Now()), IsOkAndHolds(0));
  round.Delivered(0, clock_.Now());
  clock_.Advance(absl::Seconds(11));
  round.Tick(clock_.Now(), live_);
  std::vector<RoundFault> faults = round.Faults();
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_FALSE(faults[0].silent);
  EXPECT_FALSE(faults[1].silent);
}

TEST_F(StarRoundTest, LosingTheQuorumAbortsAndNothingCommitsAfterIt) {
  StarRound round = Make(3, /*min_workers=*/3);
  ASSERT_THAT(round.Arrive("m0", 8, 1, clock_.Now()), IsOkAndHolds(0));
  ASSERT_THAT(round.Arrive("m1", 8, 1, clock_.Now()), IsOkAndHolds(1));
  ASSERT_THAT(round.Arrive("m2", 8, 1, clock_.Now()), IsOkAndHolds(2));
  clock_.Advance(absl::Seconds(1));
  live_.erase(live_.begin() + 1);  // m1's lease expired
  round.Tick(clock_.Now(), live_);
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_EQ(round.abort_reason(), "quorum lost: 2 of min_workers 3 left");
  std::vector<StarRound::Drop> drops = round.TakeDrops();
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(drops[0].reason, "lease expired or left");
  EXPECT_THAT(drops[0].status, StatusIs(absl::StatusCode::kUnavailable, ""));
  round.Averaged();
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.Arrive("m1", 8, 1, clock_.Now()),
              StatusIs(absl::StatusCode::kAborted, "quorum lost"));
}

TEST_F(StarRoundTest, AHeaderStandingForFewerWorkersCanLoseTheQuorum) {
  StarRound round = Make(2, /*min_workers=*/2);
  EXPECT_EQ(round.phase(), Phase::kOpen);
  ASSERT_THAT(round.Arrive("m0", 8, 0, clock_.Now()), IsOkAndHolds(0));
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_THAT(round.abort_reason(), HasSubstr("quorum lost: 1 of min_workers 2"));
}

TEST_F(StarRoundTest, ARoundWithoutEnoughLeadersAbortsAtOnce) {
  StarRound round = Make(1, /*min_workers=*/2);
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_EQ(round.abort_reason(), "quorum lost: 1 of min_workers 2 left");
}

TEST_F(StarRoundTest, AScreenedOutMemberStaysPresentButIsNotInTheCommit) {
  StarRound round = Make(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(round.Arrive(absl::StrCat("m", i), 8 * (i + 1), 1, clock_.Now()), IsOkAndHolds(i));
    round.Delivered(i, clock_.Now());
  }
  round.Exclude(2, "delta norm 900 is more than max_delta_norm_ratio 3 times the median");
  round.Exclude(2, "again");  // reported once
  round.Averaged();
  EXPECT_EQ(round.phase(), Phase::kCommitted);
  EXPECT_THAT(round.Included(), ElementsAre("m0", "m1"));
  EXPECT_THAT(round.Present(), ElementsAre("m0", "m1", "m2"));
  EXPECT_EQ(round.Step(0), 16);  // not the excluded member's 24
  EXPECT_THAT(round.excluded(), ElementsAre(Pair("m2", HasSubstr("delta norm 900"))));
}

TEST_F(StarRoundTest, AFailedUpdateAbortsWithItsReasonAndLateLeavesChangeNothing) {
  StarRound round = Make(2);
  ASSERT_THAT(round.Arrive("m0", 8, 1, clock_.Now()), IsOkAndHolds(0));
  round.Leave(1, "refused: codec", absl::OkStatus());
  EXPECT_EQ(round.phase(), Phase::kOpen);
  round.Fail("update of chunk 0 overflows fp32");
  EXPECT_EQ(round.phase(), Phase::kAborted);
  EXPECT_EQ(round.abort_reason(), "update of chunk 0 overflows fp32");
  round.Leave(0, "stream ended", absl::CancelledError());
  EXPECT_THAT(round.dropped(), ElementsAre(Pair("m1", "refused: codec")));
}

}  // namespace
}  // namespace localsgd
