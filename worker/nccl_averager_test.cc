#include <torch/cuda.h>
#include <torch/types.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/intra_node_averager.h"

namespace localsgd {
namespace {

std::string Store() { return absl::StrCat(std::getenv("TEST_TMPDIR"), "/nccl"); }

TEST(NcclAveragerTest, OneRankOnTheFirstGpu) {
  auto averager = MakeNcclAverager(Store(), 0, 1, 0, absl::Seconds(30));
  if (absl::IsUnimplemented(averager.status())) GTEST_SKIP() << "built without --config=cuda";
  if (absl::IsFailedPrecondition(averager.status()))
    GTEST_SKIP() << "no GPU: " << averager.status();
  ASSERT_TRUE(averager.ok()) << averager.status();
  if (!torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch has no CUDA";
  at::Tensor t = torch::full({1 << 20}, 3.0f, torch::TensorOptions().device(torch::kCUDA, 0));
  ASSERT_TRUE((*averager)->AllReduceMean(t).ok());
  ASSERT_TRUE((*averager)->Broadcast(t).ok());
  EXPECT_TRUE(torch::allclose(t.cpu(), torch::full({1 << 20}, 3.0f)));
  at::Tensor cpu = torch::zeros({4});
  EXPECT_EQ((*averager)->AllReduceMean(cpu).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclAveragerTest, MissingDeviceIsAClearError) {
  auto averager = MakeNcclAverager(Store() + "2", 0, 1, 4096, absl::Seconds(5));
  if (absl::IsUnimplemented(averager.status())) GTEST_SKIP() << "built without --config=cuda";
  EXPECT_EQ(averager.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(averager.status().message().find("cuda:4096"), std::string::npos);
}

// The CPU build's stand-in: asking it for NCCL says how to get a build that has it.
TEST(NcclAveragerTest, ACpuBuildSaysHowToGetNccl) {
  auto averager = MakeNcclAverager(Store() + "3", 0, 1, 0, absl::Seconds(5));
  if (!absl::IsUnimplemented(averager.status())) GTEST_SKIP() << "a CUDA build";
  EXPECT_NE(averager.status().message().find("--config=cuda"), std::string::npos);
}

}  // namespace
}  // namespace localsgd
