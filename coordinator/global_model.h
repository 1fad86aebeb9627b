#ifndef LOCALSGD_COORDINATOR_GLOBAL_MODEL_H_
#define LOCALSGD_COORDINATOR_GLOBAL_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/state_writer.h"
#include "exchange/fragment_plan.h"
#include "exchange/model_digest.h"
#include "exchange/range_reducer.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// What the coordinator knows of a run's model (docs/design.md, "Where the model lives"): which
// run, the round and global step, the chunk layout and fragments, each fragment's digest, and
// the immutable snapshot of the last commit that FetchModel and the state writer share without
// copying. A star run's model also has its values and outer momentum (held by the range
// reducer that applies each commit); a sharded run's lives with its members: no values here.
// Thread-compatible: the round manager's lock guards it.
class GlobalModel {
 public:
  // Run `run` at round `round`, global step `global_step`, with no model yet.
  void Reset(const std::string& run_id, const v1::RunSpec& spec, int64_t round,
             int64_t global_step);
  // Installs global[round()] of a star run (and a saved outer momentum, or nullopt for zero)
  // and takes its snapshot. INVALID_ARGUMENT for a momentum that does not fit, or a model with
  // fewer chunks than the spec's fragments (naming `fragments`).
  absl::Status Install(std::vector<float> global, std::optional<std::vector<float>> momentum);
  // Installs what is known of global[round()] of a sharded run: `num_values` values, each
  // fragment's digest (ModelDigest from its first chunk, by fragment), no values. The same
  // errors, and INVALID_ARGUMENT when there is not one digest per fragment.
  absl::Status InstallDigests(int64_t num_values, std::vector<DigestPair> fragment_digests);
  // Each fragment's digest from every chunk's (ChunkDigest, by chunk of the whole model) for a
  // model of `num_values` values cut as this run cuts it.
  absl::StatusOr<std::vector<DigestPair>> FragmentDigests(
      int64_t num_values, const std::vector<DigestPair>& chunk_digests) const;

  // The run's fragments (RunSpec.fragments; one, the whole model, without).
  const FragmentPlan& fragments() const { return fragments_; }
  // The reducer a star round of fragment `f` averages on: without fragments the model's own;
  // with them a new one over a copy of the fragment's values and outer momentum, whose result
  // CommitFragment writes back. Null for a sharded run.
  std::shared_ptr<RangeReducer> RoundReducer(int f) const;
  // A star round of fragment `f` committed on `round` (RoundReducer(f)): with fragments, its
  // values and momentum replace the fragment's in a new model buffer (a copy of the model; the
  // snapshots handed out stay as they were). Without fragments the model's reducer committed
  // already: nothing to do.
  void CommitFragment(int f, const RangeReducer& round);
  // The run is at global[round] of `global_step` (a star run's reducer holds it), fragment `f`
  // synced at that step with `digest` (its ModelDigest from its first chunk): takes the
  // snapshot.
  void Committed(int64_t round, int64_t global_step, int f, DigestPair digest);
  // What the run record keeps of a sharded run's model (RunInfo.model); nullopt for a star run
  // or before a model.
  std::optional<v1::ModelRecord> Record() const;
  // Fragment `f`'s first chunk in the model (0 without fragments).
  int first_chunk(int f) const;
  // The least global step at which every fragment last committed (global_step() without
  // fragments; after a restart, the restored global step for every fragment).
  int64_t synced_step() const;

  const std::string& run_id() const { return run_id_; }
  const v1::RunSpec& spec() const { return spec_; }
  int64_t round() const { return round_; }
  int64_t global_step() const { return global_step_; }
  bool initialised() const { return initialised_; }
  // The whole model's chunks (valid once initialised).
  const ChunkLayout& layout() const { return layout_; }
  // Fragment `f`'s chunks, counted from its first.
  ChunkLayout FragmentLayout(int f) const;
  // The whole vector's reducer of a star run; null until Install, and for a sharded run.
  const std::shared_ptr<RangeReducer>& reducer() const { return reducer_; }
  // The model at round() (without values for a sharded run); null until installed.
  const std::shared_ptr<const ModelSnapshot>& snapshot() const { return snapshot_; }

 private:
  // Sets the layout and fragments of a model of `num_values` values; INVALID_ARGUMENT as
  // Install.
  absl::Status Lay(int64_t num_values);
  void TakeSnapshot();

  std::string run_id_;
  v1::RunSpec spec_;
  int64_t round_ = 0;
  int64_t global_step_ = 0;
  bool initialised_ = false;
  ChunkLayout layout_;
  std::shared_ptr<RangeReducer> reducer_;
  std::shared_ptr<const ModelSnapshot> snapshot_;
  FragmentPlan fragments_;
  std::vector<int64_t> fragment_steps_;       // by fragment: the global step of its last commit
  std::vector<DigestPair> fragment_digests_;  // by fragment: its ModelDigest
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_GLOBAL_MODEL_H_
