#ifndef LOCALSGD_COORDINATOR_MODEL_KEEPER_H_
#define LOCALSGD_COORDINATOR_MODEL_KEEPER_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/model_store.h"
#include "coordinator/control_plane.h"
#include "coordinator/global_model.h"
#include "coordinator/model_upload.h"
#include "coordinator/state_writer.h"
#include "proto/localsgd/v1/averaging.pb.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The models the coordinator keeps (docs/design.md, "The coordinator's model" and "Where the
// model lives"): the active run's (GlobalModel), which members hold its committed round, and
// the final models of the last StateWriter::kKeptRunModels ended runs, in memory and, with a
// state folder, on disk. Thread-compatible: the round manager's lock guards it.
class ModelKeeper {
 public:
  // `state`: the state folder's writer (null keeps nothing on disk); it outlives the keeper.
  explicit ModelKeeper(StateWriter* state) : state_(state) {}

  GlobalModel& active() { return active_; }
  const GlobalModel& active() const { return active_; }

  // Run `run` becomes the active one, at its recorded round and step with no model yet; the
  // ended run's final model, if it had one, is kept. Forgets the holders.
  void StartRun(const v1::RunInfo& run);

  // Loads what the state folder keeps of `plane`'s (restored) run's model, so that a restarted
  // coordinator resumes from it; true when it did. A sharded run's is its layout and digests
  // in the run record (RunInfo.model): the model itself lives with the members. A star run's
  // is model.bin. A model saved just before a crash that kept
  // the run record from following is committed to the run now. A model older than the record
  // (commits are announced before their model is on disk) is committed again as the round
  // after the record's, at its own global step, so the members adopt it as stale members do
  // (docs/design.md, "Persistence"). DATA_LOSS (naming the file) for a corrupt file or one
  // more than one commit ahead of the record.
  absl::StatusOr<bool> Restore(ControlPlane& plane);

  // Whether an InitModel upload (a new model, or a checkpoint: CheckCheckpointOffer) may become
  // run `run`'s model at `now`; ALREADY_EXISTS when not (docs/design.md, "Checkpoints"). A new
  // model may when there is none, or when a sharded run's initial model is held by none of the
  // `plane`'s live leaders (its uploader died before anyone took it). A checkpoint may when it
  // is newer (Newer), or when a sharded run's model is held by none of them; then it is
  // UNAVAILABLE (try again) until that has lasted a lease from the first such offer: a holder
  // cut off past its lease joins again and, syncing, holds it again, and no committed round is
  // lost.
  absl::Status MayInstall(const v1::InitModelHeader& header, const v1::RunInfo& run,
                          const ControlPlane& plane, absl::Time now);
  // Installs an InitModel upload that MayInstall allowed as the active model (a checkpoint
  // through Adopt), held by its uploader: a star run's values, a sharded run's digests.
  absl::Status InstallUpload(ControlPlane& plane, const v1::InitModelHeader& header,
                             ModelUpload upload);
  // Installs a model of round `round` at `global_step` of the active run (model.bin, or a node
  // leader's checkpoint; `source` names it) through `install` (GlobalModel::Install or
  // InstallDigests, after the reset) as PlanRestore says, committing a round on `plane` when
  // the plan does. FAILED_PRECONDITION (naming `source`) when the plan refuses it, DATA_LOSS
  // when the model does not fit the run.
  absl::Status Adopt(ControlPlane& plane, int64_t round, int64_t global_step,
                     const std::string& source, absl::FunctionRef<absl::Status()> install);

  // The committed model of run `run_id` if it is the active run's or kept in memory: the
  // snapshot, shared, not copied.
  std::optional<ModelSnapshot> Find(const std::string& run_id) const;
  // What `run`'s record keeps of its sharded model (RunInfo.model) as a snapshot without
  // values; nullopt when it keeps none.
  static std::optional<ModelSnapshot> FromRecord(const v1::RunInfo& run);
  // An ended run's final model from the state folder (it reads the disk: call it without the
  // lock); NOT_FOUND, naming how many runs are kept, when it is not there or there is no state
  // folder.
  absl::StatusOr<ModelSnapshot> LoadKept(const std::string& run_id) const;

  // The members that hold the active model's round: the members of its commit, or the initial
  // model's uploader.
  // `live`: the live leaders then, whose data-plane keys say which incarnation holds it (a
  // leader that joins again holds nothing).
  void SetHolders(const std::vector<std::string>& member_ids,
                  const std::vector<ControlPlane::Leader>& live);
  // `member_id` holds the active model's round too: its admitted Sync header is for the next
  // round (a claim, which a fetch checks by digest). So a restarted coordinator, which knows
  // no holders until a commit, learns them as the members sync.
  void AddHolder(const ControlPlane::Leader& leader);
  // Those of `live` that hold round `round` of run `run_id` and serve a data plane; none for
  // another round or run.
  std::vector<v1::ModelHolder> Holders(const std::string& run_id, int64_t round,
                                       const std::vector<ControlPlane::Leader>& live) const;

 private:
  // Whether the active model is a sharded run's that none of the `live` leaders holds.
  bool Unheld(const std::vector<ControlPlane::Leader>& live) const;
  // Whether a checkpoint at `global_step` is newer than the active model: there is none, or it
  // was adopted at a lower global step with no round committed since.
  bool Newer(int64_t global_step) const;
  // A sharded run's model from its record (Restore).
  absl::StatusOr<bool> RestoreRecorded(const v1::RunInfo& run);

  StateWriter* const state_;
  GlobalModel active_;
  // By worker id and data-plane key (ControlPlane::Leader): the incarnations that hold it.
  std::vector<std::pair<std::string, std::string>> holders_;
  // The round and global step of the model Adopt installed last (none since StartRun).
  struct Adopted {
    int64_t round = 0;
    int64_t global_step = 0;
  };
  std::optional<Adopted> adopted_;
  // When a checkpoint offer first found the active model unheld (InfiniteFuture: since held).
  absl::Time unheld_since_ = absl::InfiniteFuture();
  std::deque<std::shared_ptr<const ModelSnapshot>> ended_;  // oldest first
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_MODEL_KEEPER_H_
