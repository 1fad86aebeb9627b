#include "exchange/delta_mean.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exchange/codec.h"

namespace localsgd {

DeltaMean::DeltaMean(Options options) : options_(options) {
  sum_.assign(static_cast<size_t>(options_.layout.num_values), 0.0f);
}

void DeltaMean::BeginRound(int num_members) {
  const int chunks = layout().num_chunks();
  num_members_ = num_members;
  weights_.assign(static_cast<size_t>(num_members), 0.0);
  dropped_.assign(static_cast<size_t>(num_members), false);
  got_.assign(static_cast<size_t>(chunks), std::vector<bool>(static_cast<size_t>(num_members)));
  chunk_weight_.assign(static_cast<size_t>(chunks), 0.0);
  taken_.assign(static_cast<size_t>(chunks), false);
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  completed_ = 0;
  if (holding()) {
    held_.assign(static_cast<size_t>(num_members), {});
    norm2_.assign(static_cast<size_t>(num_members), 0.0);
    reduced_ = false;
    exclusions_.clear();
  }
}

absl::Status DeltaMean::SetWeight(int slot, double weight) {
  if (slot < 0 || slot >= num_members_) return absl::InvalidArgumentError("member: no such slot");
  if (!std::isfinite(weight) || weight <= 0 || weight > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight: must be > 0 and at most the largest float, got ", weight));
  }
  weights_[slot] = weight;
  return absl::OkStatus();
}

absl::Status DeltaMean::DecodeChunk(int chunk, absl::string_view encoded,
                                    std::vector<float>* out) const {
  if (chunk < 0 || chunk >= layout().num_chunks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk.index: ", chunk, " is out of range [0, ", layout().num_chunks(), ")"));
  }
  out->resize(static_cast<size_t>(layout().size(chunk)));
  absl::Status status = Decode(options_.codec, encoded, absl::MakeSpan(*out));
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status DeltaMean::Check(int chunk, absl::string_view encoded,
                              std::vector<float>* scratch) const {
  if (options_.codec != v1::CODEC_FP32) return DecodeChunk(chunk, encoded, scratch);
  if (chunk < 0 || chunk >= layout().num_chunks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk.index: ", chunk, " is out of range [0, ", layout().num_chunks(), ")"));
  }
  if (absl::Status status = CheckFp32(encoded, static_cast<size_t>(layout().size(chunk)));
      !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk, ": ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status DeltaMean::Add(int slot, int chunk, absl::string_view encoded,
                            const std::vector<float>& scratch) {
  return options_.codec == v1::CODEC_FP32 ? AccumulateFp32(slot, chunk, encoded)
                                          : Accumulate(slot, chunk, scratch);
}

absl::Status DeltaMean::Admit(int slot, int chunk, size_t values) {
  if (slot < 0 || slot >= num_members_ || dropped_[slot]) {
    return absl::InvalidArgumentError("member: not in the round");
  }
  if (weights_[slot] <= 0) return absl::InvalidArgumentError("member: no weight set");
  if (chunk < 0 || chunk >= layout().num_chunks() ||
      static_cast<int64_t>(values) != layout().size(chunk)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk.index: ", chunk, " does not fit"));
  }
  if (got_[chunk][slot]) {
    return absl::InvalidArgumentError(absl::StrCat("chunk.index: ", chunk, " sent twice"));
  }
  got_[chunk][slot] = true;
  chunk_weight_[chunk] += weights_[slot];
  return absl::OkStatus();
}

absl::Status DeltaMean::Accumulate(int slot, int chunk, absl::Span<const float> decoded) {
  LOCALSGD_RETURN_IF_ERROR(Admit(slot, chunk, decoded.size()));
  AddValues(slot, chunk, decoded.data(), decoded.size(), /*from_bytes=*/false);
  return absl::OkStatus();
}

absl::Status DeltaMean::AccumulateFp32(int slot, int chunk, absl::string_view bytes) {
  LOCALSGD_RETURN_IF_ERROR(Admit(slot, chunk, bytes.size() / sizeof(float)));
  // The bytes may be unaligned: read them through memcpy.
  AddValues(slot, chunk, reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float),
            /*from_bytes=*/true);
  return absl::OkStatus();
}

void DeltaMean::AddValues(int slot, int chunk, const float* values, size_t n, bool from_bytes) {
  auto value = [&](size_t i) {
    if (!from_bytes) return values[i];
    float v;
    std::memcpy(&v, reinterpret_cast<const char*>(values) + sizeof(float) * i, sizeof(float));
    return v;
  };
  const int64_t begin = layout().begin(chunk);
  if (holding()) {
    std::vector<float>& held = held_[slot];
    if (held.empty()) held.resize(static_cast<size_t>(layout().num_values));
    double norm2 = 0;
    for (size_t i = 0; i < n; ++i) {
      const float v = value(i);
      held[begin + i] = v;
      norm2 += static_cast<double>(v) * v;
    }
    norm2_[slot] += norm2;
    return;
  }
  const float w = static_cast<float>(weights_[slot]);
  float* sum = sum_.data() + begin;
  if (from_bytes) {  // the hot path (fp32 straight from the message): one loop per case
    for (size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, reinterpret_cast<const char*>(values) + sizeof(float) * i, sizeof(float));
      sum[i] += w * v;
    }
  } else {
    for (size_t i = 0; i < n; ++i) sum[i] += w * values[i];
  }
}

std::vector<bool> DeltaMean::Screen(const std::vector<int>& members) {
  std::vector<bool> excluded(static_cast<size_t>(num_members_), false);
  for (int slot : members) {
    std::vector<double> others;
    for (int other : members) {
      if (other != slot) others.push_back(std::sqrt(norm2_[other]));
    }
    if (others.empty()) continue;
    std::sort(others.begin(), others.end());
    const size_t mid = others.size() / 2;
    const double median =
        others.size() % 2 == 1 ? others[mid] : 0.5 * (others[mid - 1] + others[mid]);
    const double norm = std::sqrt(norm2_[slot]);
    if (norm > options_.max_norm_ratio * median) {
      excluded[slot] = true;
      exclusions_.push_back(Exclusion{slot, norm, median});
    }
  }
  return excluded;
}

void DeltaMean::ReduceHeld() {
  reduced_ = true;
  std::vector<int> members;  // delivered every chunk
  for (int slot = 0; slot < num_members_; ++slot) {
    if (!dropped_[slot]) members.push_back(slot);
  }
  const std::vector<bool> excluded =
      screening() ? Screen(members) : std::vector<bool>(static_cast<size_t>(num_members_), false);
  // The held deltas of members still in (not dropped, not excluded) make the sums; everyone
  // else's weight leaves the chunks it had reached.
  std::vector<int> counted;
  for (int slot = 0; slot < num_members_; ++slot) {
    const bool counts = !dropped_[slot] && !excluded[slot];
    for (int chunk = 0; chunk < layout().num_chunks(); ++chunk) {
      if (got_[chunk][slot] && !counts) chunk_weight_[chunk] -= weights_[slot];
    }
    if (counts && !held_[slot].empty()) counted.push_back(slot);
  }
  if (trimming()) {
    TrimmedSums(counted);
  } else {
    for (int slot : counted) {
      const float w = static_cast<float>(weights_[slot]);
      const std::vector<float>& held = held_[slot];
      for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += w * held[i];
    }
  }
  held_.clear();
}

void DeltaMean::TrimmedSums(const std::vector<int>& counted) {
  const size_t n = counted.size();
  if (n == 0) return;  // nobody's delta: no chunk completes
  const size_t trim = static_cast<size_t>(std::floor(options_.trim_fraction * n));
  std::vector<std::pair<float, double>> column(n);  // (delta, weight), sorted per value
  for (int chunk = 0; chunk < layout().num_chunks(); ++chunk) {
    const int64_t end = layout().begin(chunk) + layout().size(chunk);
    for (int64_t i = layout().begin(chunk); i < end; ++i) {
      for (size_t k = 0; k < n; ++k) column[k] = {held_[counted[k]][i], weights_[counted[k]]};
      std::sort(column.begin(), column.end());
      double weighted = 0, weight = 0;
      for (size_t k = trim; k < n - trim; ++k) {
        weighted += column[k].second * column[k].first;
        weight += column[k].second;
      }
      sum_[i] = static_cast<float>(weighted / weight * chunk_weight_[chunk]);
    }
  }
}

void DeltaMean::Drop(int slot) {
  if (slot >= 0 && slot < num_members_) dropped_[slot] = true;
}

int DeltaMean::active_members() const {
  return static_cast<int>(std::count(dropped_.begin(), dropped_.end(), false));
}

bool DeltaMean::Complete(int chunk) const {
  if (chunk_weight_[chunk] <= 0) return false;  // nobody's delta: cannot average
  for (int slot = 0; slot < num_members_; ++slot) {
    if (!dropped_[slot] && !got_[chunk][slot]) return false;
  }
  return true;
}

std::vector<int> DeltaMean::TakeCompleted() {
  std::vector<int> done;
  if (holding() && !reduced_) {
    for (int chunk = 0; chunk < layout().num_chunks(); ++chunk) {
      if (!Complete(chunk)) return done;
    }
    ReduceHeld();
  }
  for (int chunk = 0; chunk < layout().num_chunks(); ++chunk) {
    if (taken_[chunk] || !Complete(chunk)) continue;
    float* mean = sum_.data() + layout().begin(chunk);
    const float inverse_weight = static_cast<float>(1.0 / chunk_weight_[chunk]);
    for (int64_t i = 0; i < layout().size(chunk); ++i) mean[i] *= inverse_weight;
    taken_[chunk] = true;
    ++completed_;
    done.push_back(chunk);
  }
  return done;
}

absl::Span<float> DeltaMean::Mean(int chunk) {
  return absl::MakeSpan(sum_).subspan(static_cast<size_t>(layout().begin(chunk)),
                                      static_cast<size_t>(layout().size(chunk)));
}

}  // namespace localsgd
