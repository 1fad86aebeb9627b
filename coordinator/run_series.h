#ifndef LOCALSGD_COORDINATOR_RUN_SERIES_H_
#define LOCALSGD_COORDINATOR_RUN_SERIES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// One run's rounds for charts, in bounded memory however long the run: when `capacity`
// points are kept, every other one is dropped and from then on only every second round is
// kept (every fourth after the next halving, and so on), so the points stay evenly spread
// over the whole run. The latest round is always shown. Thread-compatible.
class RunSeries {
 public:
  // capacity >= 2.
  explicit RunSeries(size_t capacity);

  void Add(v1::SeriesPoint point);
  // Oldest first; the latest round last.
  std::vector<v1::SeriesPoint> Points() const;
  // Rounds added, kept or not.
  int64_t added() const { return added_; }

 private:
  const size_t capacity_;
  int64_t stride_ = 1;
  int64_t added_ = 0;
  std::vector<v1::SeriesPoint> kept_;
  std::optional<v1::SeriesPoint> latest_;  // when not kept
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_RUN_SERIES_H_
