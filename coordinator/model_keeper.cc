#include "coordinator/model_keeper.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "coordinator/restore_plan.h"

namespace localsgd {
namespace {

// The chunks an archived model is sent in (its run's own chunk size is not kept with it).
constexpr int64_t kArchivedChunkBytes = 1 << 20;

}  // namespace

absl::StatusOr<bool> ModelKeeper::Restore(ControlPlane& plane) {
  if (state_ == nullptr) return false;
  const v1::RunInfo run = plane.Run();
  if (run.spec().exchange() != v1::EXCHANGE_STAR) {
    LOCALSGD_ASSIGN_OR_RETURN(const bool restored, RestoreRecorded(run));
    if (restored) {
      plane.RecordEvent(
          v1::EVENT_SEVERITY_INFO, "model_restored",
          absl::StrCat("run ", run.run_id(), ": round ", run.round(), " (global step ",
                       run.global_step(), ", ", run.model().vector_length(),
                       " values) lives with the node leaders; their copies are checked against "
                       "the run record's digests"));
    }
    return restored;
  }
  const std::string& path = state_->model_path();
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<ModelCheckpoint> loaded, state_->LoadModel());
  if (!loaded.has_value()) return false;
  if (loaded->run_id != run.run_id()) {
    LogInfo(absl::StrCat("not restoring ", path, ": it holds run ", loaded->run_id,
                         ", the latest run is ", run.run_id()));
    return false;
  }
  ModelCheckpoint& saved = *loaded;
  std::optional<std::vector<float>> momentum;
  if (!saved.momentum.empty()) momentum = std::move(saved.momentum);
  if (absl::Status s =
          Adopt(plane, saved.round, saved.global_step, path,
                [&] { return active_.Install(std::move(saved.global), std::move(momentum)); });
      !s.ok()) {
    return absl::DataLossError(
        absl::StrCat(s.message(),
                     ". Move model.bin away to let the node leaders upload their "
                     "model (or their checkpoints) again"));
  }
  return true;
}

namespace {

// Installs what `run`'s record keeps of its sharded model into `model`: false when it keeps
// none, DATA_LOSS when what it keeps does not fit the run.
absl::StatusOr<bool> InstallRecorded(const v1::RunInfo& run, GlobalModel& model) {
  const v1::ModelRecord& record = run.model();
  if (run.run_id().empty() || record.vector_length() == 0) return false;
  if (record.fragment_digests_size() != record.fragment_value_digests_size()) {
    return absl::DataLossError(absl::StrCat(
        "the run record of run ", run.run_id(), " holds ", record.fragment_digests_size(),
        " fragment digests and ", record.fragment_value_digests_size(), " of their values"));
  }
  std::vector<DigestPair> digests;
  for (int f = 0; f < record.fragment_digests_size(); ++f) {
    digests.push_back({record.fragment_digests(f), record.fragment_value_digests(f)});
  }
  model.Reset(run.run_id(), run.spec(), run.round(), run.global_step());
  if (absl::Status s = model.InstallDigests(record.vector_length(), std::move(digests)); !s.ok()) {
    model.Reset("", v1::RunSpec(), 0, 0);
    return absl::DataLossError(
        absl::StrCat("the run record's model of run ", run.run_id(), ": ", s.message()));
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> ModelKeeper::RestoreRecorded(const v1::RunInfo& run) {
  LOCALSGD_ASSIGN_OR_RETURN(const bool restored, InstallRecorded(run, active_));
  if (!restored) return false;
  return true;
}

std::optional<ModelSnapshot> ModelKeeper::FromRecord(const v1::RunInfo& run) {
  GlobalModel model;
  absl::StatusOr<bool> installed = InstallRecorded(run, model);
  if (!installed.ok() || !*installed) return std::nullopt;
  return *model.snapshot();
}

bool ModelKeeper::Newer(int64_t global_step) const {
  return !active_.initialised() || (adopted_.has_value() && adopted_->round == active_.round() &&
                                    global_step > adopted_->global_step);
}

absl::Status ModelKeeper::MayInstall(const v1::InitModelHeader& header, const v1::RunInfo& run,
                                     const ControlPlane& plane, absl::Time now) {
  const bool unheld = Unheld(plane.LiveLeaders());
  const absl::Duration grace = plane.lease_timeout();
  if (!unheld) unheld_since_ = absl::InfiniteFuture();
  if (header.from_checkpoint()) {
    LOCALSGD_RETURN_IF_ERROR(CheckCheckpointOffer(header, run));
    if (Newer(header.checkpoint_global_step())) return absl::OkStatus();
    // A sharded run's model that no live member holds is gone with its members (every node
    // leader was killed, or the coordinator restarted and none has said it holds it yet): a
    // checkpoint is what is left of it, once a lease passed without a holder coming back.
    if (unheld) {
      unheld_since_ = std::min(unheld_since_, now);
      if (now - unheld_since_ >= grace) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat(
          "the run's model of round ", active_.round(), " has had no live holder for ",
          absl::FormatDuration(now - unheld_since_), ": a checkpoint replaces it once none ",
          "came back within ", absl::FormatDuration(grace), "; try again"));
    }
  } else if (!active_.initialised() || (active_.round() == 0 && unheld)) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError("the run's model is already set; fetch it instead");
}

absl::Status ModelKeeper::InstallUpload(ControlPlane& plane, const v1::InitModelHeader& header,
                                        ModelUpload upload) {
  const int64_t num_values = upload.layout().num_values;
  const auto install = [&]() -> absl::Status {
    if (upload.keeps_values()) return active_.Install(upload.TakeValues(), upload.TakeMomentum());
    LOCALSGD_ASSIGN_OR_RETURN(std::vector<DigestPair> digests,
                              active_.FragmentDigests(num_values, upload.ChunkDigests()));
    return active_.InstallDigests(num_values, std::move(digests));
  };
  if (header.from_checkpoint()) {
    LOCALSGD_RETURN_IF_ERROR(Adopt(plane, header.checkpoint_round(),
                                   header.checkpoint_global_step(),
                                   absl::StrCat(header.member_id(), "'s checkpoint"), install));
  } else {
    LOCALSGD_RETURN_IF_ERROR(install());
    LogInfo(absl::StrCat("run ", active_.run_id(), ": initial model (", num_values, " values, ",
                         active_.layout().num_chunks(), " chunks) from ", header.member_id()));
  }
  if (std::optional<v1::ModelRecord> record = active_.Record()) {
    LOCALSGD_RETURN_IF_ERROR(plane.RecordModel(active_.run_id(), *std::move(record)));
  }
  holders_.clear();
  for (const ControlPlane::Leader& leader : plane.LiveLeaders()) {
    if (leader.worker_id == header.member_id()) AddHolder(leader);
  }
  return absl::OkStatus();
}

absl::Status ModelKeeper::Adopt(ControlPlane& plane, int64_t round, int64_t global_step,
                                const std::string& source,
                                absl::FunctionRef<absl::Status()> install) {
  const v1::RunInfo run = plane.Run();
  auto disagree = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, " holds round ", round, " (global step ", global_step, ") of run ",
                     run.run_id(), ", but the run record says round ", run.round(),
                     " (global step ", run.global_step(), "): ", why));
  };
  absl::StatusOr<RestorePlan> plan = PlanRestore(round, global_step, run);
  if (!plan.ok()) return disagree(plan.status().message());
  if (plan->commit) {
    if (absl::Status s = plane.CommitRound(run.run_id(), plan->round, plan->global_step,
                                           plan->global_step, plan->restored);
        !s.ok()) {
      return disagree(s.message());
    }
  }
  active_.Reset(run.run_id(), run.spec(), plan->round, plan->global_step);
  if (absl::Status s = install(); !s.ok()) {
    active_.Reset("", v1::RunSpec(), 0, 0);
    return absl::DataLossError(absl::StrCat(source, ": ", s.message()));
  }
  adopted_ = Adopted{active_.round(), global_step};
  plane.RecordEvent(
      plan->lost_rounds ? v1::EVENT_SEVERITY_WARNING : v1::EVENT_SEVERITY_INFO, "model_restored",
      absl::StrCat("run ", run.run_id(), ": restored the global model of round ", active_.round(),
                   " (global step ", active_.global_step(), ", ", active_.layout().num_values,
                   " values) from ", source, plan->note));
  return absl::OkStatus();
}

bool ModelKeeper::Unheld(const std::vector<ControlPlane::Leader>& live) const {
  return active_.initialised() && active_.reducer() == nullptr &&
         Holders(active_.run_id(), active_.round(), live).empty();
}

void ModelKeeper::StartRun(const v1::RunInfo& run) {
  if (active_.initialised()) {
    ended_.push_back(active_.snapshot());
    if (ended_.size() > StateWriter::kKeptRunModels) ended_.pop_front();
    // A sharded run's model lived with its members: only its digest is kept.
    if (state_ != nullptr && active_.snapshot()->values != nullptr) {
      state_->ArchiveModel(active_.snapshot());
    }
  }
  active_.Reset(run.run_id(), run.spec(), run.round(), run.global_step());
  holders_.clear();
  adopted_.reset();
  unheld_since_ = absl::InfiniteFuture();
}

std::optional<ModelSnapshot> ModelKeeper::Find(const std::string& run_id) const {
  if (run_id == active_.run_id() && active_.initialised()) return *active_.snapshot();
  for (const std::shared_ptr<const ModelSnapshot>& ended : ended_) {
    if (ended->run_id == run_id) return *ended;
  }
  return std::nullopt;
}

absl::StatusOr<ModelSnapshot> ModelKeeper::LoadKept(const std::string& run_id) const {
  const absl::Status not_kept = absl::NotFoundError(absl::StrCat(
      "run_id: no model of run ", Quoted(run_id),
      " is kept (the coordinator keeps the final models of the last ", StateWriter::kKeptRunModels,
      " ended runs", state_ != nullptr ? "" : " while it runs", ")"));
  if (state_ == nullptr) return not_kept;
  absl::StatusOr<std::optional<ModelCheckpoint>> kept = state_->LoadArchivedModel(run_id);
  if (!kept.ok()) return kept.status();
  if (!kept->has_value() || (*kept)->run_id != run_id) return not_kept;
  ModelCheckpoint& model = **kept;
  ModelSnapshot snapshot;
  snapshot.run_id = run_id;
  snapshot.round = model.round;
  snapshot.global_step = model.global_step;
  snapshot.layout =
      ChunkLayout::ForBytes(static_cast<int64_t>(model.global.size()), kArchivedChunkBytes);
  snapshot.values = std::make_shared<const std::vector<float>>(std::move(model.global));
  if (!model.momentum.empty()) {
    snapshot.momentum = std::make_shared<const std::vector<float>>(std::move(model.momentum));
  }
  snapshot.has_momentum = snapshot.momentum != nullptr;
  snapshot.digest =
      ModelDigest(*snapshot.values,
                  snapshot.momentum != nullptr ? absl::Span<const float>(*snapshot.momentum)
                                               : absl::Span<const float>(),
                  snapshot.layout);
  return snapshot;
}

void ModelKeeper::SetHolders(const std::vector<std::string>& member_ids,
                             const std::vector<ControlPlane::Leader>& live) {
  holders_.clear();
  for (const ControlPlane::Leader& leader : live) {
    if (std::find(member_ids.begin(), member_ids.end(), leader.worker_id) != member_ids.end()) {
      AddHolder(leader);
    }
  }
}

void ModelKeeper::AddHolder(const ControlPlane::Leader& leader) {
  const std::pair<std::string, std::string> holder{leader.worker_id, leader.data_plane_key};
  if (std::find(holders_.begin(), holders_.end(), holder) == holders_.end()) {
    holders_.push_back(holder);
  }
  unheld_since_ = absl::InfiniteFuture();
}

std::vector<v1::ModelHolder> ModelKeeper::Holders(
    const std::string& run_id, int64_t round, const std::vector<ControlPlane::Leader>& live) const {
  std::vector<v1::ModelHolder> holders;
  if (run_id != active_.run_id() || round != active_.round()) return holders;
  for (const ControlPlane::Leader& leader : live) {
    if (!leader.data_address.empty() &&
        std::find(holders_.begin(), holders_.end(),
                  std::make_pair(leader.worker_id, leader.data_plane_key)) != holders_.end()) {
      v1::ModelHolder& holder = holders.emplace_back();
      holder.set_member_id(leader.worker_id);
      holder.set_data_address(leader.data_address);
    }
  }
  return holders;
}

}  // namespace localsgd
