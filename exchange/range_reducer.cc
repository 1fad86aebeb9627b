#include "exchange/range_reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "exchange/codec.h"

namespace localsgd {

RangeReducer::RangeReducer(Options options, std::vector<float> global)
    : options_(options),
      global_(std::make_shared<std::vector<float>>(std::move(global))),
      momentum_(std::make_shared<std::vector<float>>()),
      pending_momentum_(std::make_shared<std::vector<float>>()) {
  const size_t n = static_cast<size_t>(options_.layout.num_values);
  global_->resize(n);
  sum_.assign(n, 0.0f);
  pending_update_.assign(n, 0.0f);
  if (options_.outer.momentum != 0) {
    momentum_->assign(n, 0.0f);
    pending_momentum_->assign(n, 0.0f);
  }
  encoded_update_.resize(static_cast<size_t>(options_.layout.num_chunks()));
}

std::shared_ptr<const std::vector<float>> RangeReducer::momentum_buffer() const {
  if (momentum_->empty()) return nullptr;
  return momentum_;
}

void RangeReducer::Recycle(std::shared_ptr<std::vector<float>> buffer) {
  constexpr size_t kMaxSpares = 3;
  if (buffer == nullptr || buffer->empty()) return;
  spares_.push_back(std::move(buffer));
  if (spares_.size() > kMaxSpares) spares_.erase(spares_.begin());
}

std::shared_ptr<std::vector<float>> RangeReducer::SpareBuffer(size_t size) {
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    // Nobody else holds it (and nobody can take it again: only this engine hands it out).
    if (it->use_count() == 1 && (*it)->size() == size) {
      std::shared_ptr<std::vector<float>> spare = std::move(*it);
      spares_.erase(it);
      return spare;
    }
  }
  return std::make_shared<std::vector<float>>(size);
}

absl::Status RangeReducer::RestoreMomentum(std::vector<float> momentum) {
  if (momentum.size() != momentum_->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "momentum: ", momentum.size(), " values, the outer optimizer keeps ", momentum_->size()));
  }
  if (!std::all_of(momentum.begin(), momentum.end(), [](float v) { return std::isfinite(v); })) {
    return absl::InvalidArgumentError("momentum: NaN or infinity");
  }
  momentum_ = std::make_shared<std::vector<float>>(std::move(momentum));
  return absl::OkStatus();
}

void RangeReducer::BeginRound(int num_members) {
  const int chunks = layout().num_chunks();
  num_members_ = num_members;
  weights_.assign(static_cast<size_t>(num_members), 0.0);
  dropped_.assign(static_cast<size_t>(num_members), false);
  got_.assign(static_cast<size_t>(chunks), std::vector<bool>(static_cast<size_t>(num_members)));
  chunk_weight_.assign(static_cast<size_t>(chunks), 0.0);
  finalized_.assign(static_cast<size_t>(chunks), false);
  std::fill(sum_.begin(), sum_.end(), 0.0f);
  completed_ = 0;
  if (holding()) {
    held_.assign(static_cast<size_t>(num_members), {});
    norm2_.assign(static_cast<size_t>(num_members), 0.0);
    reduced_ = false;
    exclusions_.clear();
  }
}

absl::Status RangeReducer::SetWeight(int slot, double weight) {
  if (slot < 0 || slot >= num_members_) return absl::InvalidArgumentError("member: no such slot");
  if (!std::isfinite(weight) || weight <= 0 || weight > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight: must be > 0 and at most the largest float, got ", weight));
  }
  weights_[slot] = weight;
  return absl::OkStatus();
}

absl::Status RangeReducer::DecodeChunk(int chunk, absl::string_view encoded,
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

absl::Status RangeReducer::Check(int chunk, absl::string_view encoded,
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

absl::Status RangeReducer::Add(int slot, int chunk, absl::string_view encoded,
                               const std::vector<float>& scratch) {
  return options_.codec == v1::CODEC_FP32 ? AccumulateFp32(slot, chunk, encoded)
                                          : Accumulate(slot, chunk, scratch);
}

absl::Status RangeReducer::Admit(int slot, int chunk, size_t values) {
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

absl::Status RangeReducer::Accumulate(int slot, int chunk, absl::Span<const float> decoded) {
  LOCALSGD_RETURN_IF_ERROR(Admit(slot, chunk, decoded.size()));
  Add(slot, chunk, decoded.data(), decoded.size(), /*from_bytes=*/false);
  return absl::OkStatus();
}

absl::Status RangeReducer::AccumulateFp32(int slot, int chunk, absl::string_view bytes) {
  LOCALSGD_RETURN_IF_ERROR(Admit(slot, chunk, bytes.size() / sizeof(float)));
  // The bytes may be unaligned: read them through memcpy.
  Add(slot, chunk, reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float),
      /*from_bytes=*/true);
  return absl::OkStatus();
}

void RangeReducer::Add(int slot, int chunk, const float* values, size_t n, bool from_bytes) {
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

std::vector<bool> RangeReducer::Screen(const std::vector<int>& members) {
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

void RangeReducer::ReduceHeld() {
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

void RangeReducer::TrimmedSums(const std::vector<int>& counted) {
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

void RangeReducer::Drop(int slot) {
  if (slot >= 0 && slot < num_members_) dropped_[slot] = true;
}

int RangeReducer::active_members() const {
  return static_cast<int>(std::count(dropped_.begin(), dropped_.end(), false));
}

bool RangeReducer::Complete(int chunk) const {
  if (chunk_weight_[chunk] <= 0) return false;  // nobody's delta: cannot average
  for (int slot = 0; slot < num_members_; ++slot) {
    if (!dropped_[slot] && !got_[chunk][slot]) return false;
  }
  return true;
}

absl::StatusOr<std::vector<int>> RangeReducer::TakeCompleted() {
  std::vector<int> done;
  if (holding() && !reduced_) {
    for (int chunk = 0; chunk < layout().num_chunks(); ++chunk) {
      if (!Complete(chunk)) return done;
    }
    ReduceHeld();
  }
  for (int chunk = 0; chunk < layout().num_chunks(); ++chunk) {
    if (!finalized_[chunk] && Complete(chunk)) {
      LOCALSGD_RETURN_IF_ERROR(Finalize(chunk));
      done.push_back(chunk);
    }
  }
  return done;
}

absl::Status RangeReducer::Finalize(int chunk) {
  const int64_t begin = layout().begin(chunk);
  const size_t n = static_cast<size_t>(layout().size(chunk));
  float* update = pending_update_.data() + begin;
  const float* sum = sum_.data() + begin;
  const float inverse_weight = static_cast<float>(1.0 / chunk_weight_[chunk]);
  if (momentum_->empty()) {
    for (size_t i = 0; i < n; ++i) {
      update[i] = OuterUpdate(options_.outer, sum[i] * inverse_weight, 0.0f, nullptr);
    }
  } else {
    if (pending_momentum_.use_count() > 1 || pending_momentum_->size() != momentum_->size()) {
      pending_momentum_ = SpareBuffer(momentum_->size());  // the old one is still held
    }
    const float* old_momentum = momentum_->data() + begin;
    float* new_momentum = pending_momentum_->data() + begin;
    for (size_t i = 0; i < n; ++i) {
      update[i] =
          OuterUpdate(options_.outer, sum[i] * inverse_weight, old_momentum[i], &new_momentum[i]);
    }
  }
  // Finite deltas can still sum past fp32's range; such an update must not reach the model.
  // The chunk of the next model is written here, as the chunk completes (fp32: in the same
  // pass), so that Commit only swaps buffers.
  const float* global = global_->data() + begin;
  const bool fp32 = options_.codec == v1::CODEC_FP32;
  float* next = nullptr;
  if (options_.holds_model) {
    if (next_global_ == nullptr) next_global_ = SpareBuffer(global_->size());
    next = next_global_->data() + begin;
  }
  bool finite = true;
  if (next != nullptr && fp32) {
    for (size_t i = 0; i < n; ++i) {
      next[i] = global[i] + update[i];
      finite &= std::isfinite(next[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) finite &= std::isfinite(global[i] + update[i]);
  }
  if (!finite) {
    return absl::OutOfRangeError(absl::StrCat(
        "update of chunk ", chunk, " overflows fp32 (the members' deltas are too large)"));
  }
  // Encode once; every member and this engine apply exactly the decoded bytes, so all copies
  // of global[r] stay bit-identical whatever the codec.
  std::string& encoded = encoded_update_[chunk];
  encoded.clear();
  Encode(options_.codec, absl::MakeConstSpan(update, n), &encoded);
  if (!fp32) {
    // Fails only when the update does not fit the codec (fp16 beyond 65504).
    absl::Status status = Decode(options_.codec, encoded, absl::MakeSpan(update, n));
    if (!status.ok()) {
      return absl::OutOfRangeError(
          absl::StrCat("update of chunk ", chunk, " does not fit ", CodecName(options_.codec)));
    }
    if (next != nullptr) {
      for (size_t i = 0; i < n; ++i) next[i] = global[i] + update[i];
    }
  }
  finalized_[chunk] = true;
  ++completed_;
  return absl::OkStatus();
}

void RangeReducer::Commit() {
  Recycle(std::exchange(global_, std::move(next_global_)));
  next_global_ = nullptr;
  if (!momentum_->empty()) momentum_.swap(pending_momentum_);
  num_members_ = 0;
}

void RangeReducer::Abort() {
  Recycle(std::move(next_global_));
  next_global_ = nullptr;
  num_members_ = 0;
}

void RangeReducer::InstallNext(std::shared_ptr<std::vector<float>> global,
                               std::shared_ptr<std::vector<float>> momentum) {
  Recycle(std::exchange(global_, std::move(global)));
  if (!momentum_->empty()) Recycle(std::exchange(momentum_, std::move(momentum)));
  Recycle(std::move(next_global_));
  next_global_ = nullptr;
}

}  // namespace localsgd
