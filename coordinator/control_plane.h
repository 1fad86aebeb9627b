#ifndef LOCALSGD_COORDINATOR_CONTROL_PLANE_H_
#define LOCALSGD_COORDINATOR_CONTROL_PLANE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/event_log.h"
#include "coordinator/membership.h"
#include "coordinator/run_history.h"
#include "coordinator/run_manager.h"
#include "coordinator/run_store.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The coordinator's logic, free of gRPC: membership, the run, counters, persistence of the
// run record, and a version number that watchers wait on. The gRPC service and the HTTP
// status endpoint are thin adapters over it.
// Thread-safe: every method may be called from any thread.
class ControlPlane {
 public:
  struct Options {
    absl::Duration lease_timeout = absl::Seconds(15);
    absl::Duration heartbeat_interval = absl::Seconds(3);
    int max_members = 65536;
    // Where the run record is kept; empty keeps nothing.
    std::string state_dir;
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // What status says of how clients reach the coordinator (CoordinatorStatus).
    std::string transport_security = "plaintext";
    bool token_required = false;
  };

  // Opens the state directory and restores a saved run, if any.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Create(Options options);
  // Saves what is not saved yet.
  ~ControlPlane();

  absl::StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  absl::Status Leave(const v1::LeaveRequest& request);
  absl::StatusOr<v1::RunInfo> StartRun(const v1::StartRunRequest& request);
  absl::StatusOr<v1::RunInfo> StopRun(const v1::StopRunRequest& request);

  // A consistent snapshot of everything status shows.
  v1::CoordinatorStatus Status() const;
  v1::RunInfo Run() const;
  // The runs known, newest first (the current one with its state now).
  std::vector<v1::RunInfo> ListRuns() const;
  // The series of a run's rounds, oldest first; NOT_FOUND for a run whose series is not
  // kept (unknown, too old, or from before a restart: series are not saved).
  absl::StatusOr<v1::RunSeries> Series(const std::string& run_id) const;

  // Upper bounds (seconds) of the round duration histogram's buckets, +Inf last.
  static const std::vector<double>& RoundDurationBounds();
  // The class of a reason a member was dropped from a round: "deadline", "left", "stale" or
  // "error" (the label of localsgd_round_members_dropped_total).
  static std::string DropReasonClass(const std::string& reason);

  // Expires leases and applies the run's time- and membership-driven transitions. The server
  // calls it periodically.
  void Tick();

  // Waits until the version exceeds `seen` or the timeout passes; returns the version then.
  int64_t AwaitChange(int64_t seen, absl::Duration timeout) const;
  int64_t version() const;

  // Refuses new joins and runs (UNAVAILABLE) from now on; counts as a change.
  void Drain();
  bool draining() const;

  // For the round manager: the live node leaders (Member::node_leader) that have not reported
  // finishing their training, and the workers each stands for (its local world size), ordered
  // by worker id.
  struct Leader {
    std::string worker_id;
    int local_world_size = 1;
    std::string data_address;  // empty: it serves no sharded data plane
  };
  std::vector<Leader> LiveLeaders() const;

  // Logs `text` and keeps it as an event of the current run (kinds: see v1::Event).
  void RecordEvent(v1::EventSeverity severity, const std::string& kind, const std::string& text);

  // Commits sync round `round` of run `run_id` at `global_step` (see RunManager::CommitRound).
  absl::Status CommitRound(const std::string& run_id, int64_t round, int64_t global_step);

  // Keeps a finished round's record for status and metrics, and counts its bytes.
  void RecordRound(v1::RoundRecord record);

 private:
  ControlPlane(Options options, std::optional<RunStore> store);

  // What a change touched, for persistence: nothing the state file keeps (progress, rounds'
  // records); the members only (saved soon, off this lock, many changes in one write); or the
  // run record (saved before the call returns: a commit or a start/stop must be on disk).
  enum class Persist { kNothing, kMembers, kRun };
  // Bumps the version and persists as `what` says.
  void Changed(Persist what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kRun when the run's state moved since `before`, else kMembers.
  Persist RunOrMembers(v1::RunState before) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state file's contents now, numbered.
  std::pair<int64_t, v1::SavedState> Snapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes a snapshot unless a newer one, or the same contents, is on disk already. Takes
  // save_mu_ only.
  void Save(int64_t sequence, const v1::SavedState& state) ABSL_LOCKS_EXCLUDED(save_mu_);
  // Saves the members' changes off the lock, coalescing those that come while it writes.
  void WriterLoop();
  void UpdateRun() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs a line and keeps it as an event of the current run.
  void Note(v1::EventSeverity severity, const std::string& kind, const std::string& worker_id,
            const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After anything that may have moved the run's state from `before`: the event, and once
  // the run ended its results.
  void AfterRunChange(v1::RunState before) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the workers' last reports into the run record.
  void FillResults() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails a run whose every worker failed before training (their errors say why), instead
  // of waiting for quorum_timeout.
  void FailIfEveryWorkerFailed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const absl::Time start_time_;
  const std::optional<RunStore> store_;

  mutable Mutex mu_;
  Membership membership_ ABSL_GUARDED_BY(mu_);
  RunManager runs_ ABSL_GUARDED_BY(mu_);
  int64_t snapshots_ ABSL_GUARDED_BY(mu_) = 0;
  bool members_dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Disk writes, in snapshot order. Lock order: mu_, then save_mu_.
  Mutex save_mu_;
  int64_t saved_snapshot_ ABSL_GUARDED_BY(save_mu_) = 0;
  std::string saved_state_ ABSL_GUARDED_BY(save_mu_);  // to skip unchanged saves
  std::thread writer_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t heartbeats_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t joins_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leases_expired_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_received_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_sent_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rounds_committed_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rounds_aborted_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::RoundRecord> recent_rounds_ ABSL_GUARDED_BY(mu_);
  RunHistory history_ ABSL_GUARDED_BY(mu_){RunHistory::Options{}};
  EventLog events_ ABSL_GUARDED_BY(mu_){200};
  // The current run's workers' last reports (and why they left), by worker id.
  std::map<std::string, v1::MemberResult> results_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> dropped_by_class_ ABSL_GUARDED_BY(mu_);
  // Per bucket of RoundDurationBounds(), not cumulative.
  std::vector<int64_t> duration_counts_ ABSL_GUARDED_BY(mu_);
  double duration_sum_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_commit_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_CONTROL_PLANE_H_
