#ifndef LOCALSGD_COORDINATOR_GLOBAL_MODEL_H_
#define LOCALSGD_COORDINATOR_GLOBAL_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/state_writer.h"
#include "exchange/fragment_plan.h"
#include "exchange/model_digest.h"
#include "exchange/range_reducer.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The coordinator's copy of a run's model (docs/design.md, "The coordinator's model"): which
// run, global[round] and the outer momentum (held by the range reducer that applies each
// commit), the round and global step, and the immutable snapshot of the last commit that
// FetchModel and the state writer share without copying. Thread-compatible: the round
// manager's lock guards it.
class GlobalModel {
 public:
  // Run `run` at round `round`, global step `global_step`, with no model yet.
  void Reset(const std::string& run_id, const v1::RunSpec& spec, int64_t round,
             int64_t global_step);
  // Installs global[round()] (and a saved outer momentum, or nullopt for zero) and takes its
  // snapshot. INVALID_ARGUMENT for a momentum that does not fit, or a model with fewer chunks
  // than the spec's fragments (naming `fragments`).
  absl::Status Install(std::vector<float> global, std::optional<std::vector<float>> momentum);

  // The run's fragments (RunSpec.fragments; one, the whole model, without).
  const FragmentPlan& fragments() const { return fragments_; }
  // The reducer a round of fragment `f` averages on: without fragments the model's own; with
  // them a new one over a copy of the fragment's values and outer momentum, whose result
  // CommitFragment writes back.
  std::shared_ptr<RangeReducer> RoundReducer(int f) const;
  // A round of fragment `f` committed on `round` (RoundReducer(f)): with fragments, its values
  // and momentum replace the fragment's in a new model buffer (a copy of the model; the
  // snapshots handed out stay as they were). Without fragments the model's reducer committed
  // already: nothing to do.
  void CommitFragment(int f, const RangeReducer& round);
  // The reducer now holds global[round] of `global_step`, fragment `f` synced at that step
  // with `digest` (its ModelDigest from its first chunk): takes the snapshot.
  void Committed(int64_t round, int64_t global_step, int f, DigestPair digest);
  // Fragment `f`'s first chunk in the model (0 without fragments).
  int first_chunk(int f) const;
  // The least global step at which every fragment last committed (global_step() without
  // fragments; after a restart, the restored global step for every fragment).
  int64_t synced_step() const;

  const std::string& run_id() const { return run_id_; }
  const v1::RunSpec& spec() const { return spec_; }
  int64_t round() const { return round_; }
  int64_t global_step() const { return global_step_; }
  bool initialised() const { return reducer_ != nullptr; }
  // The whole vector's reducer; null until Install.
  const std::shared_ptr<RangeReducer>& reducer() const { return reducer_; }
  // The model at round(); null until Install.
  const std::shared_ptr<const ModelSnapshot>& snapshot() const { return snapshot_; }

 private:
  void TakeSnapshot();

  std::string run_id_;
  v1::RunSpec spec_;
  int64_t round_ = 0;
  int64_t global_step_ = 0;
  std::shared_ptr<RangeReducer> reducer_;
  std::shared_ptr<const ModelSnapshot> snapshot_;
  FragmentPlan fragments_;
  std::vector<int64_t> fragment_steps_;       // by fragment: the global step of its last commit
  std::vector<DigestPair> fragment_digests_;  // by fragment: its ModelDigest
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_GLOBAL_MODEL_H_
