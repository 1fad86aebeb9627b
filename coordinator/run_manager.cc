#include "coordinator/run_manager.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/enum_name.h"
#include "common/proto_time.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "common/status_util.h"

namespace localsgd {

RunManager::RunManager(std::function<absl::Time()> clock) : clock_(std::move(clock)) {
  info_.set_state(v1::RUN_STATE_IDLE);
}

bool RunManager::active() const {
  return info_.state() == v1::RUN_STATE_WAITING_FOR_WORKERS ||
         info_.state() == v1::RUN_STATE_RUNNING;
}

absl::StatusOr<v1::RunInfo> RunManager::Start(
    const v1::RunSpec& spec, int live_workers,
    const std::function<bool(const std::string&)>& id_taken) {
  if (active()) {
    return absl::FailedPreconditionError(absl::StrCat("run ", info_.run_id(), " is ",
                                                      EnumName(info_.state()),
                                                      "; stop it before starting another"));
  }
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunSpec normalized, NormalizeRunSpec(spec));

  absl::Time now = clock_();
  v1::RunInfo info;
  // Never the id of the run before (a restarted coordinator counts from 1 again, and may start
  // a run within the same second as the one it restored).
  do {
    info.set_run_id(absl::StrCat(
        "run-", absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()), "-", ++runs_started_));
  } while (info.run_id() == info_.run_id() || (id_taken != nullptr && id_taken(info.run_id())));
  if (normalized.name().empty()) normalized.set_name(info.run_id());
  if (normalized.duration_case() == v1::RunSpec::kTotalSteps) {
    info.set_total_steps(normalized.total_steps());
  }
  *info.mutable_spec() = std::move(normalized);
  info.set_state(v1::RUN_STATE_WAITING_FOR_WORKERS);
  *info.mutable_create_time() = ToProtoTime(now);
  info_ = std::move(info);
  below_quorum_since_ = absl::InfiniteFuture();
  Update(live_workers);
  return info_;
}

absl::StatusOr<v1::RunInfo> RunManager::Stop(const std::string& run_id, const std::string& reason) {
  if (!run_id.empty() && run_id != info_.run_id()) {
    return absl::NotFoundError(absl::StrCat("run_id: no run ", Quoted(run_id),
                                            " (the latest run is \"", info_.run_id(), "\")"));
  }
  if (!active()) {
    if (info_.run_id().empty()) return absl::FailedPreconditionError("no run to stop");
    return absl::FailedPreconditionError(
        absl::StrCat("run ", info_.run_id(), " has already ended (", EnumName(info_.state()), ")"));
  }
  End(v1::RUN_STATE_STOPPED, reason.empty() ? "stopped by operator" : reason);
  return info_;
}

bool RunManager::Update(int live_workers) {
  absl::Time now = clock_();
  const int min_workers = info_.spec().min_workers();
  switch (info_.state()) {
    case v1::RUN_STATE_WAITING_FOR_WORKERS:
      if (live_workers < min_workers) return false;
      info_.set_state(v1::RUN_STATE_RUNNING);
      *info_.mutable_start_time() = ToProtoTime(now);
      return true;
    case v1::RUN_STATE_RUNNING:
      if (live_workers >= min_workers) {
        below_quorum_since_ = absl::InfiniteFuture();
        return false;
      }
      if (below_quorum_since_ == absl::InfiniteFuture()) {
        below_quorum_since_ = now;
        return false;
      }
      if (now - below_quorum_since_ < absl::Seconds(info_.spec().quorum_timeout_seconds())) {
        return false;
      }
      End(v1::RUN_STATE_FAILED, absl::StrCat("only ", live_workers, " of min_workers ", min_workers,
                                             " workers for longer than quorum_timeout_seconds ",
                                             info_.spec().quorum_timeout_seconds()));
      return true;
    default:
      return false;
  }
}

absl::Status RunManager::CommitRound(int64_t round, int64_t global_step, int64_t synced_step,
                                     bool restored) {
  if (info_.state() != v1::RUN_STATE_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("no running run (state ", EnumName(info_.state()), ")"));
  }
  if (round != info_.round() + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("round: expected ", info_.round() + 1, ", got ", round));
  }
  if (global_step < info_.global_step() && !restored) {
    return absl::FailedPreconditionError(
        absl::StrCat("global_step: ", global_step, " would go back from ", info_.global_step()));
  }
  info_.set_round(round);
  info_.set_global_step(global_step);
  if (CommitEndsRun(info_.spec(), synced_step)) {
    End(v1::RUN_STATE_COMPLETED, "reached total_steps");
  }
  return absl::OkStatus();
}

absl::Status RunManager::Fail(const std::string& reason) {
  if (!active()) return absl::FailedPreconditionError("no active run");
  End(v1::RUN_STATE_FAILED, reason);
  return absl::OkStatus();
}

absl::Status RunManager::Complete(const std::string& reason) {
  if (!active()) return absl::FailedPreconditionError("no active run");
  End(v1::RUN_STATE_COMPLETED, reason);
  return absl::OkStatus();
}

void RunManager::Restore(const v1::RunInfo& info) {
  info_ = info;
  below_quorum_since_ = absl::InfiniteFuture();
}

bool RunManager::ReportCheckpoint(const v1::CheckpointInfo& checkpoint) {
  if (checkpoint.run_id() != info_.run_id() || checkpoint.round() > info_.round() ||
      checkpoint.global_step() > info_.global_step()) {
    return false;
  }
  if (info_.has_checkpoint() && checkpoint.round() <= info_.checkpoint().round()) return false;
  *info_.mutable_checkpoint() = checkpoint;
  return true;
}

bool RunManager::ReportTotalSteps(int64_t total_steps) {
  if (info_.spec().duration_case() == v1::RunSpec::kTotalSteps ||
      total_steps <= info_.total_steps()) {
    return false;
  }
  info_.set_total_steps(total_steps);
  return true;
}

void RunManager::SetResults(std::optional<double> final_loss, double final_test_accuracy,
                            std::vector<v1::MemberResult> members) {
  if (final_loss.has_value()) {
    info_.set_final_loss(*final_loss);
  } else {
    info_.clear_final_loss();
  }
  info_.set_final_test_accuracy(final_test_accuracy);
  info_.clear_member_results();
  for (v1::MemberResult& member : members) *info_.add_member_results() = std::move(member);
}

void RunManager::End(v1::RunState state, const std::string& reason) {
  info_.set_state(state);
  info_.set_reason(reason);
  *info_.mutable_end_time() = ToProtoTime(clock_());
}

}  // namespace localsgd
