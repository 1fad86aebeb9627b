#include "common/outer_step.h"

#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

TEST(OuterStepTest, PlainAveragingAddsTheMeanTimesLr) {
  std::vector<float> global = {1, 2, 3};
  const std::vector<float> mean = {0.5f, -1, 0};
  ASSERT_THAT(CheckOuterStep({0.5, 0, false}, mean, global, {}), IsOk());
  ApplyOuterStep({0.5, 0, false}, mean, absl::MakeSpan(global), {});
  EXPECT_THAT(global, ::testing::ElementsAre(1.25f, 1.5f, 3.0f));
}

TEST(OuterStepTest, NesterovMomentumFollowsTheFormula) {
  const OuterOptimizer outer{0.7, 0.9, true};
  std::vector<float> global = {0, 0};
  std::vector<float> momentum = {0, 0};
  const std::vector<float> mean = {1, -2};
  for (int round = 0; round < 2; ++round) {
    ApplyOuterStep(outer, mean, absl::MakeSpan(global), absl::MakeSpan(momentum));
  }
  // m1 = d, u1 = lr (d + mu m1); m2 = mu m1 + d, u2 = lr (d + mu m2).
  const float m1 = 1.0f, m2 = 0.9f * m1 + 1.0f;
  const float expected = 0.7f * (1.0f + 0.9f * m1) + 0.7f * (1.0f + 0.9f * m2);
  EXPECT_FLOAT_EQ(global[0], expected);
  EXPECT_FLOAT_EQ(global[1], -2 * expected);
  EXPECT_FLOAT_EQ(momentum[0], m2);
}

TEST(OuterStepTest, OverflowIsRefusedBeforeAnythingChanges) {
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> global = {big, 0};
  const std::vector<float> mean = {big, 1};
  EXPECT_THAT(CheckOuterStep({1, 0, false}, mean, global, {}),
              StatusIs(absl::StatusCode::kOutOfRange, "value 0 overflows"));
  EXPECT_THAT(CheckOuterStep({1, 0.5, false}, mean, global, std::vector<float>{0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "differ in size"));
}

TEST(OuterStepTest, IntoGivesExactlyTheValuesOfApply) {
  const OuterOptimizer outer{0.7, 0.9, true};
  std::vector<float> global = {0.1f, -3.25f, 7.0f}, momentum = {0.5f, 0.0f, -1.0f};
  const std::vector<float> mean = {0.013f, 1.7f, -0.2f};
  std::vector<float> next = mean, next_momentum(3);
  ASSERT_TRUE(OuterStepInto(outer, absl::MakeSpan(next), global, momentum,
                            absl::MakeSpan(next_momentum)));
  ApplyOuterStep(outer, mean, absl::MakeSpan(global), absl::MakeSpan(momentum));
  EXPECT_EQ(next, global);  // bit for bit
  EXPECT_EQ(next_momentum, momentum);
  const float big = std::numeric_limits<float>::max();
  std::vector<float> overflow = {big};
  EXPECT_FALSE(OuterStepInto({1, 0, false}, absl::MakeSpan(overflow), std::vector<float>{big},
                             {}, {}));
}

}  // namespace
}  // namespace localsgd
