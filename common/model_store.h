#ifndef LOCALSGD_COMMON_MODEL_STORE_H_
#define LOCALSGD_COMMON_MODEL_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/file_util.h"

namespace localsgd {

// A run's global model and outer optimizer state after a committed round.
struct ModelCheckpoint {
  std::string run_id;
  int64_t round = 0;  // committed rounds (0: the initial model)
  int64_t global_step = 0;
  std::vector<float> global;
  std::vector<float> momentum;  // empty without outer momentum
};

// Keeps the latest ModelCheckpoint in one file (a SavedModel proto under a checksum header,
// written atomically): the coordinator's model.bin and a node leader's checkpoint.bin, so that
// a restarted process resumes from the last committed round it saved. Thread-compatible.
class ModelStore {
 public:
  // Creates `state_dir` if needed.
  static absl::StatusOr<ModelStore> Open(const std::string& state_dir);
  // The store in the file `path`, whose folder exists.
  static ModelStore At(std::string path) { return ModelStore(std::move(path)); }

  // The saved checkpoint, or nullopt when none was saved. A truncated or altered file is
  // DATA_LOSS naming the file.
  absl::StatusOr<std::optional<ModelCheckpoint>> Load() const;

  // The run, round and global step of the saved checkpoint, read from the file's first bytes
  // (nothing else is read or checked: Load checks the whole file); nullopt when none was saved.
  // DATA_LOSS naming the file when they are not there.
  struct Label {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
  };
  absl::StatusOr<std::optional<Label>> Peek() const;

  absl::Status Save(const std::string& run_id, int64_t round, int64_t global_step,
                    absl::Span<const float> global, absl::Span<const float> momentum) const;

  // A save whose values come in pieces (a model too large to copy whole): `global_values`
  // values as the model's bytes, then `momentum_values` as the momentum's. The file is
  // replaced at Commit, which fails unless every value came.
  class Writer {
   public:
    absl::Status AppendGlobal(absl::string_view bytes);
    absl::Status AppendMomentum(absl::string_view bytes);
    absl::Status Commit();

   private:
    friend class ModelStore;
    Writer(ChecksummedFileWriter file, uint64_t global_bytes, uint64_t momentum_bytes)
        : file_(std::move(file)), global_left_(global_bytes), momentum_bytes_(momentum_bytes) {}

    ChecksummedFileWriter file_;
    uint64_t global_left_;
    const uint64_t momentum_bytes_;
    bool momentum_begun_ = false;
  };
  absl::StatusOr<Writer> Begin(const std::string& run_id, int64_t round, int64_t global_step,
                               int64_t global_values, int64_t momentum_values) const;

  const std::string& path() const { return path_; }

 private:
  explicit ModelStore(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_MODEL_STORE_H_
