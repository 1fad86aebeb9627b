#ifndef LOCALSGD_COORDINATOR_RUN_STORE_H_
#define LOCALSGD_COORDINATOR_RUN_STORE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/localsgd/v1/state.pb.h"

namespace localsgd {

// Keeps the run record (spec, state, counters) and the members in a state directory so that a
// restarted coordinator shows, and carries on, the same run. The file, state.textproto, is
// text-format protobuf under a checksum header, written atomically. Thread-compatible.
class RunStore {
 public:
  // Creates `state_dir` if needed.
  static absl::StatusOr<RunStore> Open(const std::string& state_dir);

  // The saved state, or nullopt when none was ever saved. A truncated or altered file, or one
  // that does not parse, is DATA_LOSS naming the file: it is never silently replaced.
  absl::StatusOr<std::optional<v1::SavedState>> Load() const;

  absl::Status Save(const v1::SavedState& state) const;

  const std::string& path() const { return path_; }

 private:
  explicit RunStore(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_RUN_STORE_H_
