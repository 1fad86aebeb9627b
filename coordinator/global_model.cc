#include "coordinator/global_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace localsgd {

void GlobalModel::Reset(const std::string& run_id, const v1::RunSpec& spec, int64_t round,
                        int64_t global_step) {
  run_id_ = run_id;
  spec_ = spec;
  round_ = round;
  global_step_ = global_step;
  initialised_ = false;
  layout_ = ChunkLayout();
  reducer_.reset();
  snapshot_.reset();
  fragments_ = FragmentPlan();
  fragment_steps_.clear();
  fragment_digests_.clear();
}

absl::Status GlobalModel::Lay(int64_t num_values) {
  const ChunkLayout layout = ChunkLayout::ForBytes(num_values, spec_.chunk_bytes());
  LOCALSGD_ASSIGN_OR_RETURN(FragmentPlan fragments,
                            FragmentPlan::Make(layout, std::max(1, spec_.fragments())));
  layout_ = layout;
  fragments_ = std::move(fragments);
  fragment_steps_.assign(static_cast<size_t>(fragments_.size()), global_step_);
  return absl::OkStatus();
}

absl::Status GlobalModel::Install(std::vector<float> global,
                                  std::optional<std::vector<float>> momentum) {
  LOCALSGD_RETURN_IF_ERROR(Lay(static_cast<int64_t>(global.size())));
  RangeReducer::Options options;
  options.layout = layout_;
  options.codec = spec_.codec();
  const v1::OuterOptimizerSpec& outer = spec_.outer_optimizer();
  options.outer = OuterOptimizer{outer.lr(), outer.momentum(), outer.nesterov()};
  options.max_norm_ratio = spec_.max_delta_norm_ratio();
  options.trim_fraction = spec_.trimmed_mean_fraction();
  auto reducer = std::make_shared<RangeReducer>(options, std::move(global));
  if (momentum.has_value()) {
    LOCALSGD_RETURN_IF_ERROR(reducer->RestoreMomentum(*std::move(momentum)));
  }
  reducer_ = std::move(reducer);
  fragment_digests_.clear();
  for (int f = 0; f < fragments_.size(); ++f) {
    const size_t begin = static_cast<size_t>(fragments_.begin(f));
    const size_t values = static_cast<size_t>(fragments_.values(f));
    const absl::Span<const float> momentum = reducer_->momentum();
    fragment_digests_.push_back(
        ModelDigest(reducer_->global().subspan(begin, values),
                    momentum.empty() ? momentum : momentum.subspan(begin, values),
                    FragmentLayout(f), first_chunk(f)));
  }
  initialised_ = true;
  TakeSnapshot();
  return absl::OkStatus();
}

absl::Status GlobalModel::InstallDigests(int64_t num_values,
                                         std::vector<DigestPair> fragment_digests) {
  LOCALSGD_RETURN_IF_ERROR(Lay(num_values));
  if (fragment_digests.size() != static_cast<size_t>(fragments_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("fragment digests: ", fragment_digests.size(),
                                                   " for ", fragments_.size(), " fragments"));
  }
  reducer_.reset();
  fragment_digests_ = std::move(fragment_digests);
  initialised_ = true;
  TakeSnapshot();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DigestPair>> GlobalModel::FragmentDigests(
    int64_t num_values, const std::vector<DigestPair>& chunk_digests) const {
  const ChunkLayout layout = ChunkLayout::ForBytes(num_values, spec_.chunk_bytes());
  LOCALSGD_ASSIGN_OR_RETURN(FragmentPlan fragments,
                            FragmentPlan::Make(layout, std::max(1, spec_.fragments())));
  if (chunk_digests.size() != static_cast<size_t>(layout.num_chunks())) {
    return absl::InvalidArgumentError(absl::StrCat("chunk digests: ", chunk_digests.size(), " for ",
                                                   layout.num_chunks(), " chunks"));
  }
  RangeDigests digests(layout.num_chunks(), 0);
  for (int c = 0; c < layout.num_chunks(); ++c) digests.Set(c, chunk_digests[c]);
  std::vector<DigestPair> out;
  for (int f = 0; f < fragments.size(); ++f) {
    const int first = static_cast<int>(fragments.begin(f) / layout.chunk_values);
    const int chunks = ChunkLayout{fragments.values(f), layout.chunk_values}.num_chunks();
    out.push_back(digests.Of(first, first + chunks));
  }
  return out;
}

ChunkLayout GlobalModel::FragmentLayout(int f) const {
  return ChunkLayout{fragments_.values(f), layout_.chunk_values};
}

std::shared_ptr<RangeReducer> GlobalModel::RoundReducer(int f) const {
  if (reducer_ == nullptr || fragments_.size() == 1) return reducer_;
  RangeReducer::Options options = reducer_->options();
  const size_t begin = static_cast<size_t>(fragments_.begin(f));
  const size_t values = static_cast<size_t>(fragments_.values(f));
  options.layout = FragmentLayout(f);
  const absl::Span<const float> global = reducer_->global().subspan(begin, values);
  auto round =
      std::make_shared<RangeReducer>(options, std::vector<float>(global.begin(), global.end()));
  if (const absl::Span<const float> momentum = reducer_->momentum(); !momentum.empty()) {
    const absl::Span<const float> part = momentum.subspan(begin, values);
    // The model's own momentum, already checked: it fits.
    round->RestoreMomentum(std::vector<float>(part.begin(), part.end())).IgnoreError();
  }
  return round;
}

void GlobalModel::CommitFragment(int f, const RangeReducer& round) {
  if (reducer_ == nullptr || fragments_.size() == 1) return;
  const auto replaced = [&](absl::Span<const float> whole, absl::Span<const float> part) {
    std::shared_ptr<std::vector<float>> next = reducer_->SpareBuffer(whole.size());
    std::copy(whole.begin(), whole.end(), next->begin());
    std::copy(part.begin(), part.end(), next->begin() + fragments_.begin(f));
    return next;
  };
  std::shared_ptr<std::vector<float>> momentum =
      reducer_->momentum().empty() ? nullptr : replaced(reducer_->momentum(), round.momentum());
  reducer_->InstallNext(replaced(reducer_->global(), round.global()), std::move(momentum));
}

void GlobalModel::Committed(int64_t round, int64_t global_step, int f, DigestPair digest) {
  round_ = round;
  global_step_ = global_step;
  fragment_steps_[f] = global_step;
  fragment_digests_[f] = digest;
  TakeSnapshot();
}

std::optional<v1::ModelRecord> GlobalModel::Record() const {
  if (!initialised_ || reducer_ != nullptr) return std::nullopt;
  v1::ModelRecord record;
  record.set_vector_length(layout_.num_values);
  for (const DigestPair& digest : fragment_digests_) {
    record.add_fragment_digests(digest.with_momentum);
    record.add_fragment_value_digests(digest.values);
  }
  return record;
}

int GlobalModel::first_chunk(int f) const {
  return static_cast<int>(fragments_.begin(f) / layout_.chunk_values);
}

int64_t GlobalModel::synced_step() const {
  return *std::min_element(fragment_steps_.begin(), fragment_steps_.end());
}

void GlobalModel::TakeSnapshot() {
  auto snapshot = std::make_shared<ModelSnapshot>();
  snapshot->run_id = run_id_;
  snapshot->round = round_;
  snapshot->global_step = global_step_;
  snapshot->layout = layout_;
  snapshot->has_momentum = spec_.outer_optimizer().momentum() != 0;
  if (reducer_ != nullptr) {
    snapshot->values = reducer_->global_buffer();
    snapshot->momentum = reducer_->momentum_buffer();
  }
  for (const DigestPair& fragment : fragment_digests_) {
    snapshot->digest = RangeDigests::Combine(snapshot->digest, fragment);
  }
  snapshot_ = std::move(snapshot);
}

}  // namespace localsgd
