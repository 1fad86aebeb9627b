#include "exchange/outer_step.h"

#include <cstdint>
#include <cstring>
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

// The values' bit patterns, to compare bit for bit (-0 and NaNs included).
std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(&bits[i], &values[i], sizeof(float));
  return bits;
}

TEST(OuterStepTest, InPlaceIsBitIdenticalToInto) {
  for (const OuterOptimizer& outer : {OuterOptimizer{1, 0, false}, OuterOptimizer{0.7, 0.9, true},
                                      OuterOptimizer{0.5, 0.8, false}}) {
    std::vector<float> global = {0.1f, -3.7f, 1e-8f, 12345.678f};
    std::vector<float> momentum = {0.3f, -0.01f, 2.5f, -7.125f};
    if (outer.momentum == 0) momentum.clear();
    const std::vector<float> mean = {1.0f / 3, -0.2f, 7e-9f, -0.0078125f};
    std::vector<float> in_place = global, in_place_momentum = momentum;
    for (int round = 0; round < 3; ++round) {
      ASSERT_TRUE(Step(outer, mean, global, momentum));
      OuterStepInPlace(outer, mean, absl::MakeSpan(in_place), absl::MakeSpan(in_place_momentum));
      EXPECT_EQ(Bits(in_place), Bits(global));
      EXPECT_EQ(Bits(in_place_momentum), Bits(momentum));
    }
  }
}

// The vectorised loops against OuterUpdate, the per-value formula the star aggregator uses, over
// a length with a vector body and a tail.
TEST(OuterStepTest, StepsMatchOuterUpdateValueByValue) {
  const size_t n = 1037;
  std::vector<float> global(n), momentum(n), mean(n);
  for (size_t i = 0; i < n; ++i) {
    global[i] = 0.37f * static_cast<float>(i) - 100.0f;
    momentum[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
    mean[i] = 1.0f / static_cast<float>(i + 3) - 0.01f;
  }
  for (const OuterOptimizer& outer : {OuterOptimizer{0.9, 0, false}, OuterOptimizer{0.7, 0.9, true},
                                      OuterOptimizer{0.5, 0.8, false}}) {
    std::vector<float> expected = global, expected_momentum = momentum;
    for (size_t i = 0; i < n; ++i) {
      expected[i] = global[i] + OuterUpdate(outer, mean[i], momentum[i], &expected_momentum[i]);
    }
    std::vector<float> in_place = global, in_place_momentum = momentum;
    OuterStepInPlace(outer, mean, absl::MakeSpan(in_place), absl::MakeSpan(in_place_momentum));
    std::vector<float> into = mean, into_momentum(n);
    ASSERT_TRUE(OuterStepInto(outer, absl::MakeSpan(into), global, momentum,
                              absl::MakeSpan(into_momentum)));
    EXPECT_EQ(Bits(in_place), Bits(expected));
    EXPECT_EQ(Bits(into), Bits(expected));
    if (outer.momentum != 0) {
      EXPECT_EQ(Bits(in_place_momentum), Bits(expected_momentum));
      EXPECT_EQ(Bits(into_momentum), Bits(expected_momentum));
    }
  }
}

TEST(OuterStepDeathTest, SpansOfAnotherLengthStopTheProcess) {
  std::vector<float> global(8), mean(8), short_momentum(4);
  EXPECT_DEATH(OuterStepInPlace({1, 0.9, false}, mean, absl::MakeSpan(global),
                                absl::MakeSpan(short_momentum)),
               "outer step: spans of 8 values");
  std::vector<float> short_mean(7);
  EXPECT_DEATH(OuterStepInPlace({1, 0, false}, short_mean, absl::MakeSpan(global), {}),
               "outer step: spans of 8 values");
}

}  // namespace
}  // namespace localsgd
