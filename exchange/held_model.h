#ifndef LOCALSGD_EXCHANGE_HELD_MODEL_H_
#define LOCALSGD_EXCHANGE_HELD_MODEL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "exchange/chunking.h"

namespace localsgd {

// The committed model a node leader holds (docs/design.md, "Where the model lives"): global[r]
// of its run, the outer momentum when members keep it, and the round and global step it
// belongs to; its data plane serves it to members that fetch it (DataPlane.FetchRange).
// One writer, the node leader's thread: it reads the model without the lock and changes it only
// through Install and Commit, which take it. Readers on other threads go through leases: a
// lease reads one round of one range to its end, even when the model moves on meanwhile (the
// commit first copies aside what the lease has yet to read). Thread-safe.
class HeldModel {
 public:
  // Called after every Install and Commit, on the writer's thread, with the model's run, round
  // and global step (e.g. to checkpoint it). Set once, before the model is first installed.
  using OnChange =
      std::function<void(const std::string& run_id, int64_t round, int64_t global_step)>;
  void set_on_change(OnChange on_change) { on_change_ = std::move(on_change); }

  // Replaces the model (the initial model, an adoption); `momentum` empty without one.
  void Install(std::string run_id, int64_t round, int64_t global_step, std::vector<float> values,
               std::vector<float> momentum);
  // Round `round` committed at `global_step`: `apply` changes the values and momentum in place,
  // under the lock, and the model is then labelled with the round.
  void Commit(int64_t round, int64_t global_step, absl::FunctionRef<void()> apply);

  // The writer's view (its thread only; the spans stay valid until the next Install).
  std::vector<float>& values() ABSL_NO_THREAD_SAFETY_ANALYSIS { return values_; }
  std::vector<float>& momentum() ABSL_NO_THREAD_SAFETY_ANALYSIS { return momentum_; }
  const std::string& run_id() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return run_id_; }
  int64_t round() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return round_; }
  int64_t global_step() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return global_step_; }

  // A lease on chunks [begin_chunk, end_chunk) of round `round`, cut by ChunkLayout{size,
  // chunk_values}.
  struct Lease {
    int64_t id = 0;
    int64_t global_step = 0;
    ChunkLayout layout;  // the whole model's
    bool has_momentum = false;
  };
  // A lease on chunks [begin_chunk, end_chunk) of round `round` of run `run_id` (and of its
  // momentum, when `momentum` and the model has one; `end_chunk` -1: to the model's end):
  // FAILED_PRECONDITION (saying what it holds) when it holds another round or run;
  // INVALID_ARGUMENT for chunks outside the model.
  absl::StatusOr<Lease> Open(const std::string& run_id, int64_t round, int64_t chunk_values,
                             int begin_chunk, int end_chunk, bool momentum);
  // Copies the lease's next chunk of the model (or of its momentum) to `out` as bytes: each of
  // the two is read in order, from begin_chunk. Its index; OUT_OF_RANGE after the last.
  absl::StatusOr<int> Read(int64_t lease, bool momentum, std::string* out);
  void Close(int64_t lease);

 private:
  struct Reader {
    ChunkLayout layout;
    int end_chunk = 0;
    bool momentum = false;
    int next[2] = {0, 0};  // by buffer (values, momentum): the next chunk to read
    // After a commit: what was left to read, from the value aside_from[b] to the range's end.
    bool detached = false;
    std::vector<float> aside[2];
    int64_t aside_from[2] = {0, 0};
  };
  // The model is about to change: every lease copies aside what it has yet to read.
  void DetachReaders() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::string run_id_ ABSL_GUARDED_BY(mu_);
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<float> values_ ABSL_GUARDED_BY(mu_);
  std::vector<float> momentum_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Reader> readers_ ABSL_GUARDED_BY(mu_);
  OnChange on_change_;
  int64_t next_lease_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_HELD_MODEL_H_
