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
  model.Committed(1, 8, 0, before->digest);
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

// Fragments: 3 chunks of 256 values (chunk_bytes 1 KiB) in 3 fragments of one chunk each.
TEST(GlobalModelTest, AFragmentRoundWorksOnACopyOfItsFragmentAndReplacesOnlyThatAtTheCommit) {
  v1::RunSpec spec = Spec(0.9);
  spec.set_chunk_bytes(1024);
  spec.set_fragments(3);
  GlobalModel model;
  model.Reset("run-1", spec, 0, 0);
  std::vector<float> values(3 * 256 - 6);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  ASSERT_THAT(model.Install(values, std::vector<float>(values.size(), 0.5f)), IsOk());
  ASSERT_EQ(model.fragments().size(), 3);
  EXPECT_EQ(model.fragments().begin(1), 256);
  EXPECT_EQ(model.fragments().values(2), 256 - 6);
  EXPECT_EQ(model.first_chunk(2), 2);
  // The model's digest, taken at the install, is its values' and momentum's.
  const auto whole_digest = [&] {
    const ModelSnapshot& s = *model.snapshot();
    return ModelDigest(*s.values, *s.momentum, s.layout);
  };
  EXPECT_EQ(model.snapshot()->digest, whole_digest());

  const std::shared_ptr<const ModelSnapshot> before = model.snapshot();
  std::shared_ptr<RangeReducer> round = model.RoundReducer(1);
  ASSERT_NE(round, model.reducer());
  EXPECT_EQ(round->layout().num_values, 256);
  EXPECT_EQ(round->global()[0], 256.0f);
  EXPECT_EQ(round->momentum()[0], 0.5f);
  // A round whose one member's delta is 1 everywhere: lr 1, momentum 0.9 -> m = 0.9 * 0.5 + 1.
  round->BeginRound(1);
  ASSERT_THAT(round->deltas().SetWeight(0, 1), IsOk());
  std::vector<float> ones(256, 1.0f);
  ASSERT_THAT(round->deltas().Accumulate(0, 0, ones), IsOk());
  ASSERT_TRUE(round->TakeCompleted().ok());
  round->Commit();
  model.CommitFragment(1, *round);
  // The fragment's digest, its chunks counted from its first in the model.
  model.Committed(
      1, 4, 1,
      ModelDigest(round->global(), round->momentum(), round->layout(), model.first_chunk(1)));
  EXPECT_EQ(model.snapshot()->digest, whole_digest());  // the fragments' combined
  const std::shared_ptr<const ModelSnapshot> after = model.snapshot();
  EXPECT_EQ((*after->values)[255], 255.0f);  // fragment 0: as it was
  EXPECT_EQ((*after->values)[256], 256.0f + 1.45f);
  EXPECT_EQ((*after->momentum)[256], 1.45f);
  EXPECT_EQ((*after->momentum)[0], 0.5f);
  EXPECT_EQ((*after->values)[512], 512.0f);   // fragment 2: as it was
  EXPECT_EQ((*before->values)[256], 256.0f);  // a snapshot handed out stays as it was
  // Fragments 0 and 2 last synced at step 0.
  EXPECT_EQ(model.synced_step(), 0);
  const DigestPair digest = model.snapshot()->digest;
  model.Committed(2, 8, 0, ModelDigest(round->global(), round->momentum(), round->layout(), 0));
  EXPECT_NE(model.snapshot()->digest, digest);  // fragment 0 said to hold fragment 1's values
  const ModelSnapshot& now = *model.snapshot();
  model.Committed(
      3, 8, 2,
      ModelDigest(absl::MakeConstSpan(*now.values).subspan(512),
                  absl::MakeConstSpan(*now.momentum).subspan(512), ChunkLayout{256 - 6, 256}, 2));
  EXPECT_EQ(model.synced_step(), 4);
}

TEST(GlobalModelTest, AModelWithFewerChunksThanFragmentsIsRefused) {
  v1::RunSpec spec = Spec(0);
  spec.set_chunk_bytes(1024);
  spec.set_fragments(4);
  GlobalModel model;
  model.Reset("run-1", spec, 0, 0);
  EXPECT_THAT(model.Install(std::vector<float>(3 * 256), std::nullopt),
              StatusIs(absl::StatusCode::kInvalidArgument, "fragments: 4"));
  EXPECT_FALSE(model.initialised());
}

}  // namespace
}  // namespace localsgd
