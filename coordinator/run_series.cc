#include "coordinator/run_series.h"

#include <algorithm>
#include <utility>

namespace localsgd {

RunSeries::RunSeries(size_t capacity) : capacity_(std::max<size_t>(capacity, 2)) {}

void RunSeries::Add(v1::SeriesPoint point) {
  if (added_++ % stride_ != 0) {
    latest_ = std::move(point);
    return;
  }
  latest_.reset();
  kept_.push_back(std::move(point));
  if (kept_.size() < capacity_) return;
  // Keep points 0, 2, 4, ...: the rounds a stride twice as long keeps. The latest, when
  // dropped so, is still shown.
  if (kept_.size() % 2 == 0) latest_ = kept_.back();
  size_t out = 0;
  for (size_t i = 0; i < kept_.size(); i += 2) kept_[out++] = std::move(kept_[i]);
  kept_.resize(out);
  stride_ *= 2;
}

std::vector<v1::SeriesPoint> RunSeries::Points() const {
  std::vector<v1::SeriesPoint> points = kept_;
  if (latest_.has_value()) points.push_back(*latest_);
  return points;
}

}  // namespace localsgd
