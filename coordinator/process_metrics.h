#ifndef LOCALSGD_COORDINATOR_PROCESS_METRICS_H_
#define LOCALSGD_COORDINATOR_PROCESS_METRICS_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace localsgd {

// This process as Prometheus' process_* metrics describe it, read from /proc (Linux).
struct ProcessStats {
  double cpu_seconds = 0;  // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // since the Unix epoch
  int64_t open_fds = 0;
  int64_t max_fds = 0;
};

// UNAVAILABLE when /proc cannot be read.
absl::StatusOr<ProcessStats> ReadProcessStats();

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_PROCESS_METRICS_H_
