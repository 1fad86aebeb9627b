#include "coordinator/global_model.h"

#include <utility>

#include "common/status_macros.h"

namespace localsgd {

void GlobalModel::Reset(const std::string& run_id, const v1::RunSpec& spec, int64_t round,
                        int64_t global_step) {
  run_id_ = run_id;
  spec_ = spec;
  round_ = round;
  global_step_ = global_step;
  reducer_.reset();
  snapshot_.reset();
}

absl::Status GlobalModel::Install(std::vector<float> global,
                                  std::optional<std::vector<float>> momentum) {
  RangeReducer::Options options;
  options.layout = ChunkLayout::ForBytes(static_cast<int64_t>(global.size()), spec_.chunk_bytes());
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
  TakeSnapshot();
  return absl::OkStatus();
}

void GlobalModel::Committed(int64_t round, int64_t global_step) {
  round_ = round;
  global_step_ = global_step;
  TakeSnapshot();
}

void GlobalModel::TakeSnapshot() {
  auto snapshot = std::make_shared<ModelSnapshot>();
  snapshot->run_id = run_id_;
  snapshot->round = round_;
  snapshot->global_step = global_step_;
  snapshot->layout = reducer_->layout();
  snapshot->values = reducer_->global_buffer();
  snapshot->momentum = reducer_->momentum_buffer();
  snapshot_ = std::move(snapshot);
}

}  // namespace localsgd
