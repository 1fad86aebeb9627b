#include "worker/model.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/run_spec.h"

namespace localsgd {
namespace {

// 784-256-128-10 with ReLU, for 28x28 single-channel images.
struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x.reshape({x.size(0), 784});
    x = torch::relu(fc1(x));
    x = torch::relu(fc2(x));
    return fc3(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
  // The same network as a TorchScript method on the parameters (named with _ for .), raw
  // inputs normalised first.
  static constexpr char kName[] = "localsgd.Mlp";
  static constexpr char kScript[] = R"(
def forward(self, x):
    x = (x.float() / self.input_divisor - self.input_mean) / self.input_std
    x = x.reshape([x.size(0), 784])
    x = torch.relu(torch.matmul(x, self.fc1_weight.t()) + self.fc1_bias)
    x = torch.relu(torch.matmul(x, self.fc2_weight.t()) + self.fc2_bias)
    return torch.matmul(x, self.fc3_weight.t()) + self.fc3_bias
)";
};
TORCH_MODULE(Mlp);

// Two 3x3 convolutions with 2x2 max pooling (32 and 64 channels), then 128 and 10 units
// (421,642 parameters). About six times cheaper per step on CPU than the 5x5/1024-unit
// variant; 0.924 test accuracy on Fashion-MNIST (bench/RESULTS.md).
struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x.reshape({x.size(0), 1, 28, 28});
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
  static constexpr char kName[] = "localsgd.Cnn";
  static constexpr char kScript[] = R"(
def forward(self, x):
    x = (x.float() / self.input_divisor - self.input_mean) / self.input_std
    x = x.reshape([x.size(0), 1, 28, 28])
    x = torch.max_pool2d(torch.relu(torch.conv2d(x, self.conv1_weight, self.conv1_bias, [1, 1], [1, 1])), [2, 2])
    x = torch.max_pool2d(torch.relu(torch.conv2d(x, self.conv2_weight, self.conv2_bias, [1, 1], [1, 1])), [2, 2])
    x = torch.relu(torch.matmul(x.flatten(1), self.fc1_weight.t()) + self.fc1_bias)
    return torch.matmul(x, self.fc2_weight.t()) + self.fc2_bias
)";
};
TORCH_MODULE(Cnn);

// What a saved model carries beside its weights.
torch::jit::ExtraFilesMap ExtraFiles(const Model::SaveInfo& info) {
  torch::jit::ExtraFilesMap files(info.extra_files.begin(), info.extra_files.end());
  files["localsgd.txt"] = SaveInfoText(info);
  return files;
}

template <typename Net>
class BuiltinModel : public Model {
 public:
  BuiltinModel() = default;
  torch::Tensor Forward(const torch::Tensor& input) override { return net_->forward(input); }
  std::vector<torch::Tensor> Parameters() override { return net_->parameters(); }
  std::vector<torch::Tensor> Buffers() override { return net_->buffers(); }
  void Train(bool on) override { net_->train(on); }
  void To(const torch::Device& device) override { net_->to(device); }
  absl::Status Save(const std::string& path, const SaveInfo& info) override {
    try {
      torch::jit::Module module(Net::ContainedType::kName);
      for (const auto& p : net_->named_parameters()) {
        module.register_parameter(absl::StrReplaceAll(p.key(), {{".", "_"}}),
                                  p.value().detach().to(torch::kCPU).clone(), false);
      }
      module.register_attribute("input_divisor", c10::FloatType::get(), info.input_divisor);
      module.register_attribute("input_mean", c10::FloatType::get(), info.input_mean);
      module.register_attribute("input_std", c10::FloatType::get(), info.input_std);
      module.define(Net::ContainedType::kScript);
      module.eval();
      module.save(path, ExtraFiles(info));
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("cannot save the model to ", path, ": ", e.what_without_backtrace()));
    } catch (const std::exception& e) {  // TorchScript compilation errors
      return absl::InternalError(absl::StrCat("cannot save the model to ", path, ": ", e.what()));
    }
    return absl::OkStatus();
  }

 private:
  Net net_;
};

class ScriptModel : public Model {
 public:
  explicit ScriptModel(torch::jit::Module module) : module_(std::move(module)) {}
  torch::Tensor Forward(const torch::Tensor& input) override {
    return module_.forward({input}).toTensor();
  }
  std::vector<torch::Tensor> Parameters() override {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : module_.parameters()) out.push_back(p);
    return out;
  }
  std::vector<torch::Tensor> Buffers() override {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& b : module_.buffers()) out.push_back(b);
    return out;
  }
  void Train(bool on) override { module_.train(on); }
  void To(const torch::Device& device) override { module_.to(device); }
  absl::Status Save(const std::string& path, const SaveInfo& info) override {
    try {
      module_.save(path, ExtraFiles(info));
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("cannot save the model to ", path, ": ", e.what_without_backtrace()));
    }
    return absl::OkStatus();
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

std::string SaveInfoText(const Model::SaveInfo& info) {
  return absl::StrCat("run_id: \"", info.run_id, "\"\nround: ", info.round,
                      "\nglobal_step: ", info.global_step, "\n");
}

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const v1::ModelSpec& spec, uint64_t seed) {
  torch::manual_seed(seed);
  if (spec.has_custom()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.custom: \"", spec.custom(),
                     "\" is trained by its own program (localsgd::Replica, or the Python package), "
                     "not by the worker"));
  }
  if (spec.has_builtin()) {
    if (spec.builtin() == "mlp") return std::unique_ptr<Model>(new BuiltinModel<Mlp>());
    if (spec.builtin() == "cnn") return std::unique_ptr<Model>(new BuiltinModel<Cnn>());
    return absl::InvalidArgumentError(absl::StrCat(
        "model.builtin: unknown model \"", spec.builtin(), "\" (known: ", BuiltinModelList(), ")"));
  }
  const std::string& path = spec.torchscript_path();
  if (path.empty()) return absl::InvalidArgumentError("model: required");
  if (!std::ifstream(path).good()) {
    return absl::NotFoundError(absl::StrCat("model.torchscript_path: cannot open ", path));
  }
  try {
    return std::unique_ptr<Model>(new ScriptModel(torch::jit::load(path)));
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.torchscript_path: ", path,
                     " is not a TorchScript module: ", e.what_without_backtrace()));
  }
}

std::vector<torch::Tensor> ModelTensors(Model& model, bool with_buffers) {
  std::vector<torch::Tensor> tensors = model.Parameters();
  if (with_buffers) {
    for (const torch::Tensor& b : model.Buffers()) {
      if (b.is_floating_point()) tensors.push_back(b);
    }
  }
  return tensors;
}

int64_t NumValues(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const torch::Tensor& t : tensors) n += t.numel();
  return n;
}

}  // namespace localsgd
