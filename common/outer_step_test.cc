#include "common/outer_step.h"

#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

// One step on `global` and `momentum`, as a member installs it at the commit.
bool Step(const OuterOptimizer& outer, const std::vector<float>& mean, std::vector<float>& global,
          std::vector<float>& momentum) {
  std::vector<float> next = mean, next_momentum(momentum.size());
  if (!OuterStepInto(outer, absl::MakeSpan(next), global, momentum,
                     absl::MakeSpan(next_momentum))) {
    return false;
  }
  global = next;
  momentum = next_momentum;
  return true;
}

TEST(OuterStepTest, PlainAveragingAddsTheMeanTimesLr) {
  std::vector<float> global = {1, 2, 3}, momentum;
  ASSERT_TRUE(Step({0.5, 0, false}, {0.5f, -1, 0}, global, momentum));
  EXPECT_THAT(global, ::testing::ElementsAre(1.25f, 1.5f, 3.0f));
}

TEST(OuterStepTest, NesterovMomentumFollowsTheFormula) {
  const OuterOptimizer outer{0.7, 0.9, true};
  std::vector<float> global = {0, 0};
  std::vector<float> momentum = {0, 0};
  for (int round = 0; round < 2; ++round) ASSERT_TRUE(Step(outer, {1, -2}, global, momentum));
  // m1 = d, u1 = lr (d + mu m1); m2 = mu m1 + d, u2 = lr (d + mu m2).
  const float m1 = 1.0f, m2 = 0.9f * m1 + 1.0f;
  const float expected = 0.7f * (1.0f + 0.9f * m1) + 0.7f * (1.0f + 0.9f * m2);
  EXPECT_FLOAT_EQ(global[0], expected);
  EXPECT_FLOAT_EQ(global[1], -2 * expected);
  EXPECT_FLOAT_EQ(momentum[0], m2);
}

TEST(OuterStepTest, OverflowIsReported) {
  const float big = std::numeric_limits<float>::max();
  std::vector<float> global = {big, 0}, momentum;
  EXPECT_FALSE(Step({1, 0, false}, {big, 1}, global, momentum));
  EXPECT_EQ(global[0], big);  // nothing installed
}

}  // namespace
}  // namespace localsgd
