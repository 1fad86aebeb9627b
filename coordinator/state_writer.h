#ifndef LOCALSGD_COORDINATOR_STATE_WRITER_H_
#define LOCALSGD_COORDINATOR_STATE_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model_store.h"
#include "common/mutex.h"
#include "coordinator/run_store.h"
#include "exchange/chunking.h"
#include "exchange/model_digest.h"
#include "proto/localsgd/v1/state.pb.h"

namespace localsgd {

// A committed global model as the coordinator hands it out: immutable, shared by FetchModel,
// the state writer and the status of the run (docs/design.md, "Persistence").
struct ModelSnapshot {
  std::string run_id;
  int64_t round = 0;  // committed rounds (0: the initial model)
  int64_t global_step = 0;
  ChunkLayout layout;
  // Null for a sharded run's model, which lives with its members (docs/design.md, "Where the
  // model lives"): only its layout and digest are here.
  std::shared_ptr<const std::vector<float>> values;
  // The outer momentum buffer; null when the outer optimizer has none.
  std::shared_ptr<const std::vector<float>> momentum;
  // Whether the model has an outer momentum (with or without the buffer here).
  bool has_momentum = false;
  // ModelDigest(values, momentum) (docs/design.md, "Digests").
  DigestPair digest;
};

// The run record as the control plane hands it to the writer: copied under the plane's lock
// (small parts; the history of ended runs is shared, not copied), serialised by the writer.
struct StateSnapshot {
  v1::RunInfo run;
  std::vector<v1::MemberStatus> members;
  std::vector<v1::SavedCredential> credentials;
  std::shared_ptr<const std::vector<v1::RunInfo>> history;
};

// The two threads that write the coordinator's state folder: one writes models (model.bin,
// ModelStore, and ended runs' archives), the other the run record (state.textproto, RunStore),
// so that a record never waits behind a model. Callers queue immutable snapshots and return at
// once; nothing they hold is needed while a file is serialised, written or fsynced. Models are
// written in the order they were queued, except that a model queued while another still waits
// replaces it (model.bin only ever needs the newest; docs/design.md, "Persistence"), and that
// models saved behind commits (SaveModelLater) wait for their turn: the model thread spends at
// most Options::model_save_share of its time on model.bin. Changes to the run record coalesce:
// the record thread asks the state source for the record when it gets to write it, so many
// changes make one write.
// Thread-safe.
class StateWriter {
 public:
  struct Options {
    std::string state_dir;
    // Testing: called on the writing thread before every write, with the file's name.
    std::function<void(const std::string& file)> before_write;
    // The share of the time models may take to write (SaveModelLater): after a model.bin
    // write that took T, the next waiting model is written no sooner than T (1 / share - 1)
    // later. In (0, 1]; 1 writes each as soon as the one before is written.
    double model_save_share = 0.05;
  };

  // Creates the folder if needed and starts the thread.
  static absl::StatusOr<std::unique_ptr<StateWriter>> Open(Options options);
  // Writes what is queued, then stops.
  ~StateWriter();

  // The saved files, for a coordinator that starts (before anything is queued). DATA_LOSS
  // names a corrupt file.
  absl::StatusOr<std::optional<v1::SavedState>> LoadState();
  absl::StatusOr<std::optional<ModelCheckpoint>> LoadModel() const;
  const std::string& state_path() const { return runs_.path(); }
  const std::string& model_path() const { return models_.path(); }

  // Queues `model` for model.bin, in place of a model queued earlier that is not being written
  // yet; `durable` runs on the model thread, with no lock of the writer's held, once model.bin
  // holds it or a newer model that replaced it (or with the error that kept it off the disk).
  void SaveModel(std::shared_ptr<const ModelSnapshot> model,
                 std::function<void(const absl::Status&)> durable);
  // The same, for a model whose commit did not wait for it: it is written when its turn comes
  // (Options::model_save_share), after everything queued, in place of a model that waits for
  // its turn; SaveModel and FlushModel end its wait.
  void SaveModelLater(std::shared_ptr<const ModelSnapshot> model,
                      std::function<void(const absl::Status&)> durable);
  // A model waiting for its turn is written next.
  void FlushModel();

  // The final models of ended runs (docs/design.md, "Persistence"): queues `model` for
  // runs/<run_id>.bin and, once it is written, removes the oldest such files beyond
  // kKeptRunModels.
  static constexpr int kKeptRunModels = 3;
  void ArchiveModel(std::shared_ptr<const ModelSnapshot> model);
  // The final model archived for `run_id`, nullopt when there is none or `run_id` is no name
  // the coordinator makes (such as "../x"). Reads the disk: call it without locks that others
  // need.
  absl::StatusOr<std::optional<ModelCheckpoint>> LoadArchivedModel(const std::string& run_id) const;

  // Where the run record comes from: called on the record thread, without the writer's lock.
  // Set it before the first StateChanged; null detaches it, waiting for a call in progress
  // (the control plane's end).
  void SetStateSource(std::function<StateSnapshot()> source);
  // The run record changed: returns a ticket that AwaitState waits for.
  int64_t StateChanged();
  // Waits until state.textproto holds every change up to `ticket` (or its write failed,
  // which is logged). Never call it on the record thread (from a SaveStateThen callback).
  void AwaitState(int64_t ticket);
  // Queues a write of the run record as it is now (every change made before the call), then
  // calls `written` on the record thread, with no lock of the writer's held, with the write's
  // status: what must not be told before the record holds it waits for this.
  void SaveStateThen(std::function<void(const absl::Status&)> written);

 private:
  struct Job {
    std::shared_ptr<const ModelSnapshot> model;        // null: a run record (records_)
    std::function<void(const absl::Status&)> durable;  // the run record's: SaveStateThen's
    bool archive = false;                              // an ended run's final model (ArchiveModel)
    // The job's model replaces `other`'s: both callbacks run once it is written.
    void Supersede(Job other);
  };

  StateWriter(Options options, ModelStore models, RunStore runs);
  void ModelLoop();
  void RecordLoop();
  absl::Status WriteState();
  void WriteArchive(const ModelSnapshot& model);
  std::string ArchivePath(const std::string& run_id) const;

  const Options options_;
  const ModelStore models_;
  const RunStore runs_;

  Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);    // models
  std::deque<Job> records_ ABSL_GUARDED_BY(mu_);  // run records
  // A model saved behind a commit, waiting for its turn (SaveModelLater), and when that is.
  std::optional<Job> later_ ABSL_GUARDED_BY(mu_);
  absl::Time later_turn_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool state_queued_ ABSL_GUARDED_BY(mu_) = false;  // a run-record job waits in records_
  int64_t state_requested_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t state_written_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<StateSnapshot()> source_ ABSL_GUARDED_BY(mu_);
  bool in_source_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The last record written (or loaded), serialised, to skip unchanged writes.
  std::string written_state_ ABSL_GUARDED_BY(mu_);
  std::thread model_thread_;
  std::thread record_thread_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STATE_WRITER_H_
