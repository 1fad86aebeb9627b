#include "worker/replica.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace localsgd {
namespace {

using ::testing::HasSubstr;

TEST(CheckExpectedSpecTest, NothingExpected) {
  v1::RunSpec spec;
  spec.set_local_sgd_steps(16);
  EXPECT_TRUE(CheckExpectedSpec(v1::RunSpec(), spec).ok());
}

TEST(CheckExpectedSpecTest, NamesTheField) {
  v1::RunSpec expect, spec;
  expect.set_local_sgd_steps(8);
  spec.set_local_sgd_steps(8);
  EXPECT_TRUE(CheckExpectedSpec(expect, spec).ok());
  spec.set_local_sgd_steps(16);
  absl::Status status = CheckExpectedSpec(expect, spec);
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(status.message(), HasSubstr("local_sgd_steps: this program expects "
                                          "local_sgd_steps: 8 but the run has "
                                          "local_sgd_steps: 16"));
  expect.set_local_sgd_steps(16);
  expect.set_codec(v1::CODEC_BF16);
  EXPECT_THAT(CheckExpectedSpec(expect, spec).message(), HasSubstr("codec: this program expects"));
  spec.set_codec(v1::CODEC_BF16);
  expect.mutable_optimizer()->set_lr(0.1);
  spec.mutable_optimizer()->set_lr(0.1);
  spec.mutable_optimizer()->set_momentum(0.9);  // more than expected: another optimizer
  EXPECT_THAT(CheckExpectedSpec(expect, spec).message(), HasSubstr("optimizer:"));
}

}  // namespace
}  // namespace localsgd
