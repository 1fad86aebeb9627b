#include "coordinator/sync_admission.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr int64_t kValues = 10'000;

// A leader of a 4-rank node with 3 ranks live, a model of kValues in 2 fragments at round 5.
SyncAdmission At() {
  SyncAdmission at;
  at.local_world_size = 4;
  at.ranks = 3;
  at.initialised = true;
  at.fragments = *FragmentPlan::Make(ChunkLayout{kValues, 1000}, 2);
  at.codec = v1::CODEC_BF16;
  at.committed_round = 5;
  return at;
}

v1::SyncHeader Header() {
  v1::SyncHeader header;
  header.set_member_id("node-0/0");
  header.set_round(6);
  header.set_step(48);
  header.set_num_workers(3);
  header.set_weight(3);
  header.set_codec(v1::CODEC_BF16);
  header.set_fragment(1);
  header.set_vector_length(5'000);
  return header;
}

TEST(SyncAdmissionTest, AdmitsTheNextRoundOfTheRunsModel) {
  absl::StatusOr<v1::SyncHeader> admitted = AdmitSyncHeader(Header(), At());
  ASSERT_THAT(admitted, IsOk());
  EXPECT_EQ(admitted->num_workers(), 3);
  EXPECT_EQ(admitted->weight(), 3);
}

TEST(SyncAdmissionTest, ARankClaimAboveTheLiveRanksIsWeighedAtThem) {
  v1::SyncHeader header = Header();
  header.set_num_workers(4);
  header.set_weight(4);
  absl::StatusOr<v1::SyncHeader> admitted = AdmitSyncHeader(header, At());
  ASSERT_THAT(admitted, IsOk());
  EXPECT_EQ(admitted->num_workers(), 3);
  EXPECT_EQ(admitted->weight(), 3);
}

// Paced runs: the weight counts steps too, at most paced_max_steps, and whole ones.
TEST(SyncAdmissionTest, PacedWeightsAreRanksTimesStepsCappedAtARoundsSteps) {
  SyncAdmission at = At();
  at.paced_max_steps = 8;
  v1::SyncHeader header = Header();
  header.set_weight(3 * 5);
  absl::StatusOr<v1::SyncHeader> admitted = AdmitSyncHeader(header, at);
  ASSERT_THAT(admitted, IsOk());
  EXPECT_EQ(admitted->weight(), 15);
  header.set_num_workers(4);  // one rank more than live, and more steps than a round has
  header.set_weight(4 * 20);
  admitted = AdmitSyncHeader(header, at);
  ASSERT_THAT(admitted, IsOk());
  EXPECT_EQ(admitted->num_workers(), 3);
  EXPECT_EQ(admitted->weight(), 3 * 8);
  for (const double weight : {0.0, 2.0, 4.5, -3.0, std::nan("")}) {
    header = Header();
    header.set_weight(weight);
    EXPECT_THAT(AdmitSyncHeader(header, at), StatusIs(absl::StatusCode::kInvalidArgument,
                                                      "weight: must be num_workers (3) times"))
        << weight;
  }
  // Without pacing, a weight of steps is refused as before.
  header = Header();
  header.set_weight(3 * 5);
  EXPECT_THAT(AdmitSyncHeader(header, At()),
              StatusIs(absl::StatusCode::kInvalidArgument, "weight: must be num_workers (3)"));
}

TEST(SyncAdmissionTest, ClaimsThatAreNeverValidNameTheirField) {
  const auto refused = [](auto change) {
    v1::SyncHeader header = Header();
    change(header);
    return AdmitSyncHeader(header, At()).status();
  };
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_num_workers(5), h.set_weight(5); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_workers: must be in [1, 4]"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_num_workers(0), h.set_weight(0); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_workers"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_weight(1000); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "weight: must be num_workers"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_step(-1); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "step"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_codec(static_cast<v1::Codec>(99)); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "codec: unknown"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_codec(v1::CODEC_FP32); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "codec: fp32, the run uses bf16"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_fragment(2); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "fragment: 2 is not in [0, fragments"));
  EXPECT_THAT(refused([](v1::SyncHeader& h) { h.set_vector_length(kValues); }),
              StatusIs(absl::StatusCode::kInvalidArgument, "vector_length: 10000, fragment 1"));
}

TEST(SyncAdmissionTest, ClaimsNotValidNowAreRefusedUntilTheyAre) {
  SyncAdmission at = At();
  v1::SyncHeader header = Header();
  header.set_round(5);
  EXPECT_THAT(AdmitSyncHeader(header, at).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "round: 5 is stale"));
  header.set_round(7);
  EXPECT_THAT(AdmitSyncHeader(header, at).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "round: 7 is in the future"));
  header.set_round(6);
  at.open_fragment = 0;
  EXPECT_THAT(AdmitSyncHeader(header, at).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "round 6 carries fragment 0"));
  at.open_fragment = 1;
  EXPECT_THAT(AdmitSyncHeader(header, at), IsOk());
  at.suspended = "suspended for 30s";
  EXPECT_THAT(AdmitSyncHeader(header, at).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "suspended for 30s"));
  at = At();
  at.initialised = false;
  EXPECT_THAT(AdmitSyncHeader(header, at).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "not initialised"));
}

RefusalContext Where() {
  RefusalContext at;
  at.run_id = Header().run_id();
  at.initialised = true;
  at.committed_round = 5;
  at.global_step = 40;
  return at;
}

TEST(SyncAdmissionTest, AStaleMemberIsToldTheRoundToAdoptAndNotLeftOutOfTheNext) {
  v1::SyncHeader header = Header();
  header.set_round(4);
  const RefusalAnswer answer =
      AnswerRefusal(header, absl::FailedPreconditionError("round: 4 is stale"), Where());
  ASSERT_TRUE(answer.response.has_value());
  EXPECT_EQ(answer.response->stale().committed_round(), 5);
  EXPECT_EQ(answer.response->stale().global_step(), 40);
  EXPECT_FALSE(answer.response->stale().run_ended());
  EXPECT_FALSE(answer.refuse);
}

TEST(SyncAdmissionTest, AMemberOfAnEndedRunIsToldSoWithTheModelToTake) {
  RefusalContext at = Where();
  at.run_ended = true;
  v1::SyncHeader header = Header();
  header.set_round(6);
  const RefusalAnswer answer =
      AnswerRefusal(header, absl::FailedPreconditionError("not running"), at);
  ASSERT_TRUE(answer.response.has_value());
  EXPECT_TRUE(answer.response->stale().run_ended());
  // Another run's member is told nothing of this model.
  header.set_run_id("run-0");
  EXPECT_FALSE(
      AnswerRefusal(header, absl::FailedPreconditionError("not running"), at).response.has_value());
}

TEST(SyncAdmissionTest, AMemberOfAnotherFragmentIsToldTheRoundsAndExcused) {
  RefusalContext at = Where();
  at.open_round.emplace(6, 1);
  v1::SyncHeader header = Header();
  header.set_round(6);
  header.set_fragment(0);
  const RefusalAnswer answer =
      AnswerRefusal(header, absl::FailedPreconditionError("round 6 carries fragment 1"), at);
  ASSERT_TRUE(answer.response.has_value());
  EXPECT_EQ(answer.response->other_fragment().round(), 6);
  EXPECT_EQ(answer.response->other_fragment().fragment(), 1);
  EXPECT_TRUE(answer.refuse);
  EXPECT_TRUE(answer.excused);
}

TEST(SyncAdmissionTest, OnlyTheMembersFaultsLeaveItOutOfTheRound) {
  v1::SyncHeader header = Header();
  header.set_round(6);
  EXPECT_TRUE(AnswerRefusal(header, absl::InvalidArgumentError("codec"), Where()).refuse);
  EXPECT_FALSE(AnswerRefusal(header, absl::InvalidArgumentError("codec"), Where()).excused);
  EXPECT_FALSE(AnswerRefusal(header, absl::AlreadyExistsError("dup"), Where()).refuse);
  EXPECT_FALSE(AnswerRefusal(header, absl::AbortedError("quorum"), Where()).refuse);
  EXPECT_FALSE(AnswerRefusal(header, absl::UnavailableError("again"), Where()).refuse);
  const RefusalAnswer taken = AnswerRefusal(header, absl::OkStatus(), Where());
  EXPECT_FALSE(taken.refuse);
  EXPECT_FALSE(taken.response.has_value());
}

}  // namespace
}  // namespace localsgd
