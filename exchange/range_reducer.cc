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
      deltas_(DeltaMean::Options{options.layout, options.codec, options.max_norm_ratio,
                                 options.trim_fraction}),
      global_(std::make_shared<std::vector<float>>(std::move(global))),
      momentum_(std::make_shared<std::vector<float>>()),
      pending_momentum_(std::make_shared<std::vector<float>>()) {
  const size_t n = static_cast<size_t>(options_.layout.num_values);
  global_->resize(n);
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
  deltas_.BeginRound(num_members);
  finalized_ = 0;
}

absl::StatusOr<std::vector<int>> RangeReducer::TakeCompleted() {
  std::vector<int> done = deltas_.TakeCompleted();
  for (int chunk : done) {
    LOCALSGD_RETURN_IF_ERROR(Finalize(chunk));
    ++finalized_;
  }
  return done;
}

absl::Status RangeReducer::Finalize(int chunk) {
  const int64_t begin = layout().begin(chunk);
  const size_t n = static_cast<size_t>(layout().size(chunk));
  float* update = pending_update_.data() + begin;
  const float* mean = deltas_.Mean(chunk).data();
  if (momentum_->empty()) {
    for (size_t i = 0; i < n; ++i) {
      update[i] = OuterUpdate(options_.outer, mean[i], 0.0f, nullptr);
    }
  } else {
    if (pending_momentum_.use_count() > 1 || pending_momentum_->size() != momentum_->size()) {
      pending_momentum_ = SpareBuffer(momentum_->size());  // the old one is still held
    }
    const float* old_momentum = momentum_->data() + begin;
    float* new_momentum = pending_momentum_->data() + begin;
    for (size_t i = 0; i < n; ++i) {
      update[i] = OuterUpdate(options_.outer, mean[i], old_momentum[i], &new_momentum[i]);
    }
  }
  // Finite deltas can still sum past fp32's range; such an update must not reach the model.
  // The chunk of the next model is written here, as the chunk completes (fp32: in the same
  // pass), so that Commit only swaps buffers.
  const float* global = global_->data() + begin;
  const bool fp32 = options_.codec == v1::CODEC_FP32;
  if (next_global_ == nullptr) next_global_ = SpareBuffer(global_->size());
  float* next = next_global_->data() + begin;
  bool finite = true;
  if (fp32) {
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
  // Encoded once; every member and this engine apply exactly the decoded bytes, so all copies
  // of global[r] stay bit-identical whatever the codec.
  LOCALSGD_RETURN_IF_ERROR(
      EncodeUpdate(options_.codec, chunk, absl::MakeSpan(update, n), &encoded_update_[chunk]));
  if (!fp32) {
    for (size_t i = 0; i < n; ++i) next[i] = global[i] + update[i];
  }
  return absl::OkStatus();
}

void RangeReducer::Commit() {
  Recycle(std::exchange(global_, std::move(next_global_)));
  next_global_ = nullptr;
  if (!momentum_->empty()) momentum_.swap(pending_momentum_);
  deltas_.EndRound();
  finalized_ = 0;
}

void RangeReducer::Abort() {
  Recycle(std::move(next_global_));
  next_global_ = nullptr;
  deltas_.EndRound();
  finalized_ = 0;
}

void RangeReducer::InstallNext(std::shared_ptr<std::vector<float>> global,
                               std::shared_ptr<std::vector<float>> momentum) {
  Recycle(std::exchange(global_, std::move(global)));
  if (!momentum_->empty()) Recycle(std::exchange(momentum_, std::move(momentum)));
  Recycle(std::move(next_global_));
  next_global_ = nullptr;
}

}  // namespace localsgd
