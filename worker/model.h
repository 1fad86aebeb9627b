#ifndef LOCALSGD_WORKER_MODEL_H_
#define LOCALSGD_WORKER_MODEL_H_

#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// A trainable model: a built-in module ("mlp", "cnn") or a TorchScript module saved from
// Which global model a saved model file holds.
struct ModelSaveInfo {
  std::string run_id;
  int64_t round = 0;        // the committed round it is the global model of
  int64_t global_step = 0;  // the run's global step at that round
  // How the dataset turns raw inputs into what the model trained on:
  // (x / input_divisor - input_mean) / input_std. A saved built-in model does this itself, so
  // raw inputs (0-255 pixels) go in.
  double input_divisor = 1;
  double input_mean = 0;
  double input_std = 1;
  // Text files saved beside the model in its archive (e.g. the run spec, final metrics):
  // name -> contents.
  std::map<std::string, std::string> extra_files;
};

// Python, seen through the same small interface. Thread-compatible.
class Model {
 public:
  virtual ~Model() = default;
  virtual torch::Tensor Forward(const torch::Tensor& input) = 0;
  virtual std::vector<torch::Tensor> Parameters() = 0;
  // Floating-point buffers (e.g. batch-norm running statistics), averaged with the parameters
  // unless the spec says otherwise.
  virtual std::vector<torch::Tensor> Buffers() = 0;
  virtual void Train(bool on) = 0;
  virtual void To(const torch::Device& device) = 0;
  using SaveInfo = ModelSaveInfo;
  // Saves the model to `path` as a TorchScript module that torch.jit.load reads and calls:
  // a built-in model with its input normalisation (`info`) inside its `forward`, so raw
  // inputs go in. Which global model it is (`info`) is in the extra file "localsgd.txt", and
  // info.extra_files beside it.
  virtual absl::Status Save(const std::string& path, const SaveInfo& info = {}) = 0;
};

// The text of the extra file "localsgd.txt" of a saved TorchScript model.
std::string SaveInfoText(const Model::SaveInfo& info);

// Builds the spec's model, initialised from `seed`. INVALID_ARGUMENT for an unknown built-in
// name; NOT_FOUND / INVALID_ARGUMENT naming the file for a TorchScript file that is missing or
// does not load.
absl::StatusOr<std::unique_ptr<Model>> MakeModel(const v1::ModelSpec& spec, uint64_t seed);

// Parameters then (when `with_buffers`) floating-point buffers: what LocalSGD averages.
std::vector<torch::Tensor> ModelTensors(Model& model, bool with_buffers);

// Number of float values in `tensors`.
int64_t NumValues(const std::vector<torch::Tensor>& tensors);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_MODEL_H_
