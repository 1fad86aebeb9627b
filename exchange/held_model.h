#ifndef LOCALSGD_EXCHANGE_HELD_MODEL_H_
#define LOCALSGD_EXCHANGE_HELD_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace localsgd {

// The committed model a node leader holds (docs/design.md, "Where the model lives"): global[r]
// of its run, the outer momentum when members keep it, and the round and global step it
// belongs to; its data plane serves it to members that fetch it (DataPlane.FetchRange).
// One writer, the node leader's thread: it reads the model without the lock and changes it only
// through Install and Commit, which take it. Other threads read through Label and Read, under it.
class HeldModel {
 public:
  // Replaces the model (the initial model, an adoption); `momentum` empty without one.
  void Install(std::string run_id, int64_t round, int64_t global_step, std::vector<float> values,
               std::vector<float> momentum);
  // Round `round` committed at `global_step`: `apply` changes the values and momentum in place,
  // under the lock, and the model is then labelled with the round.
  void Commit(int64_t round, int64_t global_step, absl::FunctionRef<void()> apply);

  // The writer's view (its thread only; the spans stay valid until the next Install).
  std::vector<float>& values() ABSL_NO_THREAD_SAFETY_ANALYSIS { return values_; }
  std::vector<float>& momentum() ABSL_NO_THREAD_SAFETY_ANALYSIS { return momentum_; }
  int64_t round() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return round_; }
  int64_t global_step() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return global_step_; }

  // What a reader is served.
  struct Label {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
    int64_t num_values = 0;
    bool has_momentum = false;
  };
  // The model's label when it is round `round` of run `run_id`; FAILED_PRECONDITION (saying what
  // it holds) otherwise.
  absl::StatusOr<Label> Check(const std::string& run_id, int64_t round) const;
  // Copies `count` values from `begin` of the model (or of its momentum) to `out` as bytes,
  // if it is still round `round` of `run_id`: FAILED_PRECONDITION once it moved on.
  // INVALID_ARGUMENT for values it does not have.
  absl::Status Read(const std::string& run_id, int64_t round, bool momentum, int64_t begin,
                    int64_t count, std::string* out) const;

 private:
  absl::Status CheckLocked(const std::string& run_id, int64_t round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::string run_id_ ABSL_GUARDED_BY(mu_);
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<float> values_ ABSL_GUARDED_BY(mu_);
  std::vector<float> momentum_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_HELD_MODEL_H_
