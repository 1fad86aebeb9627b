#include "coordinator/global_model.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;

v1::RunSpec Spec(double momentum) {
  v1::RunSpec spec;
  spec.set_chunk_bytes(8);
  spec.mutable_outer_optimizer()->set_lr(1);
  spec.mutable_outer_optimizer()->set_momentum(momentum);
  return spec;
}

TEST(GlobalModelTest, InstallTakesTheSnapshotThatFetchAndTheWriterShare) {
  GlobalModel model;
  model.Reset("run-1", Spec(0), 4, 32);
  EXPECT_FALSE(model.initialised());
  EXPECT_EQ(model.snapshot(), nullptr);
  ASSERT_THAT(model.Install({1, 2, 3}, std::nullopt), IsOk());
  ASSERT_TRUE(model.initialised());
  const std::shared_ptr<const ModelSnapshot> at4 = model.snapshot();
  EXPECT_EQ(at4->run_id, "run-1");
  EXPECT_EQ(at4->round, 4);
  EXPECT_EQ(at4->global_step, 32);
  EXPECT_EQ(at4->layout.num_values, 3);
  EXPECT_EQ(at4->layout.chunk_values, ChunkLayout::ForBytes(3, 8).chunk_values);
  EXPECT_THAT(*at4->values, ElementsAre(1, 2, 3));
  EXPECT_EQ(at4->momentum, nullptr);  // no outer momentum
  // The reducer's buffers are the snapshot's: shared, not copied.
  EXPECT_EQ(at4->values, model.reducer()->global_buffer());
}

TEST(GlobalModelTest, ACommitMakesANewSnapshotAndLeavesTheOldOneAsItWas) {
  GlobalModel model;
  model.Reset("run-1", Spec(0.9), 0, 0);
  ASSERT_THAT(model.Install({1, 2}, std::vector<float>{0.5f, 0.25f}), IsOk());
  const std::shared_ptr<const ModelSnapshot> before = model.snapshot();
  EXPECT_THAT(*before->momentum, ElementsAre(0.5f, 0.25f));
  model.Committed(1, 8);
  EXPECT_EQ(model.round(), 1);
  EXPECT_EQ(model.global_step(), 8);
  EXPECT_EQ(model.snapshot()->round, 1);
  EXPECT_EQ(model.snapshot()->global_step, 8);
  EXPECT_EQ(before->round, 0);
  EXPECT_EQ(before->global_step, 0);
}

TEST(GlobalModelTest, AMomentumThatDoesNotFitIsRefusedAndNothingIsInstalled) {
  GlobalModel model;
  model.Reset("run-1", Spec(0.9), 0, 0);
  EXPECT_THAT(model.Install({1, 2}, std::vector<float>{1}),
              StatusIs(absl::StatusCode::kInvalidArgument, ""));
  EXPECT_FALSE(model.initialised());
  // A new run forgets the model.
  ASSERT_THAT(model.Install({1, 2}, std::nullopt), IsOk());
  model.Reset("run-2", Spec(0), 0, 0);
  EXPECT_FALSE(model.initialised());
  EXPECT_EQ(model.run_id(), "run-2");
}

}  // namespace
}  // namespace localsgd
