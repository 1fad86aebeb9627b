#include "worker/round_pace.h"

#include <gtest/gtest.h>

#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

// K = 16 in 2 fragments (a round every 8 steps), tau = 2, rounds of 1 s, a grace window of
// 0.4 s.
v1::RunSpec Paced() {
  v1::RunSpec spec;
  spec.set_local_sgd_steps(16);
  spec.set_fragments(2);
  spec.set_overlap_steps(2);
  spec.set_round_seconds(1.0);
  spec.set_round_grace_seconds(0.4);
  return spec;
}

TEST(RoundPaceTest, NotPacedWithoutRoundSeconds) {
  v1::RunSpec spec = Paced();
  spec.clear_round_seconds();
  absl::StatusOr<RoundPace> pace = RoundPace::Of(spec);
  ASSERT_THAT(pace, IsOk());
  EXPECT_FALSE(pace->paced());
  EXPECT_FALSE(pace->Done(100, absl::Hours(1)));
  EXPECT_THAT(RoundPace::Of(spec, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, "round_steps: the run is not paced"));
}

TEST(RoundPaceTest, AWindowIsTheRoundsTimeWithAtLeastOneStepAndAtMostARoundsSteps) {
  absl::StatusOr<RoundPace> pace = RoundPace::Of(Paced());
  ASSERT_THAT(pace, IsOk());
  ASSERT_TRUE(pace->paced());
  EXPECT_FALSE(pace->Done(5, absl::Milliseconds(999)));
  EXPECT_TRUE(pace->Done(5, absl::Seconds(1)));
  EXPECT_FALSE(pace->Done(0, absl::Seconds(5)));  // at least one step
  EXPECT_TRUE(pace->Done(1, absl::Seconds(5)));
  EXPECT_TRUE(pace->Done(8, absl::Milliseconds(1)));  // at most a round's steps
  EXPECT_FALSE(pace->Done(7, absl::Milliseconds(1)));
}

TEST(RoundPaceTest, ARoundThatLeftTheCopyOutShortensItsWindowByTheGraceWindow) {
  absl::StatusOr<RoundPace> pace = RoundPace::Of(Paced());
  ASSERT_THAT(pace, IsOk());
  // Learnt while the window goes on: this window.
  pace->LeftOut(false);
  EXPECT_TRUE(pace->Done(3, absl::Milliseconds(600)));
  EXPECT_FALSE(pace->Done(3, absl::Milliseconds(599)));
  pace->Began();  // then the round's time again
  EXPECT_FALSE(pace->Done(3, absl::Milliseconds(999)));
  // Learnt after the window was over: the next one.
  pace->LeftOut(true);
  EXPECT_FALSE(pace->Done(3, absl::Milliseconds(700)));
  pace->Began();
  EXPECT_TRUE(pace->Done(3, absl::Milliseconds(600)));
  pace->Began();
  EXPECT_FALSE(pace->Done(3, absl::Milliseconds(999)));
  EXPECT_TRUE(pace->Done(3, absl::Seconds(1)));
}

TEST(RoundPaceTest, FixedStepsAreNotTimedAndAreChecked) {
  absl::StatusOr<RoundPace> pace = RoundPace::Of(Paced(), 4);
  ASSERT_THAT(pace, IsOk());
  EXPECT_FALSE(pace->Done(3, absl::Seconds(100)));
  EXPECT_TRUE(pace->Done(4, absl::ZeroDuration()));
  EXPECT_THAT(RoundPace::Of(Paced(), -1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "round_steps: must be in [1, local_sgd_steps / fragments = 8] for this "
                       "run, got -1"));
  EXPECT_THAT(RoundPace::Of(Paced(), 9), StatusIs(absl::StatusCode::kInvalidArgument, "got 9"));
}

}  // namespace
}  // namespace localsgd
