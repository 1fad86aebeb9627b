#include "coordinator/commit_pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace localsgd {

void CommitPipeline::Start(Commit commit, std::shared_ptr<const ModelSnapshot> model,
                           bool model_first) {
  pending_ = std::move(commit);
  // A sharded run's model lives with its members: the coordinator saves no model of it.
  if (state_ == nullptr || model == nullptr || model->values == nullptr) {
    Record();
    return;
  }
  if (model_first) {
    state_->SaveModel(std::move(model), [this](const absl::Status& saved) {
      host_->Resume([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        if (!saved.ok()) {
          LogError(absl::StrCat("run ", pending_->run_id, ": the global model of round ",
                                pending_->round, " is not on disk: ", saved.ToString()));
        }
        Record();
      });
    });
    return;
  }
  const std::string run_id = pending_->run_id;
  Record();
  ++saves_in_flight_;
  state_->SaveModelLater(std::move(model), [this, run_id](const absl::Status& saved) {
    MutexLock lock(mu_);
    if (!saved.ok()) {
      LogError(
          absl::StrCat("run ", run_id, ": the global model is not on disk: ", saved.ToString()));
    }
    --saves_in_flight_;
  });
}

void CommitPipeline::Record() {
  const Commit& commit = *pending_;
  if (commit.round > 0) {
    if (absl::Status s = plane_->CommitRound(commit.run_id, commit.round, commit.global_step,
                                             commit.synced_step, false, commit.model);
        !s.ok()) {
      LogError(
          absl::StrCat("round ", commit.round, ": the run refused the commit: ", s.ToString()));
    }
    if (state_ != nullptr) {
      // The writer logs a failed write; the commit is announced either way.
      state_->SaveStateThen([this](const absl::Status&) {
        host_->Resume([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { Announce(); });
      });
      return;
    }
  }
  Announce();
}

void CommitPipeline::Announce() {
  Commit commit = *std::move(pending_);
  pending_.reset();
  if (commit.round == 0) return;  // the initial model
  auto response = std::make_shared<v1::SyncResponse>();
  response->mutable_commit()->set_round(commit.round);
  response->mutable_commit()->set_global_step(commit.global_step);
  for (const std::string& id : commit.included) response->mutable_commit()->add_members(id);
  for (const std::shared_ptr<RoundMember>& member : commit.members) {
    member->Enqueue(response);
    member->Close(absl::OkStatus());
    sessions_->Touch(member);
  }
  host_->Announced(commit.included);
  LogInfo(absl::StrCat(commit.log, ", global step ", commit.global_step, ", ",
                       commit.record.duration_seconds(), " s, ", commit.record.bytes_received(),
                       " B in, ", commit.record.bytes_sent(), " B out"));
  plane_->RecordRound(std::move(commit.record));
}

void CommitPipeline::AwaitNoPending() {
  mu_->Await(absl::Condition(
      +[](CommitPipeline* p) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !p->pending_.has_value(); },
      this));
}

void CommitPipeline::AwaitIdle() {
  if (state_ != nullptr) state_->FlushModel();
  mu_->Await(absl::Condition(
      +[](CommitPipeline* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !p->pending_.has_value() && p->saves_in_flight_ == 0;
      },
      this));
}

void CommitPipeline::BeginStop() {
  mu_->Await(absl::Condition(
      +[](CommitPipeline* p) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !p->stopping_; }, this));
  stopping_ = true;
  AwaitIdle();
}

}  // namespace localsgd
