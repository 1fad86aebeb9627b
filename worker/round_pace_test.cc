#include "worker/round_pace.h"

#include <gtest/gtest.h>

#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

// K = 16 in 2 fragments (a round every 8 steps), tau = 2, rounds of 1 s.
v1::RunSpec Paced() {
  v1::RunSpec spec;
  spec.set_local_sgd_steps(16);
  spec.set_fragments(2);
  spec.set_overlap_steps(2);
  spec.set_round_seconds(1.0);
  return spec;
}

TEST(RoundPaceTest, NotPacedWithoutRoundSeconds) {
  v1::RunSpec spec = Paced();
  spec.clear_round_seconds();
  absl::StatusOr<RoundPace> pace = RoundPace::Of(spec);
  ASSERT_THAT(pace, IsOk());
  EXPECT_FALSE(pace->paced());
  EXPECT_THAT(RoundPace::Of(spec, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, "round_steps: the run is not paced"));
}

TEST(RoundPaceTest, TheMostStepsUntilTimedThenWhatFitsTheRoundsTime) {
  absl::StatusOr<RoundPace> pace = RoundPace::Of(Paced());
  ASSERT_THAT(pace, IsOk());
  ASSERT_TRUE(pace->paced());
  EXPECT_EQ(pace->steps(), 8);
  pace->Trained(8, absl::Milliseconds(1600));  // 200 ms a step: 5 fit in 1 s
  EXPECT_EQ(pace->steps(), 5);
  pace->Trained(5, absl::Milliseconds(5000));  // 1 s a step: at least 1
  EXPECT_EQ(pace->steps(), 1);
  pace->Trained(1, absl::Milliseconds(1));  // fast: at most a round's steps
  EXPECT_EQ(pace->steps(), 8);
  pace->Trained(8, absl::ZeroDuration());
  EXPECT_EQ(pace->steps(), 8);
}

TEST(RoundPaceTest, FixedStepsStayAndAreChecked) {
  absl::StatusOr<RoundPace> pace = RoundPace::Of(Paced(), 4);
  ASSERT_THAT(pace, IsOk());
  EXPECT_EQ(pace->steps(), 4);
  pace->Trained(4, absl::Seconds(100));
  EXPECT_EQ(pace->steps(), 4);
  EXPECT_THAT(RoundPace::Of(Paced(), -1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "round_steps: must be in [1, local_sgd_steps / fragments = 8] for this "
                       "run, got -1"));
  EXPECT_THAT(RoundPace::Of(Paced(), 9), StatusIs(absl::StatusCode::kInvalidArgument, "got 9"));
}

}  // namespace
}  // namespace localsgd
