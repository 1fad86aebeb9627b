#include "worker/flat_model.h"

#include <torch/types.h>

#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

std::vector<at::Tensor> TwoTensors() {
  return {torch::arange(6, torch::kFloat32).view({2, 3}),
          torch::arange(6, 10, torch::kFloat64)};  // another dtype: values are fp32 when flat
}

TEST(FlatModelTest, FlattenAndUnflattenARangeAcrossTensors) {
  std::vector<at::Tensor> tensors = TwoTensors();
  EXPECT_EQ(WholeModel(tensors).size, 10);
  const ValueRange middle{4, 4};  // two values of each tensor
  at::Tensor flat = Flatten(tensors, middle);
  EXPECT_TRUE(torch::equal(flat, torch::tensor({4.0f, 5.0f, 6.0f, 7.0f})));
  Unflatten(flat * 10, tensors, middle);
  EXPECT_TRUE(torch::equal(
      Flatten(tensors, WholeModel(tensors)),
      torch::tensor({0.0f, 1.0f, 2.0f, 3.0f, 40.0f, 50.0f, 60.0f, 70.0f, 8.0f, 9.0f})));
  EXPECT_EQ(tensors[1].dtype(), torch::kFloat64);
}

TEST(FlatModelTest, MergeKeepsTheProgressSinceTheSnapshot) {
  std::vector<at::Tensor> tensors = TwoTensors();
  const ValueRange all = WholeModel(tensors);
  const at::Tensor snapshot = Flatten(tensors, all);
  tensors[0].add_(1);  // training after the snapshot
  const at::Tensor result = torch::full({10}, 100.0f);
  MergeRound(result, snapshot, tensors, all);
  EXPECT_TRUE(
      torch::equal(Flatten(tensors, all), torch::tensor({101.0f, 101.0f, 101.0f, 101.0f, 101.0f,
                                                         101.0f, 100.0f, 100.0f, 100.0f, 100.0f})));
}

TEST(FlatModelTest, MergeOfARangeLeavesTheRestAlone) {
  std::vector<at::Tensor> tensors = TwoTensors();
  const ValueRange first{0, 3};
  const at::Tensor snapshot = Flatten(tensors, first);
  MergeRound(torch::zeros({3}), snapshot, tensors, first);
  EXPECT_TRUE(
      torch::equal(Flatten(tensors, WholeModel(tensors)),
                   torch::tensor({0.0f, 0.0f, 0.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f})));
}

TEST(FlatModelTest, InOneBufferAViewWritesTheTensorsThemselves) {
  at::Tensor weight = torch::arange(6, torch::kFloat32).view({2, 3});
  at::Tensor bias = torch::arange(6, 10, torch::kFloat32);
  const at::Tensor held = weight;  // as a module or optimizer holds it
  const std::vector<at::Tensor> tensors = {weight, bias};
  IntoOneBuffer(tensors);
  EXPECT_TRUE(torch::equal(held, torch::arange(6, torch::kFloat32).view({2, 3})));
  EXPECT_TRUE(torch::equal(bias, torch::arange(6, 10, torch::kFloat32)));
  at::Tensor view = FlatView(tensors, ValueRange{4, 4});
  EXPECT_TRUE(torch::equal(view, torch::tensor({4.0f, 5.0f, 6.0f, 7.0f})));
  view.mul_(10);
  EXPECT_EQ(held[1][1].item<float>(), 40.0f);
  EXPECT_EQ(bias[1].item<float>(), 70.0f);
  Unflatten(view, tensors, ValueRange{4, 4});  // onto itself: unchanged
  EXPECT_TRUE(torch::equal(
      Flatten(tensors, WholeModel(tensors)),
      torch::tensor({0.0f, 1.0f, 2.0f, 3.0f, 40.0f, 50.0f, 60.0f, 70.0f, 8.0f, 9.0f})));
}

TEST(FlatModelTest, TensorsApartOrOfAnotherTypeGetACopy) {
  std::vector<at::Tensor> tensors = TwoTensors();  // fp64 among them: not moved
  IntoOneBuffer(tensors);
  EXPECT_EQ(tensors[1].dtype(), torch::kFloat64);
  at::Tensor copy = FlatView(tensors, WholeModel(tensors));
  copy.zero_();
  EXPECT_EQ(tensors[0][1][2].item<float>(), 5.0f);
  const std::vector<at::Tensor> apart = {torch::ones({3}), torch::ones({2})};
  FlatView(apart, WholeModel(apart)).zero_();
  EXPECT_EQ(apart[1][0].item<float>(), 1.0f);
}

}  // namespace
}  // namespace localsgd
