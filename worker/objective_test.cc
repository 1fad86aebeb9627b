#include "worker/objective.h"

#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(ObjectiveTest, LearningRateSchedules) {
  v1::RunSpec spec;
  spec.mutable_optimizer()->set_lr(0.1);
  EXPECT_DOUBLE_EQ(LearningRate(spec, 0, 100), 0.1);  // constant
  EXPECT_DOUBLE_EQ(LearningRate(spec, 99, 100), 0.1);
  spec.mutable_lr_schedule()->set_warmup_steps(10);
  EXPECT_DOUBLE_EQ(LearningRate(spec, 0, 100), 0.01);  // linear warmup to the peak
  EXPECT_DOUBLE_EQ(LearningRate(spec, 4, 100), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(spec, 9, 100), 0.1);
  spec.mutable_lr_schedule()->set_kind(v1::LR_SCHEDULE_KIND_COSINE);
  spec.mutable_lr_schedule()->set_min_lr(0.02);
  EXPECT_DOUBLE_EQ(LearningRate(spec, 10, 110), 0.1);      // peak after warmup
  EXPECT_NEAR(LearningRate(spec, 60, 110), 0.06, 1e-12);   // half-way: the middle
  EXPECT_NEAR(LearningRate(spec, 110, 110), 0.02, 1e-12);  // the floor at the end
  spec.mutable_lr_schedule()->set_kind(v1::LR_SCHEDULE_KIND_LINEAR);
  EXPECT_NEAR(LearningRate(spec, 35, 110), 0.1 - 0.08 * 0.25, 1e-12);
  EXPECT_NEAR(LearningRate(spec, 500, 110), 0.02, 1e-12);  // never below the floor
}

}  // namespace
}  // namespace localsgd
