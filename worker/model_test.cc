#include "worker/model.h"

#include <torch/script.h>
#include <torch/torch.h>

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

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

v1::ModelSpec Builtin(const std::string& name) {
  v1::ModelSpec spec;
  spec.set_builtin(name);
  return spec;
}

TEST(ModelTest, BuiltinModelsClassify28x28Images) {
  for (const char* name : {"mlp", "cnn"}) {
    auto model = MakeModel(Builtin(name), 1);
    ASSERT_THAT(model, IsOk());
    torch::Tensor out = (*model)->Forward(torch::randn({3, 1, 28, 28}));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 10})) << name;
  }
  auto mlp = MakeModel(Builtin("mlp"), 1);
  EXPECT_EQ(NumValues((*mlp)->Parameters()), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

TEST(ModelTest, SameSeedSameInitialWeights) {
  auto a = MakeModel(Builtin("cnn"), 5);
  auto b = MakeModel(Builtin("cnn"), 5);
  ASSERT_THAT(a, IsOk());
  EXPECT_TRUE(torch::equal((*a)->Parameters()[0], (*b)->Parameters()[0]));
}

TEST(ModelTest, TrainsATorchScriptModuleSavedFromPython) {
  // torch.jit.script reads the class's source, so the script must be a file.
  const std::string path = TempPath("net.pt");
  const std::string script = TempPath("make_net.py");
  std::ofstream(script) << "import sys, torch\n"
                           "class Net(torch.nn.Module):\n"
                           "  def __init__(self):\n"
                           "    super().__init__()\n"
                           "    self.fc = torch.nn.Linear(784, 10)\n"
                           "    self.bn = torch.nn.BatchNorm1d(10)\n"
                           "  def forward(self, x):\n"
                           "    return self.bn(self.fc(x.reshape(x.shape[0], 784)))\n"
                           "torch.jit.script(Net()).save(sys.argv[1])\n";
  const std::string command = absl::StrCat("/usr/bin/python3 ", script, " ", path);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  v1::ModelSpec spec;
  spec.set_torchscript_path(path);
  auto model = MakeModel(spec, 0);
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(NumValues((*model)->Parameters()), 784 * 10 + 10 + 10 + 10);
  // Batch-norm running mean and variance are averaged too (num_batches_tracked is an int).
  EXPECT_EQ(ModelTensors(**model, true).size(), (*model)->Parameters().size() + 2);
  // One optimizer step through the module's parameters changes them.
  (*model)->Train(true);
  torch::optim::SGD optimizer((*model)->Parameters(), torch::optim::SGDOptions(0.1));
  torch::Tensor before = (*model)->Parameters()[0].clone();
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      (*model)->Forward(torch::randn({8, 1, 28, 28})), torch::arange(8));
  loss.backward();
  optimizer.step();
  EXPECT_FALSE(torch::equal(before, (*model)->Parameters()[0]));
  ASSERT_THAT((*model)->Save(TempPath("trained.pt"), {"run-7", 12, 96}), IsOk());
  // The saved file says which global model it is.
  torch::jit::ExtraFilesMap extra = {{"localsgd.txt", ""}};
  torch::jit::load(TempPath("trained.pt"), torch::kCPU, extra);
  EXPECT_EQ(extra["localsgd.txt"], "run_id: \"run-7\"\nround: 12\nglobal_step: 96\n");
}

// A saved built-in model is a TorchScript module with forward: raw inputs in (its input
// normalisation inside), the same outputs as the model on normalised inputs.
TEST(ModelTest, ABuiltinModelSavesAsAModuleThatTakesRawInputs) {
  for (const char* name : {"mlp", "cnn"}) {
    auto model = MakeModel(Builtin(name), 0);
    ASSERT_THAT(model, IsOk());
    Model::SaveInfo info{"run-3", 45, 354};
    info.input_divisor = 255;
    info.input_mean = 0.2860;
    info.input_std = 0.3530;
    info.extra_files["spec.textproto"] = "model { builtin: \"mlp\" }\n";
    const std::string path = TempPath(std::string(name) + ".pt");
    ASSERT_THAT((*model)->Save(path, info), IsOk());
    torch::jit::ExtraFilesMap extra = {{"localsgd.txt", ""}, {"spec.textproto", ""}};
    torch::jit::Module loaded = torch::jit::load(path, torch::kCPU, extra);
    EXPECT_EQ(extra["localsgd.txt"], "run_id: \"run-3\"\nround: 45\nglobal_step: 354\n");
    EXPECT_EQ(extra["spec.textproto"], "model { builtin: \"mlp\" }\n");
    torch::Tensor raw = torch::randint(0, 256, {4, 1, 28, 28}, torch::kUInt8);
    torch::Tensor expected =
        (*model)->Forward(((raw.to(torch::kFloat32) / 255.0) - 0.2860) / 0.3530);
    torch::Tensor got = loaded.forward({raw}).toTensor();
    EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-4))
        << name << ": " << (got - expected).abs().max();
  }
}

TEST(ModelTest, BadModelsNameTheFileOrField) {
  EXPECT_THAT(MakeModel(Builtin("resnet"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "model.builtin"));
  v1::ModelSpec missing;
  missing.set_torchscript_path("/nonexistent/net.pt");
  EXPECT_THAT(MakeModel(missing, 0), StatusIs(absl::StatusCode::kNotFound, "/nonexistent/net.pt"));
  std::ofstream(TempPath("garbage.pt")) << "not a module";
  v1::ModelSpec garbage;
  garbage.set_torchscript_path(TempPath("garbage.pt"));
  EXPECT_THAT(MakeModel(garbage, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a TorchScript module"));
}

}  // namespace
}  // namespace localsgd
