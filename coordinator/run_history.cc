#include "coordinator/run_history.h"

#include <utility>

namespace localsgd {

void RunHistory::Upsert(const v1::RunInfo& run) {
  for (v1::RunInfo& known : runs_) {
    if (known.run_id() == run.run_id()) {
      known = run;
      return;
    }
  }
  runs_.push_front(run);
  while (runs_.size() > options_.max_runs) {
    series_.erase(runs_.back().run_id());
    runs_.pop_back();
  }
  // Series of runs older than the max_series newest go first.
  for (size_t i = options_.max_series; i < runs_.size(); ++i) series_.erase(runs_[i].run_id());
}

void RunHistory::StartSeries(const std::string& run_id) {
  for (size_t i = 0; i < runs_.size() && i < options_.max_series; ++i) {
    if (runs_[i].run_id() == run_id) series_.try_emplace(run_id, options_.max_points);
  }
}

const v1::RunInfo* RunHistory::Find(const std::string& run_id) const {
  for (const v1::RunInfo& run : runs_) {
    if (run.run_id() == run_id) return &run;
  }
  return nullptr;
}

void RunHistory::AddPoint(const std::string& run_id, v1::SeriesPoint point) {
  auto it = series_.find(run_id);
  if (it != series_.end()) it->second.Add(std::move(point));
}

const RunSeries* RunHistory::Series(const std::string& run_id) const {
  auto it = series_.find(run_id);
  return it == series_.end() ? nullptr : &it->second;
}

}  // namespace localsgd
