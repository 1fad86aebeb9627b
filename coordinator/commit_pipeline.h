#ifndef LOCALSGD_COORDINATOR_COMMIT_PIPELINE_H_
#define LOCALSGD_COORDINATOR_COMMIT_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/mutex.h"
#include "coordinator/control_plane.h"
#include "coordinator/round_sessions.h"
#include "coordinator/state_writer.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// How a commit reaches the run record, the disk and its members (docs/design.md,
// "Persistence"): a commit already applied to the model is recorded in the run record and
// announced once the record is on disk; the initial model and a run's final commit first wait
// for their model to be on disk; any other commit's model is saved behind its announcement. One
// commit is pending at a time. It lives under its owner's lock (`mu`): every call is made with
// it held, and the state writer's callbacks take it through Host::Resume.
class CommitPipeline {
 public:
  // A model applied but not yet announced (a commit, or the initial model: round 0).
  struct Commit {
    std::string run_id;
    int64_t round = 0;
    int64_t global_step = 0;
    int64_t synced_step = 0;               // GlobalModel::synced_step after it
    std::optional<v1::ModelRecord> model;  // GlobalModel::Record after it
    std::vector<std::string> included;
    std::vector<std::shared_ptr<RoundMember>> members;  // waiting for the RoundCommit
    v1::RoundRecord record;
    std::string log;  // what the round was (logged with its step, time and bytes)
  };
  // The pipeline's owner.
  class Host {
   public:
    virtual ~Host() = default;
    // Off the lock, on a state writer thread: takes the lock, runs `next`, acts on what it
    // changed, releases the lock and flushes the streams touched.
    virtual void Resume(absl::FunctionRef<void()> next) = 0;
    // Under the lock: the round that `included` committed is on record and announced.
    virtual void Announced(const std::vector<std::string>& included) = 0;
  };

  // `state` null: nothing is saved, a commit is recorded and announced at once. `sessions`:
  // the owner's, where the members told of a commit are touched.
  CommitPipeline(Mutex* mu, ControlPlane* plane, StateWriter* state, RoundSessions* sessions,
                 Host* host)
      : mu_(mu), plane_(plane), state_(state), sessions_(sessions), host_(host) {}

  // Whether a commit is pending: no other may start, and what FetchModel hands out waits.
  bool pending() const { return pending_.has_value(); }
  // Whether a decided commit may start now: none is pending and no stop is being saved.
  bool MayStart() const { return !pending_.has_value() && !stopping_; }
  bool stopping() const { return stopping_; }
  // A stop of the run is to be saved: waits for any other stop, then until nothing is pending
  // or being saved; from then until EndStop no commit may start, so that the stopped run's
  // saved model and its record agree about its last committed round.
  void BeginStop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_);
  void EndStop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_) { stopping_ = false; }
  // Starts `commit` of `model` (the snapshot the commit made). `model_first`: the commit is
  // recorded once the model is on disk (the initial model, a run's final commit); otherwise
  // it is recorded now and the model saved behind it. A model without values (a sharded run's)
  // is not saved: the commit is recorded at once.
  void Start(Commit commit, std::shared_ptr<const ModelSnapshot> model, bool model_first)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_);
  // Waits until no commit is pending.
  void AwaitNoPending() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_);
  // Has a model saved behind a commit written now, and waits until nothing is pending or being
  // saved.
  void AwaitIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_);

 private:
  // Commits the pending commit to the run record and announces it once the record is on disk:
  // a member never holds a round the record has not, so a restarted coordinator never reuses
  // the number of a round a member holds.
  void Record() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_);
  // Sends the pending commit's RoundCommit to its members, ends their streams, records the
  // round, tells the host and forgets the commit.
  void Announce() ABSL_EXCLUSIVE_LOCKS_REQUIRED(*mu_);

  Mutex* const mu_;
  ControlPlane* const plane_;
  StateWriter* const state_;
  RoundSessions* const sessions_;
  Host* const host_;
  std::optional<Commit> pending_ ABSL_GUARDED_BY(*mu_);
  // Models of announced commits handed to the state writer and not yet on disk.
  int saves_in_flight_ ABSL_GUARDED_BY(*mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(*mu_) = false;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_COMMIT_PIPELINE_H_
