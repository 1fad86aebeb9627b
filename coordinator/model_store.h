#ifndef LOCALSGD_COORDINATOR_MODEL_STORE_H_
#define LOCALSGD_COORDINATOR_MODEL_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace localsgd {

// The global model and outer optimizer state of the active run after a committed round.
struct ModelCheckpoint {
  std::string run_id;
  int64_t round = 0;  // committed rounds (0: the initial model)
  int64_t global_step = 0;
  std::vector<float> global;
  std::vector<float> momentum;  // empty without outer momentum
};

// Keeps the latest ModelCheckpoint in the state directory (model.bin: a SavedModel proto
// under a checksum header, written atomically), so that a restarted coordinator resumes from
// the last committed round instead of losing the run's model. Thread-compatible.
class ModelStore {
 public:
  // Creates `state_dir` if needed.
  static absl::StatusOr<ModelStore> Open(const std::string& state_dir);
  // The store in the file `path`, whose folder exists.
  static ModelStore At(std::string path) { return ModelStore(std::move(path)); }

  // The saved checkpoint, or nullopt when none was saved. A truncated or altered file is
  // DATA_LOSS naming the file.
  absl::StatusOr<std::optional<ModelCheckpoint>> Load() const;

  absl::Status Save(const std::string& run_id, int64_t round, int64_t global_step,
                    absl::Span<const float> global, absl::Span<const float> momentum) const;

  const std::string& path() const { return path_; }

 private:
  explicit ModelStore(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_MODEL_STORE_H_
