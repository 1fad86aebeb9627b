#include "worker/dataset.h"

#include <torch/serialize.h>
#include <torch/types.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(DatasetTest, ReadsTheRealFashionMnistFiles) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_FASHION_MNIST);
  spec.set_path(kFashionMnist);
  auto data = LoadData(spec, 0);
  ASSERT_THAT(data, IsOk());
  EXPECT_EQ(data->train.size(), 60000);
  EXPECT_EQ(data->test.size(), 10000);
  EXPECT_EQ(data->train.inputs.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(data->train.targets.min().item<int64_t>(), 0);
  EXPECT_EQ(data->train.targets.max().item<int64_t>(), 9);
  // Fashion-MNIST is balanced: 6000 examples of each class.
  EXPECT_EQ(torch::bincount(data->train.targets)[3].item<int64_t>(), 6000);
  EXPECT_NEAR(data->train.inputs.mean().item<float>(), 0.0f, 0.01f);
}

TEST(DatasetTest, MissingOrMalformedFilesNameThePath) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_MNIST);
  spec.set_path("/nonexistent/dir");
  EXPECT_THAT(LoadData(spec, 0), StatusIs(absl::StatusCode::kNotFound, "/nonexistent/dir"));
  std::ofstream(TempPath("train-images-idx3-ubyte")) << "definitely not idx";
  spec.set_path(std::getenv("TEST_TMPDIR"));
  EXPECT_THAT(LoadData(spec, 0), StatusIs(absl::StatusCode::kInvalidArgument, "train-images"));
  v1::DatasetSpec tensors;
  tensors.set_kind(v1::DATASET_KIND_TENSOR_FILE);
  tensors.set_path(TempPath("train-images-idx3-ubyte"));
  EXPECT_THAT(LoadData(tensors, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a tensor file"));
}

// Issue 12, finding 8: a tensor file at /dev/zero used to grow the worker without bound.
TEST(DatasetTest, DevicesAndOversizedFilesAreRefusedWithOneLine) {
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_TENSOR_FILE);
  spec.set_path("/dev/zero");
  absl::StatusOr<DataSplits> zero = LoadData(spec, 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zero.status().message(), "dataset.path: /dev/zero is not a regular file");
  const std::string big = TempPath("big.pt");
  { std::ofstream(big) << std::string(2000, 'x'); }
  absl::Status status = CheckDatasetFile(big, 1000);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("holds 2000 bytes, more than the 1000"), std::string::npos);
  EXPECT_TRUE(CheckDatasetFile(big).ok());
  spec.set_kind(v1::DATASET_KIND_FASHION_MNIST);
  spec.set_path("/dev");  // /dev/train-images-idx3-ubyte does not exist
  EXPECT_EQ(LoadData(spec, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(DatasetTest, SyntheticTaskIsDeterministic) {
  v1::DatasetSpec spec;
  spec.set_synthetic_samples(300);
  auto a = LoadData(spec, 7);
  auto b = LoadData(spec, 7);
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->train.size(), 300);
  EXPECT_TRUE(torch::equal(a->train.inputs, b->train.inputs));
  EXPECT_TRUE(torch::equal(a->test.targets, b->test.targets));
  EXPECT_FALSE(torch::equal(a->train.inputs, LoadData(spec, 8)->train.inputs));
}

TEST(DatasetTest, ShardsAreStridedOrShuffledAndCoverEverything) {
  Dataset data{torch::arange(10).to(torch::kFloat32).unsqueeze(1), torch::arange(10)};
  Dataset shard = Shard(data, 1, 3, /*shuffle=*/false, 0);
  EXPECT_TRUE(torch::equal(shard.targets, torch::tensor({1, 4, 7}, torch::kInt64)));
  int64_t total = 0;
  torch::Tensor seen = torch::zeros({10}, torch::kInt64);
  for (int rank = 0; rank < 3; ++rank) {
    Dataset s = Shard(data, rank, 3, /*shuffle=*/true, 42);
    total += s.size();
    seen.index_add_(0, s.targets, torch::ones({s.size()}, torch::kInt64));
  }
  EXPECT_EQ(total, 10);
  EXPECT_TRUE(torch::equal(seen, torch::ones({10}, torch::kInt64)));
}

TEST(DatasetTest, ReadsATensorFileSavedFromPython) {
  const std::string path = TempPath("data.pt");
  const std::string script = absl::StrCat(
      "/usr/bin/python3 -c \"import torch; torch.manual_seed(0); "
      "torch.save({'inputs': torch.randn(50, 1, 28, 28), 'targets': torch.arange(50) % 10, "
      "'test_inputs': torch.randn(20, 1, 28, 28), 'test_targets': torch.arange(20) % 10}, '",
      path, "')\"");
  ASSERT_EQ(std::system(script.c_str()), 0) << script;
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_TENSOR_FILE);
  spec.set_path(path);
  auto data = LoadData(spec, 0);
  ASSERT_THAT(data, IsOk());
  EXPECT_EQ(data->train.size(), 50);
  EXPECT_EQ(data->test.size(), 20);
  EXPECT_EQ(data->train.targets[13].item<int64_t>(), 3);
}

TEST(DatasetTest, ReadsATensorFileSavedFromCpp) {
  const std::string path = TempPath("data_cpp.pt");
  std::vector<torch::Tensor> tensors = {torch::randn({30, 4}), torch::arange(30) % 2};
  torch::save(tensors, path);
  v1::DatasetSpec spec;
  spec.set_kind(v1::DATASET_KIND_TENSOR_FILE);
  spec.set_path(path);
  auto data = LoadData(spec, 0);
  ASSERT_THAT(data, IsOk());
  EXPECT_EQ(data->train.size(), 30);
  EXPECT_EQ(data->test.size(), 30);  // no test split: the training data
}

}  // namespace
}  // namespace localsgd
