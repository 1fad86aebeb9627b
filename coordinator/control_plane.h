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
#include "coordinator/state_writer.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The coordinator's logic, free of gRPC: membership, the run, counters, the run record (kept
// by the state writer), and a version number that watchers wait on. The gRPC service and the
// HTTP status endpoint are thin adapters over it. No method writes a file under the lock:
// changes are queued for the state writer, and a method that moved the run's state (a start,
// a stop, the end of a run) waits for the record to be on disk after releasing the lock.
// Thread-safe: every method may be called from any thread.
class ControlPlane {
 public:
  struct Options {
    absl::Duration lease_timeout = absl::Seconds(15);
    absl::Duration heartbeat_interval = absl::Seconds(3);
    int max_members = 65536;
    // Where the run record is kept (it outlives the plane); null keeps nothing.
    StateWriter* state = nullptr;
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // What status says of how clients reach the coordinator (CoordinatorStatus).
    std::string transport_security = "plaintext";
    bool token_required = false;
    // Binds node names to keys (common/node_key.h): a Join must carry its node's key made from
    // this secret (JoinRequest.node_key); empty admits a Join in any node's name.
    std::string node_key_secret;
  };

  // Restores the run the state writer's folder holds, if any.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Create(Options options);
  // Saves what is not saved yet.
  ~ControlPlane();

  absl::StatusOr<v1::JoinResponse> Join(const v1::JoinRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  absl::Status Leave(const v1::LeaveRequest& request);
  // Whether a call in `worker_id`'s name carries its credential (Membership::Authenticate).
  absl::Status Authenticate(const std::string& worker_id, absl::string_view credential) const;
  absl::StatusOr<v1::RunInfo> StartRun(const v1::StartRunRequest& request);
  absl::StatusOr<v1::RunInfo> StopRun(const v1::StopRunRequest& request);

  // A consistent snapshot of everything status shows.
  v1::CoordinatorStatus Status() const;
  // How long a member is live without a heartbeat.
  absl::Duration lease_timeout() const { return options_.lease_timeout; }
  v1::RunInfo Run() const;
  // Run `run_id`'s record: the active run's, or an ended one's from the history.
  std::optional<v1::RunInfo> FindRun(const std::string& run_id) const;
  // Run `run_id` if it is the active run, RUNNING, with averaging enabled: NOT_FOUND naming
  // run_id, else FAILED_PRECONDITION saying which it is not.
  absl::StatusOr<v1::RunInfo> AveragingRun(const std::string& run_id) const;
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
    int local_world_size = 1;  // as it joined: the most ranks it may claim
    // The ranks it stands for, as the coordinator saw them: its node's live members (every
    // rank joins), at most local_world_size. What its delta weighs, whatever it claims.
    int ranks = 1;
    std::string data_address;  // empty: it serves no sharded data plane
    // Its data-plane key (DataPlaneKey: the digest of its latest credential), under which the
    // tags of streams to it are made.
    std::string data_plane_key;
  };
  std::vector<Leader> LiveLeaders() const;
  // A call in the name of node leader `member_id` carrying `credential`: the live leader it
  // is (as LiveLeaders has it) when the credential is its own (docs/design.md, "Security").
  // INVALID_ARGUMENT or NOT_FOUND naming member_id, or Authenticate's refusal.
  absl::StatusOr<Leader> CheckLeader(const std::string& member_id,
                                     absl::string_view credential) const;

  // Logs `text` and keeps it as an event of the current run (kinds: see v1::Event).
  void RecordEvent(v1::EventSeverity severity, const std::string& kind, const std::string& text);

  // Commits sync round `round` of run `run_id` at `global_step`, every fragment of the model
  // synced at `synced_step` or later (see RunManager::CommitRound).
  // `restored`: as for RunManager::CommitRound. Queues the record and returns (the caller may
  // be the state writer's thread).
  // `model`: a sharded run's model as of this round (RunInfo.model), recorded with it.
  absl::Status CommitRound(const std::string& run_id, int64_t round, int64_t global_step,
                           int64_t synced_step, bool restored = false,
                           std::optional<v1::ModelRecord> model = std::nullopt);
  // A sharded run's initial model (RunInfo.model); queues the record and returns.
  absl::Status RecordModel(const std::string& run_id, v1::ModelRecord model);

  // Keeps a finished round's record for status and metrics, and counts its bytes.
  void RecordRound(v1::RoundRecord record);

 private:
  explicit ControlPlane(Options options);

  // What a change touched, for persistence: nothing the state file keeps (progress, rounds'
  // records); the members only (written soon, many changes in one write); or the run record
  // (the public method waits until it is written, after releasing the lock).
  enum class Persist { kNothing, kMembers, kRun };
  // Waits, when destroyed, for the record a method changed: declared before the method's
  // MutexLock, so it waits after the lock is released.
  class SavedOnReturn {
   public:
    explicit SavedOnReturn(StateWriter* state) : state_(state) {}
    ~SavedOnReturn() {
      if (state_ != nullptr && ticket > 0) state_->AwaitState(ticket);
    }
    int64_t ticket = 0;

   private:
    StateWriter* const state_;
  };
  // Bumps the version and queues the record as `what` says; returns the ticket of a kRun
  // change (0 otherwise).
  int64_t Changed(Persist what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kRun when the run's state moved since `before`, else kMembers.
  Persist RunOrMembers(v1::RunState before) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the state file keeps, now (the state writer's source).
  StateSnapshot Snapshot() ABSL_LOCKS_EXCLUDED(mu_);
  void UpdateRun() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RunInfo.waiting_for: how many workers have joined, by node.
  std::string WaitingFor() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs a line and keeps it as an event of the current run.
  // Logs and keeps an event; one with a `cause` folds into a recent one of the same kind,
  // worker and cause (EventLog).
  void Note(v1::EventSeverity severity, const std::string& kind, const std::string& worker_id,
            const std::string& text, const std::string& cause = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After anything that may have moved the run's state from `before`: the event, and once
  // the run ended its results.
  void AfterRunChange(v1::RunState before) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the workers' last reports into the run record.
  void FillResults() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's heartbeat into its result in the run (MemberResult), its checkpoint and the
  // run's total steps (`*run_changed` set when the run's record changed). Returns whether a
  // result changed after the run's end (the run record is then refilled and saved).
  bool RecordReport(const v1::HeartbeatRequest& request, bool* run_changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails a run whose every worker failed before training (their errors say why), instead
  // of waiting for quorum_timeout.
  void FailIfEveryWorkerFailed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const absl::Time start_time_;

  mutable Mutex mu_;
  Membership membership_ ABSL_GUARDED_BY(mu_);
  RunManager runs_ ABSL_GUARDED_BY(mu_);
  // The ended runs the state file keeps, shared with the writer; null: to be built again.
  std::shared_ptr<const std::vector<v1::RunInfo>> ended_runs_ ABSL_GUARDED_BY(mu_);
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
  // The membership generation of each worker that was a member when the run ended: after the
  // end only those may still change their results (their final evaluation, their leaving),
  // never a later worker of the same name (docs/design.md, "Persistence"). Empty while the
  // run is active and for an ended run restored from the state directory.
  std::optional<std::map<std::string, int64_t>> end_generations_ ABSL_GUARDED_BY(mu_);
  // Whether a report of `worker_id`, from its membership generation `generation`, may change
  // its result.
  bool MayReport(const std::string& worker_id, int64_t generation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, int64_t> dropped_by_class_ ABSL_GUARDED_BY(mu_);
  // Per bucket of RoundDurationBounds(), not cumulative.
  std::vector<int64_t> duration_counts_ ABSL_GUARDED_BY(mu_);
  double duration_sum_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_commit_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_CONTROL_PLANE_H_
