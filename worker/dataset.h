#ifndef LOCALSGD_WORKER_DATASET_H_
#define LOCALSGD_WORKER_DATASET_H_

#include <torch/types.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// Examples: inputs (float, [N, ...]) and class targets (int64, [N]).
struct Dataset {
  torch::Tensor inputs;
  torch::Tensor targets;
  int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

struct DataSplits {
  Dataset train;
  Dataset test;
};

// How LoadData turns raw inputs into model inputs: (x / divisor - mean) / std (IDX datasets:
// 0-255 pixels with the Fashion-MNIST mean and deviation; others as they are). A saved
// built-in model applies it itself (Model::SaveInfo).
struct InputNormalization {
  double divisor = 1;
  double mean = 0;
  double std = 1;
};
InputNormalization NormalizationOf(const v1::DatasetSpec& spec);

// Loads the spec's data:
//  - synthetic: a deterministic 10-class task on 28x28 inputs from `seed` (noisy copies of
//    ten random prototypes), synthetic_samples training and 2048 test examples;
//  - Fashion-MNIST / MNIST: the four IDX files (gzip or raw) in `path`, normalised;
//  - tensor file: written by torch.save (Python) or torch::save (C++): a dict with "inputs"
//    and "targets" (and optionally "test_inputs", "test_targets"), or a tuple (inputs,
//    targets); without a test split the training data is also the test data.
// Errors name the file: NOT_FOUND when missing, INVALID_ARGUMENT when of the wrong format.
absl::StatusOr<DataSplits> LoadData(const v1::DatasetSpec& spec, uint64_t seed);

// The part of `data` that global rank `rank` of `world` trains on: examples rank,
// rank + world, ... (deterministic), or the same after a shuffle with `seed`.
Dataset Shard(const Dataset& data, int rank, int world, bool shuffle, uint64_t seed);

// Reads one IDX file (gzip or raw) as a uint8 tensor of its dimensions.
absl::StatusOr<torch::Tensor> ReadIdx(const std::string& path);

// Dataset files (tensor files, IDX files after decompression) hold at most this many bytes;
// a worker reads a whole file into memory before it parses it.
inline constexpr int64_t kMaxDatasetFileBytes = int64_t{8} << 30;

// OK when `path` is a regular file (symbolic links followed) of at most `max_bytes`;
// otherwise INVALID_ARGUMENT naming dataset.path (NOT_FOUND when it cannot be opened), so that
// a device such as /dev/zero or an oversized file is refused with one line.
absl::Status CheckDatasetFile(const std::string& path, int64_t max_bytes = kMaxDatasetFileBytes);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_DATASET_H_
