#include "exchange/fragment_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::StatusIs;

TEST(FragmentPlanTest, FragmentsAreRunsOfWholeChunksBalancedByChunks) {
  // 10 chunks of 256 values, the last 56 short.
  const ChunkLayout layout{10 * 256 - 56, 256};
  absl::StatusOr<FragmentPlan> plan = FragmentPlan::Make(layout, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 4);
  // Chunks [0, 2), [2, 5), [5, 7), [7, 10).
  EXPECT_EQ(plan->begin(0), 0);
  EXPECT_EQ(plan->values(0), 2 * 256);
  EXPECT_EQ(plan->begin(1), 2 * 256);
  EXPECT_EQ(plan->values(1), 3 * 256);
  EXPECT_EQ(plan->begin(2), 5 * 256);
  EXPECT_EQ(plan->values(2), 2 * 256);
  EXPECT_EQ(plan->begin(3), 7 * 256);
  EXPECT_EQ(plan->values(3), 3 * 256 - 56);
  // One fragment is the whole vector, by default too.
  absl::StatusOr<FragmentPlan> whole = FragmentPlan::Make(layout, 1);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 1);
  EXPECT_EQ(whole->values(0), layout.num_values);
  EXPECT_EQ(FragmentPlan().size(), 1);
}

TEST(FragmentPlanTest, AModelWithFewerChunksThanFragmentsIsRefusedNamingTheField) {
  EXPECT_THAT(FragmentPlan::Make(ChunkLayout{3 * 256, 256}, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "fragments: 4 needs as many chunks"));
  EXPECT_FALSE(FragmentPlan::Make(ChunkLayout{3 * 256, 256}, 0).ok());
}

}  // namespace
}  // namespace localsgd
