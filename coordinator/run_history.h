#ifndef LOCALSGD_COORDINATOR_RUN_HISTORY_H_
#define LOCALSGD_COORDINATOR_RUN_HISTORY_H_

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "coordinator/run_series.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The runs a coordinator knows, newest first, and each recent run's series of rounds
// (docs/design.md, "Status"). Bounded: at most `max_runs` records and the series of the
// `max_series` newest runs, each of at most `max_points` points. Thread-compatible.
class RunHistory {
 public:
  struct Options {
    size_t max_runs = 100;
    size_t max_series = 20;
    size_t max_points = 2000;
  };
  explicit RunHistory(Options options) : options_(options) {}

  // Adds `run` as the newest, or replaces the record of the same run id where it stands.
  void Upsert(const v1::RunInfo& run);
  // Starts keeping the series of a run Upsert has seen (a run that starts; not one read back
  // from disk, whose rounds were not saved).
  void StartSeries(const std::string& run_id);
  // Newest first.
  const std::deque<v1::RunInfo>& runs() const { return runs_; }
  const v1::RunInfo* Find(const std::string& run_id) const;

  // Adds a round to the series of `run_id` (a run Upsert has seen; others are ignored).
  void AddPoint(const std::string& run_id, v1::SeriesPoint point);
  // Nullptr when the run is unknown or its series was dropped.
  const RunSeries* Series(const std::string& run_id) const;

 private:
  const Options options_;
  std::deque<v1::RunInfo> runs_;
  std::map<std::string, RunSeries> series_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_RUN_HISTORY_H_
