#ifndef LOCALSGD_COORDINATOR_RUN_MANAGER_H_
#define LOCALSGD_COORDINATOR_RUN_MANAGER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The run's life: IDLE -> WAITING_FOR_WORKERS -> RUNNING -> COMPLETED | STOPPED | FAILED, one
// active run (waiting or running) at a time. It owns the global step and round counters,
// which advance only through CommitRound (driven by the averaging rounds).
// Thread-compatible: the caller serialises access (ControlPlane holds a mutex).
class RunManager {
 public:
  explicit RunManager(std::function<absl::Time()> clock);

  // Validates `spec` (INVALID_ARGUMENT naming the field), fills its defaults and starts a run
  // in WAITING_FOR_WORKERS, or RUNNING straight away when `live_workers` suffice.
  // FAILED_PRECONDITION while another run is active. The run id is never one `id_taken` says
  // is taken (e.g. by a run in the history).
  absl::StatusOr<v1::RunInfo> Start(
      const v1::RunSpec& spec, int live_workers,
      const std::function<bool(const std::string&)>& id_taken = nullptr);

  // Stops the active run. `run_id` empty means the active run; another run's id is NOT_FOUND
  // (unknown) or FAILED_PRECONDITION (already ended).
  absl::StatusOr<v1::RunInfo> Stop(const std::string& run_id, const std::string& reason);

  // Applies the transitions that depend on membership and time: WAITING -> RUNNING once
  // `live_workers` >= min_workers; RUNNING -> FAILED after quorum_timeout below min_workers.
  // Returns whether anything changed.
  bool Update(int live_workers);
  // RunInfo.waiting_for (the control plane knows the members).
  void SetWaitingFor(std::string text) { info_.set_waiting_for(std::move(text)); }

  // Commits sync round `round` (must be the next one) at `global_step` (must not go back,
  // unless `restored`: a restarted coordinator commits its saved model again, which may be older
  // than the record). `synced_step`: the least step at which every part of the model last synced
  // (global_step without fragments; RunSpec.fragments); the run completes when it reaches
  // total_steps. FAILED_PRECONDITION otherwise.
  absl::Status CommitRound(int64_t round, int64_t global_step, int64_t synced_step,
                           bool restored = false);
  // A sharded run's model as of its round (RunInfo.model).
  void SetModel(v1::ModelRecord model) { *info_.mutable_model() = std::move(model); }

  // Marks the active run FAILED with `reason`.
  absl::Status Fail(const std::string& reason);

  // Marks the active run COMPLETED (e.g. when workers finish an epochs-based run).
  absl::Status Complete(const std::string& reason);

  // Records where the trained model of the current run was saved.
  void SetModelPath(const std::string& path) { info_.set_model_path(path); }

  // A node leader's newest checkpoint (its worker_id filled in): recorded as the run's
  // (RunInfo.checkpoint) when it is of the current run (active, or ended and not yet followed by
  // another), newer than the one recorded, and not past the run's committed round and global
  // step. Returns whether it was recorded.
  bool ReportCheckpoint(const v1::CheckpointInfo& checkpoint);

  // A worker's total steps: an epoch run's total is the most any worker reported (a run of
  // total_steps keeps the spec's). Returns whether the total changed.
  bool ReportTotalSteps(int64_t total_steps);

  // Records what the run's workers reported last (RunInfo.final_*, member_results); no final
  // loss when none reported one.
  void SetResults(std::optional<double> final_loss, double final_test_accuracy,
                  std::vector<v1::MemberResult> members);

  // Replaces the state with one read back from the state directory.
  void Restore(const v1::RunInfo& info);

  const v1::RunInfo& info() const { return info_; }
  bool active() const;

 private:
  void End(v1::RunState state, const std::string& reason);

  std::function<absl::Time()> clock_;
  v1::RunInfo info_;
  int64_t runs_started_ = 0;
  absl::Time below_quorum_since_ = absl::InfiniteFuture();
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_RUN_MANAGER_H_
