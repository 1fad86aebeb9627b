#include "worker/dataset.h"

#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/serialize.h>
#include <torch/types.h>
#include <zlib.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/run_spec.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

constexpr int64_t kSyntheticTestSamples = 2048;

uint32_t BigEndian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Ten random 28x28 class prototypes; an example is its class's prototype plus noise ten times
// as strong per pixel, so the task takes a few hundred steps to learn and is not solved
// perfectly.
DataSplits Synthetic(int64_t samples, uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor prototypes = 0.1 * torch::randn({10, 1, 28, 28});
  auto make = [&](int64_t n) {
    Dataset d;
    d.targets = torch::randint(0, 10, {n}, torch::kInt64);
    d.inputs = prototypes.index_select(0, d.targets) + torch::randn({n, 1, 28, 28});
    return d;
  };
  DataSplits splits;
  splits.train = make(samples);
  splits.test = make(kSyntheticTestSamples);
  return splits;
}

// The usual Fashion-MNIST normalisation (mean 0.2860, std 0.3530 over the training set).
constexpr InputNormalization kIdxNormalization{255, 0.2860, 0.3530};

absl::StatusOr<Dataset> IdxPair(const std::string& dir, const std::string& prefix) {
  LOCALSGD_ASSIGN_OR_RETURN(torch::Tensor images,
                            ReadIdx(absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte")));
  LOCALSGD_ASSIGN_OR_RETURN(torch::Tensor labels,
                            ReadIdx(absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte")));
  if (images.dim() != 3 || images.size(1) != 28 || images.size(2) != 28 || labels.dim() != 1 ||
      labels.size(0) != images.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.path: ", dir, "/", prefix, "-*: images and labels do not match"));
  }
  Dataset d;
  const InputNormalization n = kIdxNormalization;
  d.inputs = (images.to(torch::kFloat32) / n.divisor - n.mean) / n.std;
  d.inputs = d.inputs.unsqueeze(1);
  d.targets = labels.to(torch::kInt64);
  return d;
}

absl::StatusOr<DataSplits> TensorFile(const std::string& path) {
  LOCALSGD_RETURN_IF_ERROR(CheckDatasetFile(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("dataset.path: cannot open ", path));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: ", path, ": ", why));
  };
  DataSplits splits;
  try {
    torch::IValue value = torch::pickle_load(bytes);
    if (value.isGenericDict()) {
      auto dict = value.toGenericDict();
      auto get = [&](const char* key) -> torch::Tensor {
        auto it = dict.find(key);
        return it == dict.end() ? torch::Tensor() : it->value().toTensor();
      };
      splits.train = Dataset{get("inputs"), get("targets")};
      splits.test = Dataset{get("test_inputs"), get("test_targets")};
    } else if (value.isTuple() && value.toTuple()->elements().size() == 2) {
      splits.train = Dataset{value.toTuple()->elements()[0].toTensor(),
                             value.toTuple()->elements()[1].toTensor()};
    } else {
      return bad("expected a dict with \"inputs\" and \"targets\", or a tuple (inputs, targets)");
    }
  } catch (const c10::Error& e) {
    // Not a torch.save pickle: a vector of tensors written by torch::save in C++?
    try {
      std::vector<torch::Tensor> tensors;
      torch::load(tensors, path);
      if (tensors.size() != 2 && tensors.size() != 4) {
        return bad("expected [inputs, targets] or [inputs, targets, test_inputs, test_targets]");
      }
      splits.train = Dataset{tensors[0], tensors[1]};
      if (tensors.size() == 4) splits.test = Dataset{tensors[2], tensors[3]};
    } catch (const c10::Error&) {
      return bad(absl::StrCat("not a tensor file: ", e.what_without_backtrace()));
    }
  }
  if (!splits.train.inputs.defined() || !splits.train.targets.defined()) {
    return bad("\"inputs\" or \"targets\" missing");
  }
  if (!splits.test.inputs.defined() || !splits.test.targets.defined()) splits.test = splits.train;
  for (Dataset* d : {&splits.train, &splits.test}) {
    if (d->inputs.size(0) != d->targets.size(0) || d->targets.dim() != 1) {
      return bad("inputs and targets differ in length (or targets are not 1-D)");
    }
    d->inputs = d->inputs.to(torch::kFloat32);
    d->targets = d->targets.to(torch::kInt64);
  }
  return splits;
}

}  // namespace

absl::Status CheckDatasetFile(const std::string& path, int64_t max_bytes) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("dataset.path: cannot open ", path));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset.path: ", path, " is not a regular file"));
  }
  if (info.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: ", path, " holds ", info.st_size,
                                                   " bytes, more than the ", max_bytes,
                                                   " a dataset file may hold"));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> ReadIdx(const std::string& path) {
  std::string actual = path;
  if (!CheckDatasetFile(actual).ok()) actual = path + ".gz";
  if (absl::Status s = CheckDatasetFile(actual); !s.ok()) {
    if (absl::IsNotFound(s)) {
      return absl::NotFoundError(absl::StrCat("dataset.path: cannot open ", path, "[.gz]"));
    }
    return s;
  }
  gzFile file = gzopen(actual.c_str(), "rb");  // reads raw files transparently too
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("dataset.path: cannot open ", actual));
  }
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.path: ", actual, ": ", why));
  };
  std::vector<unsigned char> data;
  unsigned char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) {
    if (static_cast<int64_t>(data.size()) + n > kMaxDatasetFileBytes) {
      gzclose(file);
      return bad(absl::StrCat("decompresses to more than ", kMaxDatasetFileBytes, " bytes"));
    }
    data.insert(data.end(), buffer, buffer + n);
  }
  const bool read_error = n < 0;
  gzclose(file);
  if (read_error) return bad("corrupt gzip data");
  if (data.size() < 4 || data[0] != 0 || data[1] != 0 || data[2] != 0x08) {
    return bad("not an IDX file of unsigned bytes");
  }
  const int dims = data[3];
  if (dims < 1 || dims > 4 || data.size() < 4 + 4 * static_cast<size_t>(dims)) {
    return bad("bad IDX header");
  }
  std::vector<int64_t> shape;
  int64_t count = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(BigEndian(&data[4 + 4 * d]));
    count *= shape.back();
  }
  const size_t offset = 4 + 4 * static_cast<size_t>(dims);
  if (data.size() - offset != static_cast<size_t>(count)) {
    return bad(
        absl::StrCat("holds ", data.size() - offset, " bytes of data, the header says ", count));
  }
  return torch::from_blob(data.data() + offset, shape, torch::kUInt8).clone();
}

InputNormalization NormalizationOf(const v1::DatasetSpec& spec) {
  if (spec.kind() == v1::DATASET_KIND_FASHION_MNIST || spec.kind() == v1::DATASET_KIND_MNIST) {
    return kIdxNormalization;
  }
  return InputNormalization{};
}

absl::StatusOr<DataSplits> LoadData(const v1::DatasetSpec& spec, uint64_t seed) {
  switch (spec.kind()) {
    case v1::DATASET_KIND_UNSPECIFIED:
    case v1::DATASET_KIND_SYNTHETIC:
      return Synthetic(
          spec.has_synthetic_samples() ? spec.synthetic_samples() : kDefaultSyntheticSamples, seed);
    case v1::DATASET_KIND_FASHION_MNIST:
    case v1::DATASET_KIND_MNIST: {
      LOCALSGD_ASSIGN_OR_RETURN(Dataset train, IdxPair(spec.path(), "train"));
      LOCALSGD_ASSIGN_OR_RETURN(Dataset test, IdxPair(spec.path(), "t10k"));
      return DataSplits{std::move(train), std::move(test)};
    }
    case v1::DATASET_KIND_TENSOR_FILE:
      return TensorFile(spec.path());
    default:
      return absl::InvalidArgumentError(absl::StrCat("dataset.kind: unknown ", spec.kind()));
  }
}

Dataset Shard(const Dataset& data, int rank, int world, bool shuffle, uint64_t seed) {
  torch::Tensor order;
  if (shuffle) {
    torch::manual_seed(seed);
    order = torch::randperm(data.size(), torch::kInt64);
  } else {
    order = torch::arange(data.size(), torch::kInt64);
  }
  torch::Tensor mine = order.slice(0, rank, data.size(), world);
  return Dataset{data.inputs.index_select(0, mine), data.targets.index_select(0, mine)};
}

}  // namespace localsgd
