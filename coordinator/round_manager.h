#ifndef LOCALSGD_COORDINATOR_ROUND_MANAGER_H_
#define LOCALSGD_COORDINATOR_ROUND_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/control_plane.h"
#include "coordinator/global_model.h"
#include "coordinator/model_keeper.h"
#include "coordinator/round_driver.h"
#include "coordinator/round_sessions.h"
#include "coordinator/sharded_driver.h"
#include "coordinator/star_driver.h"
#include "coordinator/state_writer.h"
#include "coordinator/suspensions.h"
#include "exchange/chunk_stream.h"
#include "exchange/chunking.h"
#include "exchange/range_reducer.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// The sync rounds of the active run (docs/design.md, "One round, both modes"): the facade
// over one lock that guards the members' streams (RoundSessions) and the models
// (ModelKeeper: global[r] and the outer optimizer state, handed out as immutable snapshots),
// and the commit pipeline through the state writer. It opens a round when the first member's header
// arrives (its members are the node leaders alive then) and gives it to the driver of the run's
// exchange mode (StarDriver, ShardedDriver), which sees the round through a RoundContext. Knows
// nothing of gRPC. Thread-safe. Lock order: this manager's lock, then the control plane's.
class RoundManager {
 public:
  struct Options {
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // Where the global model and outer optimizer state are saved after the initial model and
    // committed rounds (model.bin; it outlives the manager); null keeps nothing.
    StateWriter* state = nullptr;
  };

  RoundManager(ControlPlane* plane, Options options);
  // Waits for a model being saved.
  ~RoundManager();

  // Loads the state folder's model of the control plane's (restored) run
  // (ModelKeeper::Restore). Call once, before serving.
  absl::Status Restore();

  // --- Initial model (global[0]) ---
  // Checks an InitModel header: the active run is running, the member is a live node leader,
  // the model is not initialised yet. Returns the chunk layout the upload must follow.
  absl::StatusOr<ChunkLayout> BeginInit(const v1::InitModelHeader& header);
  // Installs global[0] and says in `response` which round and global step it is; ALREADY_EXISTS
  // when another leader was first. A node leader's checkpoint (header.from_checkpoint, with
  // its `momentum` when the run keeps one) replaces the model when ModelKeeper::TakesCheckpoint
  // (docs/design.md, "Checkpoints"), as a restore does, aborting a round open on the model it
  // replaces.
  absl::Status FinishInit(const v1::InitModelHeader& header, std::vector<float> values,
                          std::optional<std::vector<float>> momentum,
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
  // Sharded rounds: an owner's averaged chunk, and a member's "I hold every chunk" with the
  // digests of its copy (docs/design.md, "Digests"). Bad input
  // drops the member (and closes its stream) as for AddChunk.
  absl::Status AddMean(int64_t session, const v1::Chunk& chunk);
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
  // The manager as the open round's driver sees it (RoundContext): every call under mu_.
  class Context : public RoundContext {
   public:
    explicit Context(RoundManager* manager) : m_(manager) {}
    absl::Time Now() const override;
    const std::string& run_id() const override;
    const v1::RunSpec& spec() const override;
    int64_t committed_round() const override;
    int64_t committed_step() const override;
    const Round& round() const override;
    uint64_t NextAttempt() override;
    RoundSessions& sessions() override;
    void CountBytes(int64_t received, int64_t sent) override;
    bool MayCommit() const override;
    void Commit(const std::vector<std::string>& included, int64_t step, DigestPair digest,
                std::string log) override;
    void Abort(const std::string& reason) override;

   private:
    RoundManager* const m_;
  };

  struct Round {
    RoundContext::Round info;
    std::vector<std::string> members;  // the leaders expected when it opened
    std::vector<std::pair<std::string, std::string>> suspended;  // live leaders left out: why
    int64_t bytes_received = 0;
    int64_t bytes_sent = 0;
    // The mode's driver, and the same as the mode's class (the other null).
    std::unique_ptr<RoundDriver> driver;
    StarDriver* star = nullptr;
    ShardedDriver* sharded = nullptr;
  };
  // A model applied but not yet announced (a commit, or the initial model without members):
  // what to do once it is on disk.
  struct PendingCommit {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
    int64_t synced_step = 0;  // GlobalModel::synced_step after it
    std::vector<std::string> included;
    std::vector<std::shared_ptr<RoundMember>> members;  // waiting for the RoundCommit
    v1::RoundRecord record;
    std::string log;
  };

  // The active run, if it is RUNNING with averaging enabled; resets the model on a new run.
  absl::StatusOr<v1::RunInfo> RunningRun(const std::string& run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `ranks`: the local_world_size the member joined with.
  absl::StatusOr<int64_t> JoinLocked(const v1::SyncHeader& claimed,
                                     const ControlPlane::Leader& leader,
                                     const std::shared_ptr<RoundMember>& member)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenRound(int64_t number, int fragment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The update is in the round's reducer: records round and step, then (once the model is
  // saved, when there is a state folder) commits the run, sends the RoundCommit and ends the
  // round's streams. `log` describes the round.
  void Publish(const std::vector<std::string>& included, int64_t step, DigestPair digest,
               std::string log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Has a model saved behind a commit written now, and waits until no model is being saved:
  // neither a pending commit's nor one saved behind.
  void AwaitNoSave() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until no commit waits for its model to be on disk (pending_).
  void AwaitNoPendingCommit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a decided commit may go ahead now (no model being saved, no stop being saved).
  bool MayCommit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !pending_.has_value() && !stopping_run_;
  }
  // Hands the model's snapshot to the state writer and records the pending commit once it is
  // durable (at once without a state folder): the initial model and a run's final commit.
  void SaveModel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the model's snapshot to the state writer after a commit that was announced already
  // (StateWriter::SaveModelLater; docs/design.md, "Persistence"): the commit does not wait for
  // the disk.
  void SaveBehind() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits the pending commit to the run record and announces it once the record is on disk
  // (at once without a state folder): a member never holds a round the record has not, so a
  // restarted coordinator never reuses the number of a round a member holds (docs/design.md,
  // "Persistence").
  void RecordCommit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the pending commit's RoundCommit to its members, ends their streams and forgets it.
  void Announce() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On a state writer thread: runs `next` under the lock, acts on the round's decisions and
  // flushes the streams touched.
  void Resume(absl::FunctionRef<void()> next) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether an InitModel upload (a new model, or a checkpoint: CheckCheckpointOffer,
  // ModelKeeper::TakesCheckpoint) may become run `run`'s model now; ALREADY_EXISTS when not.
  absl::Status MayInstall(const v1::InitModelHeader& header, const v1::RunInfo& run) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The header offers a round of the model's run that has already committed.
  bool Stale(const v1::SyncHeader& header) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leaves a live leader whose header was refused out of the round (or the next one);
  // `excused` as for RoundDriver::Refuse.
  void Refuse(const std::string& member_id, const absl::Status& status, bool excused = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acts on the round's decisions, if a round is open.
  void Advance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every session with ABORTED, records the round and forgets it.
  void Abort(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The open round ended with `committed` in its commit (none: aborted): suspends the members
  // its faults condemn, with an event each.
  void Judge(const std::vector<std::string>& committed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::RoundRecord Record(v1::RoundOutcome outcome) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  Context context_{this};

  Mutex mu_;
  ModelKeeper models_ ABSL_GUARDED_BY(mu_);
  std::optional<Round> round_ ABSL_GUARDED_BY(mu_);
  RoundSessions sessions_ ABSL_GUARDED_BY(mu_);
  // Names each attempt at a round (RoundHeader.attempt): random start, then counting, so that
  // a restarted coordinator does not reuse an attempt its members saw.
  uint64_t next_attempt_ ABSL_GUARDED_BY(mu_);
  // A commit waiting for its model or its run record to be on disk; while it waits, no other
  // commit starts and FetchModel waits.
  std::optional<PendingCommit> pending_ ABSL_GUARDED_BY(mu_);
  // Models of announced commits handed to the state writer and not yet on disk (SaveBehind).
  int saves_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // A StopRun is being saved: no round commits, and Tick leaves the open round to the stop.
  bool stopping_run_ ABSL_GUARDED_BY(mu_) = false;
  // Members that sent a Sync header in this run, and since its last commit: silent in a round
  // (RoundFault::silent) is only one of the first and none of the second.
  std::set<std::string> heard_in_run_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> heard_since_commit_ ABSL_GUARDED_BY(mu_);
  // Each member's credential in its latest header: another one is a new process.
  std::map<std::string, std::string> credentials_ ABSL_GUARDED_BY(mu_);
  // Who sits out rounds for failing earlier ones (this run's, under its spec).
  Suspensions suspensions_ ABSL_GUARDED_BY(mu_){Suspensions::Options{}};
  // Live leaders refused before the round opened: member id -> (round, reason).
  std::map<std::string, std::pair<int64_t, std::string>> refused_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_MANAGER_H_
