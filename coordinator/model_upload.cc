#include "coordinator/model_upload.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace localsgd {

ModelUpload::ModelUpload(ChunkLayout layout, bool has_momentum, bool keep_values,
                         bool keeps_momentum)
    : layout_(layout),
      has_momentum_(has_momentum),
      keep_values_(keep_values),
      keeps_momentum_(keeps_momentum) {}

absl::Status ModelUpload::Take(bool momentum, v1::Chunk* chunk) {
  if (momentum && !has_momentum_) {
    return absl::InvalidArgumentError("momentum: the header says no momentum follows");
  }
  const char* field = momentum ? "momentum" : "chunk";
  const int b = momentum ? 1 : 0;
  const int index = chunk->index();
  if (index < 0 || index >= layout_.num_chunks()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".index: ", index, " is out of range [0, ", layout_.num_chunks(), ")"));
  }
  if (kept_[b].count(index) || digested_[b].count(index)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".index: ", index, " sent twice"));
  }
  const size_t bytes = static_cast<size_t>(layout_.size(index)) * sizeof(float);
  if (chunk->data().size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", index, ": ", chunk->data().size(),
                                                   " bytes, expected ", bytes, " (fp32)"));
  }
  for (size_t i = 0; i < bytes; i += sizeof(float)) {
    float value;
    std::memcpy(&value, chunk->data().data() + i, sizeof(float));
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", index, ": NaN or infinity in the initial model"));
    }
  }
  if (keep_values_) {
    kept_[b][index] = std::move(*chunk->mutable_data());
  } else {
    digested_[b][index].Update(chunk->data().data(), bytes);
  }
  return absl::OkStatus();
}

absl::Status ModelUpload::Complete() const {
  for (int b = 0; b < (has_momentum_ ? 2 : 1); ++b) {
    const size_t got = keep_values_ ? kept_[b].size() : digested_[b].size();
    if (static_cast<int64_t>(got) != layout_.num_chunks()) {
      return absl::InvalidArgumentError(absl::StrCat("got ", got, " of ", layout_.num_chunks(),
                                                     b == 0 ? " chunks" : " momentum chunks"));
    }
  }
  return absl::OkStatus();
}

std::vector<float> ModelUpload::Assemble(std::map<int, std::string>& chunks) const {
  std::vector<float> values(static_cast<size_t>(layout_.num_values));
  for (auto& [index, bytes] : chunks) {
    std::memcpy(values.data() + layout_.begin(index), bytes.data(), bytes.size());
    std::string().swap(bytes);
  }
  chunks.clear();
  return values;
}

std::vector<float> ModelUpload::TakeValues() { return Assemble(kept_[0]); }

std::optional<std::vector<float>> ModelUpload::TakeMomentum() {
  if (!has_momentum_) return std::nullopt;
  return Assemble(kept_[1]);
}

std::vector<DigestPair> ModelUpload::ChunkDigests() const {
  std::vector<DigestPair> digests;
  const std::vector<float> zeros(
      keeps_momentum_ && !has_momentum_ ? static_cast<size_t>(layout_.chunk_values) : 0, 0.0f);
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    LaneCrc momentum;  // none, or zero
    if (has_momentum_) {
      momentum = digested_[1].at(c);
    } else if (keeps_momentum_) {
      momentum.Update(zeros.data(), static_cast<size_t>(layout_.size(c)) * sizeof(float));
    }
    digests.push_back(ChunkDigest(digested_[0].at(c), momentum));
  }
  return digests;
}

}  // namespace localsgd
