#ifndef LOCALSGD_COORDINATOR_ROUND_MANAGER_H_
#define LOCALSGD_COORDINATOR_ROUND_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/control_plane.h"
#include "coordinator/sharded_round.h"
#include "coordinator/star_round.h"
#include "coordinator/state_writer.h"
#include "exchange/chunk_stream.h"
#include "exchange/chunking.h"
#include "exchange/range_reducer.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// One member's Sync stream as the round manager sees it (the gRPC adapter implements it).
using RoundMember = ChunkStream<v1::SyncResponse>;

// The sync rounds of the active run (docs/design.md, "One round, both modes"). It keeps
// global[r] and the outer optimizer state and opens a round when the first member's header
// arrives (its members are the node leaders alive then). Star rounds: it averages over the
// aggregator engine, streams each update chunk to every member as soon as it is averaged, drops
// members whose stream breaks, who send bad input or who miss the deadline, and commits (advancing
// the run's round and global step) or, when the quorum is lost, aborts. Sharded rounds: a
// ShardedRound decides; this class sends the layout, the drop notices and the commit, takes
// each owner's averaged chunks and, on commit, applies the averaged mean through the outer
// optimizer exactly as the members do. Knows nothing of gRPC.
// Thread-safe. Lock order: this manager's lock, then the control plane's.
class RoundManager {
 public:
  struct Options {
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // Where the global model and outer optimizer state are saved after the initial model and
    // every committed round (model.bin; it outlives the manager); null keeps nothing.
    StateWriter* state = nullptr;
  };

  RoundManager(ControlPlane* plane, Options options);
  // Waits for a model being saved.
  ~RoundManager();

  // Loads the saved model of the control plane's (restored) run, so that a restarted
  // coordinator resumes from the last committed round. A model saved just before a crash
  // that kept the run record from following is committed to the run now. DATA_LOSS (naming
  // the file) for a corrupt file or one that disagrees with the run record by more than that.
  // Call once, before serving.
  absl::Status Restore();

  // --- Initial model (global[0]) ---
  // Checks an InitModel header: the active run is running, the member is a live node leader,
  // the model is not initialised yet. Returns the chunk layout the upload must follow.
  absl::StatusOr<ChunkLayout> BeginInit(const v1::InitModelHeader& header);
  // Installs global[0]; ALREADY_EXISTS when another leader was first.
  absl::Status FinishInit(const v1::InitModelHeader& header, std::vector<float> values);

  // --- Late joiners ---
  using ModelSnapshot = ::localsgd::ModelSnapshot;
  // The committed global model of `run_id` (empty: the active run): the snapshot made at its
  // commit, shared, not copied. Waits while a model is being saved, so a model handed out is
  // always on disk.
  absl::StatusOr<ModelSnapshot> FetchModel(const std::string& run_id);

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
  // Sharded rounds: an owner's averaged chunk, and a member's "I hold every chunk". Bad input
  // drops the member (and closes its stream) as for AddChunk. A chunk relayed to a member
  // moves into that member's message (no copy): `chunk` may be left empty.
  absl::Status AddMean(int64_t session, v1::Chunk* chunk);
  absl::Status Deliver(int64_t session);
  absl::Status Unreachable(int64_t session, const v1::OwnerUnreachable& unreachable);
  // Deadlines, expired leases and the run's state; the server calls it periodically.
  void Tick();

  // Stops the active run (ControlPlane::StopRun) with no commit in between: a commit being
  // saved is finished and recorded before the stop, no round commits while the stop is being
  // saved (off this manager's lock), and a round still open is aborted. So the saved model and
  // the run record never disagree about the last committed round.
  absl::StatusOr<v1::RunInfo> StopRun(const v1::StopRunRequest& request);

 private:
  struct Session {
    int slot = -1;
    std::string member_id;
    std::shared_ptr<RoundMember> member;
    int64_t step = 0;
    int chunks_received = 0;
    bool delivered = false;  // sharded
  };
  struct NextModel {
    std::shared_ptr<std::vector<float>> global;
    std::shared_ptr<std::vector<float>> momentum;  // empty without outer momentum
  };
  struct Round {
    int64_t number = 0;
    absl::Time opened;
    std::vector<std::string> members;  // the leaders expected when it opened
    int64_t bytes_received = 0;
    int64_t bytes_sent = 0;
    // Star rounds: the decisions, and each slot's session (-1: not joined).
    std::optional<StarRound> star;
    std::vector<int64_t> session_of_slot;
    // Sharded rounds: the decisions, the next model (computed chunk by chunk as the averaged
    // chunks arrive, installed at the commit), how many chunks are in it, each shard's bytes.
    std::optional<ShardedRound> sharded;
    std::shared_ptr<NextModel> next;
    int means_done = 0;
    std::vector<int64_t> mean_bytes;
    std::vector<int64_t> relay_session;  // by shard: the session its means are relayed to, or -1
    uint64_t attempt = 0;
    bool laid_out = false;  // the RoundHeader went out
  };
  struct Model {
    std::string run_id;
    v1::RunSpec spec;
    std::shared_ptr<RangeReducer> engine;  // null until initialised
    int64_t round = 0;                     // committed rounds
    int64_t global_step = 0;
    // The engine's model at `round`, as FetchModel and the state writer get it.
    std::shared_ptr<const ModelSnapshot> snapshot;
  };

  // The active run, if it is RUNNING with averaging enabled; resets the model on a new run.
  absl::StatusOr<v1::RunInfo> RunningRun(const std::string& run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> JoinLocked(const v1::SyncHeader& header,
                                     const std::shared_ptr<RoundMember>& member)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenRound(int64_t number) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool sharded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return round_.has_value() && round_->sharded.has_value();
  }
  // Sharded rounds: acts on what the ShardedRound decided (drops, layout, commit, abort).
  void AdvanceSharded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitSharded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A model applied but not yet saved (a commit, or the initial model without members): what
  // to do once it is on disk.
  struct PendingCommit {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
    std::vector<std::string> included;
    std::vector<std::shared_ptr<RoundMember>> members;  // waiting for the RoundCommit
    v1::RoundRecord record;
    std::string log;
  };
  // The update is applied to model_.engine: records round and step, then (once the model is
  // saved, when there is a state folder) commits the run, sends the RoundCommit and ends the
  // round's streams. `log` describes the round.
  void Publish(const std::vector<std::string>& included, int64_t step, std::string log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands model_.snapshot to the state writer with `commit` to finish once it is durable (at
  // once without a state folder).
  void Save(PendingCommit commit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state writer saved the pending model (on its thread).
  void OnSaved(const absl::Status& saved) ABSL_LOCKS_EXCLUDED(mu_);
  void FinishCommit(PendingCommit& commit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sharded rounds: the session's member leaves the round (stream ended, bad input); its
  // stream is closed with `status`.
  void DropSession(int64_t session, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the round (keeping the sharded mean buffer for the next one).
  void EndRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The session of a member in the round, or sessions_.end().
  std::map<int64_t, Session>::iterator SessionOf(const std::string& member_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The header offers a round of the model's run that has already committed.
  bool Stale(const v1::SyncHeader& header) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leaves a live leader whose header was refused out of the round (or the next one).
  void Refuse(const std::string& member_id, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Star rounds: the slot's member leaves the round; then ApplyDrops.
  void DropSlot(int slot, const std::string& reason, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Star rounds: the engine stops waiting for the members the StarRound dropped, and their
  // streams end.
  void ApplyDrops() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After any change: abort without quorum, else send completed chunks and commit when done.
  void Advance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Commit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Installs the engine for global[model_.round] of model_.spec, with a saved outer momentum
  // buffer or (nullopt) a zero one.
  absl::Status InstallModel(std::vector<float> global, std::optional<std::vector<float>> momentum)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // model_.snapshot from the engine's buffers (no copy).
  void TakeSnapshot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Abort(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::RoundRecord Record(v1::RoundOutcome outcome) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(const std::shared_ptr<RoundMember>& member) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Flushes the members touched under the lock; call after releasing it.
  void FlushTouched() ABSL_LOCKS_EXCLUDED(mu_);

  ControlPlane* const plane_;
  const Options options_;

  Mutex mu_;
  Model model_ ABSL_GUARDED_BY(mu_);
  std::optional<Round> round_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  // Names each attempt at a round (RoundHeader.attempt): random start, then counting, so that
  // a restarted coordinator does not reuse an attempt its members saw.
  uint64_t next_attempt_ ABSL_GUARDED_BY(mu_);
  TouchedStreams<RoundMember> touched_ ABSL_GUARDED_BY(mu_);
  // The model being saved; while it is, no other commit starts and FetchModel waits.
  std::optional<PendingCommit> pending_ ABSL_GUARDED_BY(mu_);
  // A StopRun is being saved: no round commits, and Tick leaves the open round to the stop.
  bool stopping_run_ ABSL_GUARDED_BY(mu_) = false;
  // Live leaders refused before the round opened: member id -> (round, reason).
  std::map<std::string, std::pair<int64_t, std::string>> refused_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_MANAGER_H_
