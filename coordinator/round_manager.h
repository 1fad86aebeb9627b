#ifndef LOCALSGD_COORDINATOR_ROUND_MANAGER_H_
#define LOCALSGD_COORDINATOR_ROUND_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/commit_pipeline.h"
#include "coordinator/control_plane.h"
#include "coordinator/global_model.h"
#include "coordinator/member_standing.h"
#include "coordinator/model_keeper.h"
#include "coordinator/model_upload.h"
#include "coordinator/open_round.h"
#include "coordinator/round_backoff.h"
#include "coordinator/round_driver.h"
#include "coordinator/round_sessions.h"
#include "coordinator/sharded_driver.h"
#include "coordinator/star_driver.h"
#include "coordinator/state_writer.h"
#include "exchange/chunk_stream.h"
#include "exchange/chunking.h"
#include "exchange/range_reducer.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// The sync rounds of the active run (docs/design.md, "One round, both modes"): the facade
// over one lock that guards the members' streams (RoundSessions), the models (ModelKeeper:
// global[r] and the outer optimizer state, handed out as immutable snapshots), what the rounds
// hold against members (MemberStanding) and the commits on their way to the run record, the
// disk and the members (CommitPipeline). It opens a round when the first member's header
// arrives (its members are the node leaders alive then) and gives it to the driver of the run's
// exchange mode (StarDriver, ShardedDriver), which sees the round through a RoundContext. Knows
// nothing of gRPC. Thread-safe. Lock order: this manager's lock, then the control plane's.
class RoundManager : private RoundContext, private CommitPipeline::Host {
 public:
  struct Options {
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // Where the global model and outer optimizer state are saved after the initial model and
    // committed rounds (model.bin; it outlives the manager); null keeps nothing.
    StateWriter* state = nullptr;
  };

  RoundManager(ControlPlane* plane, Options options);
  // Waits for a model being saved.
  ~RoundManager() override;

  // Loads the state folder's model of the control plane's (restored) run
  // (ModelKeeper::Restore). Call once, before serving.
  absl::Status Restore();

  // --- Initial model (global[0]) ---
  // Checks an InitModel header: the active run is running, the member is a live node leader,
  // the model is not initialised yet. Returns the upload to fill (ModelUpload: a star run's
  // model is kept, a sharded run's only digested).
  absl::StatusOr<ModelUpload> BeginInit(const v1::InitModelHeader& header);
  // Installs global[0] and says in `response` which round and global step it is; ALREADY_EXISTS
  // when another leader was first. A node leader's checkpoint (header.from_checkpoint, with
  // its `momentum` when the run keeps one) replaces the model when ModelKeeper::MayInstall lets
  // it (docs/design.md, "Checkpoints"), as a restore does, aborting a round open on the model it
  // replaces.
  absl::Status FinishInit(const v1::InitModelHeader& header, ModelUpload upload,
                          v1::InitModelResponse* response);

  // --- Late joiners ---
  using ModelSnapshot = ::localsgd::ModelSnapshot;
  // The committed global model of `run_id` (empty: the active run): the snapshot made at its
  // commit, shared, not copied. Waits while a commit waits for the disk (the initial model, a
  // run's final commit), so that what it hands out is a recorded commit.
  absl::StatusOr<ModelSnapshot> FetchModel(const std::string& run_id);
  // The node leaders that hold round `round` of run `run_id` (docs/design.md, "Where the model
  // lives"): the live ones that were in its commit (or uploaded the initial model) and serve a
  // data plane. None for another round or run, or before a commit since a restart.
  // Run `run_id`'s record (ControlPlane::FindRun): whether it runs, its newest checkpoint.
  std::optional<v1::RunInfo> FindRun(const std::string& run_id) const {
    return plane_->FindRun(run_id);
  }
  std::vector<v1::ModelHolder> Holders(const std::string& run_id, int64_t round);

  // --- Sync ---
  // Validates the header and enters the member into the round (opening it if needed);
  // queues the RoundHeader. Returns a session id for the calls below.
  absl::StatusOr<int64_t> Join(const v1::SyncHeader& header, std::shared_ptr<RoundMember> member);
  // Takes one chunk of the member's delta. On bad input the member is dropped and its stream
  // closed with the error, which is also returned.
  absl::Status AddChunk(int64_t session, const v1::Chunk& chunk);
  // The member's stream ended or broke: drop it from the round (if still in it).
  void Leave(int64_t session, const absl::Status& why);
  // The member closed its side of the stream: fine once it sent every chunk (star) or
  // delivered (sharded), else a Leave.
  void EndOfInput(int64_t session);
  // Sharded rounds: a member's "I hold every chunk" with the digests of its next copy
  // (docs/design.md, "Digests"), and its report of an owner it could not reach. Bad input drops
  // the member (and closes its stream) as for AddChunk.
  absl::Status Deliver(int64_t session, const v1::Delivered& delivered);
  absl::Status Unreachable(int64_t session, const v1::OwnerUnreachable& unreachable);
  // Deadlines, expired leases and the run's state; the server calls it periodically.
  void Tick();

  // Stops the active run (ControlPlane::StopRun) with no commit in between: no round commits
  // from the call on, the last commit's model is on disk before the stop is saved (off this
  // manager's lock), and a round still open is aborted. So a stopped run's saved model and its
  // record agree about the last committed round.
  absl::StatusOr<v1::RunInfo> StopRun(const v1::StopRunRequest& request);

 private:
  // RoundContext: the open round as its driver sees it; every call under mu_.
  absl::Time Now() const override { return options_.clock(); }
  const std::string& run_id() const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return model().run_id();
  }
  const v1::RunSpec& spec() const override ABSL_NO_THREAD_SAFETY_ANALYSIS { return model().spec(); }
  int64_t committed_round() const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return model().round();
  }
  int64_t committed_step() const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return model().global_step();
  }
  const RoundContext::Round& round() const override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return round_->info;
  }
  uint64_t NextAttempt() override ABSL_NO_THREAD_SAFETY_ANALYSIS { return next_attempt_++; }
  RoundSessions& sessions() override ABSL_NO_THREAD_SAFETY_ANALYSIS { return sessions_; }
  void CountBytes(int64_t received, int64_t sent) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    round_->bytes_received += received;
    round_->bytes_sent += sent;
  }
  bool MayCommit() const override ABSL_NO_THREAD_SAFETY_ANALYSIS { return pipeline_.MayStart(); }
  // The update is in the round's reducer: applies it to the model, judges the round, and hands
  // the commit to the pipeline (which records it, saves the model and sends the RoundCommit).
  // `log` describes the round.
  void Commit(const std::vector<std::string>& included, int64_t step, DigestPair digest,
              std::string log) override ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Ends every session with ABORTED, records the round, forgets it and counts it towards the
  // rounds' back-off (RoundBackoff).
  void Abort(const std::string& reason) override ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // The active run, if it is RUNNING with averaging enabled; resets the model on a new run.
  absl::StatusOr<v1::RunInfo> RunningRun(const std::string& run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits the header of a leader of the running run and enters it into the round.
  absl::StatusOr<int64_t> JoinLocked(const v1::SyncHeader& claimed,
                                     const ControlPlane::Leader& leader,
                                     const std::shared_ptr<RoundMember>& member)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens round `number` carrying `fragment` over the live leaders not suspended.
  void StartRound(int64_t number, int fragment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CommitPipeline::Host.
  void Resume(absl::FunctionRef<void()> next) override ABSL_LOCKS_EXCLUDED(mu_);
  void Announced(const std::vector<std::string>& included) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leaves a live leader whose header was refused out of the round (or the next one);
  // `excused` as for RoundDriver::Refuse.
  void Refuse(const std::string& member_id, const absl::Status& status, bool excused = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `call` on the open sharded round's driver if the session is in it (else
  // FAILED_PRECONDITION naming `what`), then acts on the round's decisions.
  absl::Status InShardedRound(int64_t session_id, absl::string_view what,
                              absl::FunctionRef<absl::Status(ShardedDriver&)> call)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The live leaders that take part in rounds (not suspended) as RoundBackoff compares them:
  // their ids, credentials and ranks.
  std::string Membership() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acts on the round's decisions, if a round is open.
  void Advance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The open round ended with `committed` in its commit (none: aborted): suspends the members
  // its faults condemn (MemberStanding), with an event each.
  void Judge(const std::vector<std::string>& committed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The active run's model.
  GlobalModel& model() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return models_.active(); }
  const GlobalModel& model() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return models_.active(); }
  // Flushes the members touched under the lock; call after releasing it.
  void FlushTouched() ABSL_LOCKS_EXCLUDED(mu_);
  // Flushes the members touched when it goes out of scope: the first statement of every call
  // that takes the lock, so the flush comes after the lock is released on every path.
  class FlushWhenDone {
   public:
    explicit FlushWhenDone(RoundManager* manager) : manager_(manager) {}
    ~FlushWhenDone() { manager_->FlushTouched(); }
    FlushWhenDone(const FlushWhenDone&) = delete;
    FlushWhenDone& operator=(const FlushWhenDone&) = delete;

   private:
    RoundManager* const manager_;
  };

  ControlPlane* const plane_;
  const Options options_;

  Mutex mu_;
  ModelKeeper models_ ABSL_GUARDED_BY(mu_);
  std::optional<OpenRound> round_ ABSL_GUARDED_BY(mu_);
  RoundSessions sessions_ ABSL_GUARDED_BY(mu_);
  // Names each attempt at a round (RoundHeader.attempt): random start, then counting, so that
  // a restarted coordinator does not reuse an attempt its members saw.
  uint64_t next_attempt_ ABSL_GUARDED_BY(mu_);
  // A commit on its way to the run record, the disk and its members.
  CommitPipeline pipeline_{&mu_, plane_, options_.state, &sessions_, this};
  // What this run's rounds hold against its members.
  MemberStanding standing_ ABSL_GUARDED_BY(mu_);
  // When this run's rounds may open again after aborting.
  RoundBackoff backoff_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_MANAGER_H_
