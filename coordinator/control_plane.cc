#include "coordinator/control_plane.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "common/node_key.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "coordinator/run_verdict.h"

namespace localsgd {
namespace {

constexpr size_t kMaxReasonLength = 1024;
constexpr size_t kMaxRunIdLength = 256;
// MemberResult.left_reason of members that did not leave themselves.
constexpr char kLeaseExpired[] = "lease expired";
constexpr char kReplacedAfterEnd[] = "a new process took its name after the run ended";

// Who a member is (what status shows and the state directory keeps), without its progress.
v1::MemberStatus MemberIdentity(const Member& member) {
  v1::MemberStatus out;
  out.set_worker_id(member.worker_id);
  *out.mutable_identity() = member.identity;
  out.set_hostname(member.hostname);
  out.set_pid(member.pid);
  out.set_data_address(member.data_address);
  out.set_node_leader(member.node_leader);
  out.set_generation(member.generation);
  *out.mutable_join_time() = ToProtoTime(member.join_time);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Create(Options options) {
  std::optional<v1::SavedState> saved;
  if (options.state != nullptr) {
    LOCALSGD_ASSIGN_OR_RETURN(saved, options.state->LoadState());
  }
  std::unique_ptr<ControlPlane> plane(new ControlPlane(std::move(options)));
  if (saved.has_value()) {
    MutexLock lock(&plane->mu_);
    const v1::RunInfo& run = saved->run();
    plane->runs_.Restore(run);
    for (auto it = saved->history().rbegin(); it != saved->history().rend(); ++it) {
      plane->history_.Upsert(*it);
    }
    if (!run.run_id().empty()) {
      plane->history_.Upsert(run);
      if (plane->runs_.active()) plane->history_.StartSeries(run.run_id());
    }
    const std::string& path = plane->options_.state->state_path();
    std::map<std::string, std::string> digests;
    for (const v1::SavedCredential& credential : saved->credentials()) {
      digests[credential.worker_id()] = credential.digest();
    }
    for (const v1::MemberStatus& member : saved->members()) {
      if (absl::Status s = plane->membership_.Restore(member, digests[member.worker_id()]);
          !s.ok()) {
        return absl::DataLossError(
            absl::StrCat(path, ": saved member ", member.worker_id(), ": ", s.message()));
      }
    }
    LogInfo(absl::StrCat("restored run ", run.run_id(), " (", EnumName(run.state()), ", round ",
                         run.round(), ", global step ", run.global_step(), ", ",
                         saved->members_size(), " members on fresh leases) from ", path));
  }
  if (plane->options_.state != nullptr) {
    ControlPlane* raw = plane.get();
    plane->options_.state->SetStateSource([raw] { return raw->Snapshot(); });
  }
  return plane;
}

ControlPlane::ControlPlane(Options options)
    : options_(std::move(options)),
      start_time_(options_.clock()),
      membership_(Membership::Options{options_.lease_timeout, options_.max_members},
                  options_.clock),
      runs_(options_.clock),
      duration_counts_(RoundDurationBounds().size(), 0) {}

ControlPlane::~ControlPlane() {
  if (options_.state == nullptr) return;
  options_.state->AwaitState(options_.state->StateChanged());
  options_.state->SetStateSource(nullptr);
}

StateSnapshot ControlPlane::Snapshot() {
  MutexLock lock(&mu_);
  StateSnapshot state;
  state.run = runs_.info();
  for (const Member& member : membership_.Members()) {
    state.members.push_back(MemberIdentity(member));
    v1::SavedCredential& credential = state.credentials.emplace_back();
    credential.set_worker_id(member.worker_id);
    credential.set_digest(member.credential_digest);
  }
  if (ended_runs_ == nullptr) {
    auto ended = std::make_shared<std::vector<v1::RunInfo>>();
    for (const v1::RunInfo& run : history_.runs()) {
      if (run.run_id() != runs_.info().run_id()) ended->push_back(run);
    }
    ended_runs_ = std::move(ended);
  }
  state.history = ended_runs_;
  return state;
}

ControlPlane::Persist ControlPlane::RunOrMembers(v1::RunState before) const {
  return runs_.info().state() != before ? Persist::kRun : Persist::kMembers;
}

absl::StatusOr<v1::JoinResponse> ControlPlane::Join(const v1::JoinRequest& request) {
  SavedOnReturn saved(options_.state);
  if (const std::string& node = request.identity().node_name();
      !options_.node_key_secret.empty() && !node.empty() &&
      !IsNodeKey(options_.node_key_secret, node, request.node_key())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node_key: ",
        request.node_key().empty() ? "required: this coordinator admits a node only with its key"
                                   : "not the key of node",
        " ", Quoted(node), " (the operator makes it: localsgdctl node_key --node=NAME)"));
  }
  MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  const bool replaces_live =
      !request.replaces().empty() && membership_.Find(request.replaces()) != nullptr;
  LOCALSGD_ASSIGN_OR_RETURN(Membership::Joined joined, membership_.Join(request));
  const Member& member = joined.member;
  ++joins_total_;
  if (joined.same_process) {  // e.g. a rank taking its node's lead with its data plane
    Note(v1::EVENT_SEVERITY_INFO, "worker_rejoined", member.worker_id,
         absl::StrCat("worker ", member.worker_id, " joined again (generation ", member.generation,
                      member.node_leader ? ", node leader" : "",
                      member.data_address.empty() ? "" : ", data plane at ", member.data_address,
                      ")"));
  } else {
    Note(v1::EVENT_SEVERITY_INFO, "worker_joined", member.worker_id,
         absl::StrCat("worker ", member.worker_id, " joined (generation ", member.generation,
                      ", host ", member.hostname, ", pid ", member.pid,
                      member.node_leader ? ", node leader" : "", ")"));
  }
  // After the run's end a new process of that name is not the run's: the one that was has gone
  // (a node leader lingering for the nodes behind its final model stops waiting for it).
  if (auto result = results_.find(member.worker_id); !joined.same_process && !runs_.active() &&
                                                     result != results_.end() &&
                                                     result->second.left_reason().empty()) {
    result->second.set_left_reason(kReplacedAfterEnd);
    FillResults();
  }
  if (replaces_live) {
    Note(v1::EVENT_SEVERITY_WARNING, "leader_replaced", request.replaces(),
         absl::StrCat("worker ", request.replaces(), " removed: ", member.worker_id,
                      " leads its node now (the node's ranks saw it die)"));
  }
  const v1::RunState before = runs_.info().state();
  UpdateRun();
  saved.ticket = Changed(RunOrMembers(before));
  v1::JoinResponse response;
  response.set_worker_id(member.worker_id);
  response.set_generation(member.generation);
  response.set_lease_timeout_seconds(absl::ToDoubleSeconds(options_.lease_timeout));
  response.set_heartbeat_interval_seconds(absl::ToDoubleSeconds(options_.heartbeat_interval));
  *response.mutable_run() = runs_.info();
  response.set_member_credential(std::move(joined.credential));
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> ControlPlane::Heartbeat(const v1::HeartbeatRequest& request) {
  if (request.model_path().size() > kMaxReasonLength * 4) {
    return absl::InvalidArgumentError("model_path: longer than 4096 bytes");
  }
  SavedOnReturn saved(options_.state);
  MutexLock lock(&mu_);
  const Member* previous = membership_.Find(request.worker_id());
  const int64_t unsynced_before = previous != nullptr ? previous->unsynced_steps : 0;
  LOCALSGD_RETURN_IF_ERROR(membership_.Heartbeat(request));
  ++heartbeats_total_;
  if (const int64_t bound = runs_.info().spec().max_unsynced_steps();
      runs_.active() && bound > 0 && request.unsynced_steps() >= bound && unsynced_before < bound) {
    Note(v1::EVENT_SEVERITY_WARNING, "member_unsynced", request.worker_id(),
         absl::StrCat(request.worker_id(), " trained ", request.unsynced_steps(),
                      " steps since the last round its node took (max_unsynced_steps ", bound,
                      "): it waits for a round"));
  }
  const v1::RunState before = runs_.info().state();
  bool run_changed = false;
  const bool results_changed = RecordReport(request, &run_changed);
  if (!request.model_path().empty() && request.model_path() != runs_.info().model_path() &&
      !runs_.info().run_id().empty()) {
    runs_.SetModelPath(request.model_path());
    Note(v1::EVENT_SEVERITY_INFO, "model_saved", request.worker_id(),
         absl::StrCat("run ", runs_.info().run_id(), ": trained model saved to ",
                      request.model_path(), " by ", request.worker_id()));
    run_changed = true;
  }
  // A report that may end the run: a non-finite loss, or the end of a worker's training.
  if ((!std::isfinite(request.loss()) || request.finished()) &&
      runs_.info().state() == v1::RUN_STATE_RUNNING) {
    const RunVerdict verdict = JudgeRun(membership_.Members(), runs_.info().spec().min_workers());
    if (verdict.kind == RunVerdict::Kind::kDiverged) {
      runs_.Fail(verdict.reason).IgnoreError();
      run_changed = true;
    } else if (verdict.kind == RunVerdict::Kind::kCompleted) {
      runs_.Complete(verdict.reason).IgnoreError();
      run_changed = true;
    }
  }
  AfterRunChange(before);
  if (results_changed) FillResults();
  const int64_t ticket = Changed(run_changed       ? Persist::kRun
                                 : results_changed ? Persist::kMembers
                                                   : Persist::kNothing);
  // Only the end of the run waits for the disk (a worker may exit on this answer).
  if (runs_.info().state() != before) saved.ticket = ticket;
  v1::HeartbeatResponse response;
  response.set_lease_timeout_seconds(absl::ToDoubleSeconds(options_.lease_timeout));
  *response.mutable_run() = runs_.info();
  return response;
}

bool ControlPlane::RecordReport(const v1::HeartbeatRequest& request, bool* run_changed) {
  if (runs_.info().run_id().empty()) return false;
  bool changed = false;
  // A run's workers are those that report while it is active; after its end they may still
  // report their final evaluation.
  auto result = results_.find(request.worker_id());
  const Member& member = *membership_.Find(request.worker_id());  // it just beat
  // A worker's final report counts even when it arrives after the run ended (a rank whose
  // first heartbeat of the run is its last: the run was short, or others completed it).
  const bool may_report = MayReport(request.worker_id(), member.generation);
  if (result == results_.end() && may_report && (runs_.active() || request.finished())) {
    result = results_.try_emplace(request.worker_id()).first;
    result->second.set_worker_id(request.worker_id());
  }
  if (result != results_.end() && may_report) {
    v1::MemberResult& r = result->second;
    // After the end, the run record is refilled (and saved) only when a report changed:
    // not on every heartbeat of every finished worker.
    const bool same =
        r.step() == request.step() && r.test_accuracy() == request.test_accuracy() &&
        (r.loss() == request.loss() || (std::isnan(r.loss()) && std::isnan(request.loss())));
    r.set_step(request.step());
    r.set_loss(request.loss());
    r.set_test_accuracy(request.test_accuracy());
    r.set_hostname(member.hostname);
    if (request.samples_per_second() > 0) r.set_samples_per_second(request.samples_per_second());
    if (runs_.active() && (r.preempted() || r.left_reason() == kLeaseExpired)) {  // it came back
      r.set_preempted(false);
      r.clear_left_reason();
    }
    changed = !runs_.active() && !same;
  }
  // A node's final checkpoint is written as its training ends: it may come after the run's end.
  if (request.has_checkpoint() && may_report && runs_.ReportCheckpoint(member.checkpoint)) {
    *run_changed = true;
  }
  if (runs_.active() && request.total_steps() > 0 &&
      runs_.ReportTotalSteps(request.total_steps())) {
    *run_changed = true;
  }
  return changed;
}

absl::Status ControlPlane::Authenticate(const std::string& worker_id,
                                        absl::string_view credential) const {
  MutexLock lock(&mu_);
  return membership_.Authenticate(worker_id, credential);
}

absl::Status ControlPlane::Leave(const v1::LeaveRequest& request) {
  if (request.reason().size() > kMaxReasonLength) {
    return absl::InvalidArgumentError("reason: longer than 1024 bytes");
  }
  if (request.failed() && request.preempted()) {
    return absl::InvalidArgumentError("failed, preempted: a worker leaves one way, not both");
  }
  SavedOnReturn saved(options_.state);
  MutexLock lock(&mu_);
  const Member* leaving = membership_.Find(request.worker_id());
  const int64_t generation = leaving != nullptr ? leaving->generation : -1;
  LOCALSGD_RETURN_IF_ERROR(membership_.Leave(request.worker_id(), request.member_credential()));
  const bool failed = request.failed();
  const bool preempted = request.preempted() && runs_.active();
  Note(failed      ? v1::EVENT_SEVERITY_ERROR
       : preempted ? v1::EVENT_SEVERITY_WARNING
                   : v1::EVENT_SEVERITY_INFO,
       failed ? "worker_failed" : "worker_left", request.worker_id(),
       absl::StrCat("worker ", request.worker_id(), preempted ? " was preempted and" : "", " left",
                    request.reason().empty() ? "" : absl::StrCat(": ", request.reason())));
  if (runs_.active() ||
      (results_.count(request.worker_id()) > 0 && MayReport(request.worker_id(), generation))) {
    v1::MemberResult& result = results_[request.worker_id()];
    result.set_worker_id(request.worker_id());
    result.set_left_reason(request.reason());
    result.set_preempted(preempted);
    result.set_failed(failed);
  }
  const v1::RunState before = runs_.info().state();
  UpdateRun();
  const v1::RunState updated = runs_.info().state();
  FailIfEveryWorkerFailed();
  AfterRunChange(updated);
  if (!runs_.active()) FillResults();
  saved.ticket = Changed(RunOrMembers(before));
  return absl::OkStatus();
}

absl::StatusOr<v1::RunInfo> ControlPlane::StartRun(const v1::StartRunRequest& request) {
  if (!request.has_spec()) return absl::InvalidArgumentError("spec: required");
  SavedOnReturn saved(options_.state);
  MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  if (!runs_.info().run_id().empty()) history_.Upsert(runs_.info());  // as it ended
  auto id_taken = [this](const std::string& id)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return history_.Find(id) != nullptr; };
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run,
                            runs_.Start(request.spec(), membership_.size(), id_taken));
  if (run.state() == v1::RUN_STATE_WAITING_FOR_WORKERS) {
    runs_.SetWaitingFor(WaitingFor());
    run = runs_.info();
  }
  // Rounds, results and series belong to one run.
  results_.clear();
  end_generations_.reset();
  recent_rounds_.clear();
  ended_runs_ = nullptr;
  history_.Upsert(run);
  history_.StartSeries(run.run_id());
  Note(v1::EVENT_SEVERITY_INFO, "run_state", "",
       absl::StrCat("run ", run.run_id(), " started: ", EnumName(run.state()), " (min_workers ",
                    run.spec().min_workers(), ", ", membership_.size(), " joined)"));
  saved.ticket = Changed(Persist::kRun);
  return run;
}

absl::StatusOr<v1::RunInfo> ControlPlane::StopRun(const v1::StopRunRequest& request) {
  if (request.run_id().size() > kMaxRunIdLength) {
    return absl::InvalidArgumentError("run_id: longer than 256 bytes");
  }
  if (request.reason().size() > kMaxReasonLength) {
    return absl::InvalidArgumentError("reason: longer than 1024 bytes");
  }
  SavedOnReturn saved(options_.state);
  MutexLock lock(&mu_);
  const v1::RunState before = runs_.info().state();
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, runs_.Stop(request.run_id(), request.reason()));
  AfterRunChange(before);
  saved.ticket = Changed(Persist::kRun);
  return run;
}

v1::CoordinatorStatus ControlPlane::Status() const {
  MutexLock lock(&mu_);
  absl::Time now = options_.clock();
  v1::CoordinatorStatus status;
  status.set_transport_security(options_.transport_security);
  status.set_token_required(options_.token_required);
  status.set_node_keys_required(!options_.node_key_secret.empty());
  *status.mutable_run() = runs_.info();
  for (const Member& member : membership_.Members()) {
    v1::MemberStatus* out = status.add_members();
    *out = MemberIdentity(member);
    out->set_step(member.step);
    out->set_loss(member.loss);
    out->set_samples_per_second(member.samples_per_second);
    out->set_heartbeat_age_seconds(absl::ToDoubleSeconds(now - member.last_seen));
    out->set_finished(member.finished);
    out->set_test_accuracy(member.test_accuracy);
    out->set_unsynced_steps(member.unsynced_steps);
    if (!member.checkpoint.path().empty()) *out->mutable_checkpoint() = member.checkpoint;
  }
  status.set_version(version_);
  *status.mutable_time() = ToProtoTime(now);
  status.set_uptime_seconds(absl::ToDoubleSeconds(now - start_time_));
  status.set_heartbeats_total(heartbeats_total_);
  status.set_joins_total(joins_total_);
  status.set_leases_expired_total(leases_expired_total_);
  status.set_bytes_received_total(bytes_received_total_);
  status.set_bytes_sent_total(bytes_sent_total_);
  status.set_rounds_committed_total(rounds_committed_total_);
  status.set_rounds_aborted_total(rounds_aborted_total_);
  for (const v1::RoundRecord& record : recent_rounds_) *status.add_recent_rounds() = record;
  for (const v1::Event& event : events_.events()) *status.add_events() = event;
  for (const auto& [reason, count] : dropped_by_class_) {
    (*status.mutable_members_dropped_total())[reason] = count;
  }
  int64_t cumulative = 0;
  for (size_t b = 0; b < duration_counts_.size(); ++b) {
    cumulative += duration_counts_[b];
    status.add_round_duration_bucket_bounds(RoundDurationBounds()[b]);
    status.add_round_duration_bucket_counts(cumulative);
  }
  status.set_round_duration_seconds_sum(duration_sum_);
  if (last_commit_ != absl::InfinitePast()) {
    *status.mutable_last_commit_time() = ToProtoTime(last_commit_);
  }
  // Progress: the global step (the slowest worker's step in runs without averaging).
  const v1::RunInfo& run = runs_.info();
  int64_t step = run.global_step();
  if (!run.spec().enabled() && status.members_size() > 0) {
    step = status.members(0).step();
    for (const v1::MemberStatus& member : status.members()) step = std::min(step, member.step());
  }
  v1::RunProgress* progress = status.mutable_progress();
  progress->set_global_step(step);
  progress->set_total_steps(run.total_steps());
  if (run.state() == v1::RUN_STATE_COMPLETED) {
    progress->set_percent(100);
  } else if (run.total_steps() > 0) {
    progress->set_percent(std::min(
        100.0, 100.0 * static_cast<double>(step) / static_cast<double>(run.total_steps())));
  }
  double elapsed = 0;
  if (run.has_start_time()) {
    const absl::Time end = run.has_end_time() ? FromProtoTime(run.end_time()) : now;
    elapsed = std::max(0.0, absl::ToDoubleSeconds(end - FromProtoTime(run.start_time())));
  }
  progress->set_elapsed_seconds(elapsed);
  progress->set_eta_seconds(-1);
  if (runs_.active() && step > 0 && run.total_steps() > step && elapsed > 0) {
    progress->set_eta_seconds(elapsed / static_cast<double>(step) *
                              static_cast<double>(run.total_steps() - step));
  }
  return status;
}

std::vector<v1::RunInfo> ControlPlane::ListRuns() const {
  MutexLock lock(&mu_);
  std::vector<v1::RunInfo> runs;
  for (const v1::RunInfo& run : history_.runs()) {
    runs.push_back(run.run_id() == runs_.info().run_id() ? runs_.info() : run);
  }
  return runs;
}

absl::StatusOr<v1::RunSeries> ControlPlane::Series(const std::string& run_id) const {
  MutexLock lock(&mu_);
  const RunSeries* series = history_.Series(run_id);
  if (series == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("run ", Quoted(run_id),
                     ": no series kept (unknown run, one of the older runs, or a "
                     "run from before the coordinator restarted)"));
  }
  v1::RunSeries out;
  out.set_run_id(run_id);
  for (v1::SeriesPoint& point : series->Points()) *out.add_points() = std::move(point);
  return out;
}

const std::vector<double>& ControlPlane::RoundDurationBounds() {
  static const std::vector<double>* const kBounds =
      new std::vector<double>{0.05,
                              0.1,
                              0.25,
                              0.5,
                              1,
                              2.5,
                              5,
                              10,
                              30,
                              60,
                              120,
                              300,
                              std::numeric_limits<double>::infinity()};
  return *kBounds;
}

std::string ControlPlane::DropReasonClass(const std::string& reason) {
  if (absl::StrContains(reason, "deadline")) return "deadline";
  if (absl::StartsWith(reason, "refused")) return "refused";
  if (absl::StrContains(reason, "lease expired") || absl::StrContains(reason, "left") ||
      absl::StrContains(reason, "stream")) {
    return "left";
  }
  return "error";
}

v1::RunInfo ControlPlane::Run() const {
  MutexLock lock(&mu_);
  return runs_.info();
}

void ControlPlane::Tick() {
  MutexLock lock(&mu_);
  std::vector<std::string> expired = membership_.ExpireLeases();
  bool results_changed = false;
  for (const std::string& id : expired) {
    Note(v1::EVENT_SEVERITY_WARNING, "lease_expired", id,
         absl::StrCat("worker ", id, " lease expired after ",
                      absl::FormatDuration(options_.lease_timeout), " without heartbeat"));
    // Gone, as far as the run's results say (a node leader lingering for the nodes behind its
    // final model stops waiting for it).
    if (auto result = results_.find(id);
        result != results_.end() && result->second.left_reason().empty()) {
      result->second.set_left_reason(kLeaseExpired);
      results_changed = true;
    }
  }
  leases_expired_total_ += static_cast<int64_t>(expired.size());
  v1::RunState before = runs_.info().state();
  UpdateRun();
  if (results_changed && !runs_.active()) FillResults();
  if (!expired.empty() || runs_.info().state() != before) Changed(RunOrMembers(before));
}

int64_t ControlPlane::AwaitChange(int64_t seen, absl::Duration timeout) const {
  MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > seen; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return version_;
}

int64_t ControlPlane::version() const {
  MutexLock lock(&mu_);
  return version_;
}

void ControlPlane::Drain() {
  MutexLock lock(&mu_);
  draining_ = true;
  Changed(Persist::kNothing);
}

bool ControlPlane::draining() const {
  MutexLock lock(&mu_);
  return draining_;
}

std::vector<ControlPlane::Leader> ControlPlane::LiveLeaders() const {
  MutexLock lock(&mu_);
  const std::vector<Member> members = membership_.Members();
  std::map<std::string, int> joined;  // live members by node
  for (const Member& member : members) ++joined[member.identity.node_name()];
  std::vector<Leader> leaders;
  for (const Member& member : members) {
    // A leader that finished training will not sync again: rounds must not wait for it.
    if (member.node_leader && !member.finished) {
      leaders.push_back(
          Leader{member.worker_id, member.identity.local_world_size(),
                 std::min(member.identity.local_world_size(), joined[member.identity.node_name()]),
                 member.data_address, member.credential_digest});
    }
  }
  return leaders;
}

std::optional<v1::RunInfo> ControlPlane::FindRun(const std::string& run_id) const {
  MutexLock lock(&mu_);
  if (!run_id.empty() && runs_.info().run_id() == run_id) return runs_.info();
  if (const v1::RunInfo* ended = history_.Find(run_id)) return *ended;
  return std::nullopt;
}

absl::StatusOr<v1::RunInfo> ControlPlane::AveragingRun(const std::string& run_id) const {
  v1::RunInfo run = Run();
  if (run_id.empty() || run_id != run.run_id()) {
    return absl::NotFoundError(absl::StrCat("run_id: ", Quoted(run_id), " is not the active run"));
  }
  if (run.state() != v1::RUN_STATE_RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run_id, " is not running (", EnumName(run.state()), ")"));
  }
  if (!run.spec().enabled()) {
    return absl::FailedPreconditionError("averaging is disabled for this run (enabled: false)");
  }
  return run;
}

absl::StatusOr<ControlPlane::Leader> ControlPlane::CheckLeader(const std::string& member_id,
                                                               absl::string_view credential) const {
  if (member_id.empty()) return absl::InvalidArgumentError("member_id: required");
  std::vector<Leader> leaders = LiveLeaders();
  auto leader = std::find_if(leaders.begin(), leaders.end(),
                             [&](const Leader& l) { return l.worker_id == member_id; });
  if (leader == leaders.end()) {
    return absl::NotFoundError(
        absl::StrCat("member_id: ", Quoted(member_id), " is not a live node leader (join first)"));
  }
  LOCALSGD_RETURN_IF_ERROR(Authenticate(member_id, credential));
  return std::move(*leader);
}

absl::Status ControlPlane::CommitRound(const std::string& run_id, int64_t round,
                                       int64_t global_step, int64_t synced_step, bool restored,
                                       std::optional<v1::ModelRecord> model) {
  MutexLock lock(&mu_);
  if (run_id != runs_.info().run_id()) {
    return absl::FailedPreconditionError(absl::StrCat("run ", run_id, " is not the current run"));
  }
  v1::RunState before = runs_.info().state();
  LOCALSGD_RETURN_IF_ERROR(runs_.CommitRound(round, global_step, synced_step, restored));
  if (model.has_value()) runs_.SetModel(*std::move(model));
  last_commit_ = options_.clock();
  AfterRunChange(before);
  Changed(Persist::kRun);
  return absl::OkStatus();
}

absl::Status ControlPlane::RecordModel(const std::string& run_id, v1::ModelRecord model) {
  MutexLock lock(&mu_);
  if (run_id != runs_.info().run_id()) {
    return absl::FailedPreconditionError(absl::StrCat("run ", run_id, " is not the current run"));
  }
  runs_.SetModel(std::move(model));
  Changed(Persist::kRun);
  return absl::OkStatus();
}

void ControlPlane::RecordRound(v1::RoundRecord record) {
  constexpr size_t kMaxRecords = 100;
  MutexLock lock(&mu_);
  if (record.run_id().empty()) record.set_run_id(runs_.info().run_id());
  bytes_received_total_ += record.bytes_received();
  bytes_sent_total_ += record.bytes_sent();
  if (record.outcome() == v1::ROUND_OUTCOME_COMMITTED) {
    ++rounds_committed_total_;
  } else {
    ++rounds_aborted_total_;
    Note(v1::EVENT_SEVERITY_WARNING, "round_aborted", "",
         absl::StrCat("round ", record.round(), " aborted: ", record.reason()), record.reason());
  }
  const std::vector<double>& bounds = RoundDurationBounds();
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds.begin(), bounds.end(), record.duration_seconds()) - bounds.begin());
  ++duration_counts_[std::min(bucket, bounds.size() - 1)];
  duration_sum_ += record.duration_seconds();
  for (const v1::DroppedMember& dropped : record.dropped()) {
    ++dropped_by_class_[DropReasonClass(dropped.reason())];
    Note(v1::EVENT_SEVERITY_WARNING, "member_dropped", dropped.member_id(),
         absl::StrCat("round ", record.round(), ": dropped ", dropped.member_id(), ": ",
                      dropped.reason()),
         dropped.reason());
  }
  for (const v1::DroppedMember& excluded : record.excluded()) {
    Note(v1::EVENT_SEVERITY_WARNING, "member_excluded", excluded.member_id(),
         absl::StrCat("round ", record.round(), ": the delta of ", excluded.member_id(),
                      " left out: ", excluded.reason()),
         excluded.reason());
  }
  // The round as a point of its run's series, with the members' latest reports.
  v1::SeriesPoint point;
  point.set_round(record.round());
  point.set_outcome(record.outcome());
  point.set_global_step(record.outcome() == v1::ROUND_OUTCOME_COMMITTED
                            ? record.global_step()
                            : runs_.info().global_step());
  *point.mutable_time() = ToProtoTime(options_.clock());
  point.set_duration_seconds(record.duration_seconds());
  point.set_slowest_wait_seconds(record.slowest_wait_seconds());
  point.set_bytes_received(record.bytes_received());
  point.set_bytes_sent(record.bytes_sent());
  point.set_compression_ratio(record.compression_ratio());
  point.set_members(record.members_size());
  for (const v1::ShardRecord& shard : record.shards()) {
    point.set_owner_bytes_received(point.owner_bytes_received() + shard.bytes_received());
    point.set_owner_bytes_sent(point.owner_bytes_sent() + shard.bytes_sent());
  }
  int losses = 0;
  int evaluated = 0;
  double loss_sum = 0;
  double accuracy_sum = 0;
  for (const Member& member : membership_.Members()) {
    point.set_samples_per_second(point.samples_per_second() + member.samples_per_second);
    if (member.test_accuracy > 0) {
      accuracy_sum += member.test_accuracy;
      ++evaluated;
    }
    if (member.step == 0 || !std::isfinite(member.loss)) continue;
    point.set_loss_min(losses == 0 ? member.loss : std::min(point.loss_min(), member.loss));
    point.set_loss_max(losses == 0 ? member.loss : std::max(point.loss_max(), member.loss));
    loss_sum += member.loss;
    ++losses;
  }
  if (losses > 0) point.set_loss_mean(loss_sum / losses);
  if (evaluated > 0) point.set_test_accuracy(accuracy_sum / evaluated);
  history_.AddPoint(record.run_id(), std::move(point));
  recent_rounds_.push_back(std::move(record));
  while (recent_rounds_.size() > kMaxRecords) recent_rounds_.pop_front();
  Changed(Persist::kNothing);
}

void ControlPlane::UpdateRun() {
  const v1::RunState before = runs_.info().state();
  runs_.Update(membership_.size());
  runs_.SetWaitingFor(runs_.info().state() == v1::RUN_STATE_WAITING_FOR_WORKERS ? WaitingFor()
                                                                                : "");
  AfterRunChange(before);
}

std::string ControlPlane::WaitingFor() const {
  std::map<std::string, std::pair<int, int>> nodes;  // joined ranks, ranks it says it has
  for (const Member& member : membership_.Members()) {
    std::pair<int, int>& node = nodes[member.identity.node_name()];
    ++node.first;
    node.second = std::max(node.second, member.identity.local_world_size());
  }
  std::vector<std::string> parts;
  for (const auto& [name, ranks] : nodes) {
    if (parts.size() == 8) {
      parts.push_back(absl::StrCat("and ", nodes.size() - 8, " more nodes"));
      break;
    }
    parts.push_back(absl::StrCat(name, ": ", ranks.first, " of ", ranks.second, " ranks"));
  }
  return absl::StrCat(membership_.size(), " of min_workers ", runs_.info().spec().min_workers(),
                      " workers have joined",
                      parts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(parts, "; "), ")"));
}

void ControlPlane::RecordEvent(v1::EventSeverity severity, const std::string& kind,
                               const std::string& text) {
  MutexLock lock(&mu_);
  Note(severity, kind, "", text);
  Changed(Persist::kNothing);
}

void ControlPlane::Note(v1::EventSeverity severity, const std::string& kind,
                        const std::string& worker_id, const std::string& text,
                        const std::string& cause) {
  const v1::Event& event =
      events_.Add(options_.clock(), severity, kind, worker_id, runs_.info().run_id(), text, cause);
  switch (severity) {
    case v1::EVENT_SEVERITY_ERROR:
      LogError(event.text());
      break;
    case v1::EVENT_SEVERITY_WARNING:
      LogWarning(event.text());
      break;
    default:
      LogInfo(event.text());
  }
}

void ControlPlane::AfterRunChange(v1::RunState before) {
  const v1::RunInfo& run = runs_.info();
  if (run.state() == before) return;
  Note(run.state() == v1::RUN_STATE_FAILED ? v1::EVENT_SEVERITY_ERROR : v1::EVENT_SEVERITY_INFO,
       "run_state", "",
       absl::StrCat("run ", run.run_id(), ": ", EnumName(before), " -> ", EnumName(run.state()),
                    run.reason().empty() ? "" : absl::StrCat(" (", run.reason(), ")")));
  if (runs_.active()) return;
  if (before == v1::RUN_STATE_WAITING_FOR_WORKERS || before == v1::RUN_STATE_RUNNING) {
    end_generations_.emplace();
    for (const Member& member : membership_.Members()) {
      (*end_generations_)[member.worker_id] = member.generation;
    }
  }
  FillResults();
}

bool ControlPlane::MayReport(const std::string& worker_id, int64_t generation) const {
  if (runs_.active() || !end_generations_.has_value()) return true;
  auto member = end_generations_->find(worker_id);
  return member != end_generations_->end() && member->second == generation;
}

void ControlPlane::FillResults() {
  std::vector<v1::MemberResult> members;
  int losses = 0;
  int evaluated = 0;
  bool diverged = false;
  double loss_sum = 0;
  double accuracy_sum = 0;
  for (const auto& [id, result] : results_) {
    members.push_back(result);
    if (result.step() > 0 && std::isfinite(result.loss())) {
      loss_sum += result.loss();
      ++losses;
    } else if (!std::isfinite(result.loss())) {
      diverged = true;
    }
    if (result.test_accuracy() > 0) {
      accuracy_sum += result.test_accuracy();
      ++evaluated;
    }
  }
  const std::optional<double> final_loss =
      losses > 0 ? std::optional<double>(loss_sum / losses)
      : diverged ? std::optional<double>(std::numeric_limits<double>::quiet_NaN())
                 : std::nullopt;
  runs_.SetResults(final_loss, evaluated > 0 ? accuracy_sum / evaluated : 0.0, std::move(members));
}

void ControlPlane::FailIfEveryWorkerFailed() {
  if (!runs_.active() || membership_.size() > 0 || results_.empty() ||
      runs_.info().global_step() > 0) {
    return;
  }
  std::vector<std::string> errors;
  for (const auto& [id, result] : results_) {
    if (result.step() > 0 || !result.failed()) return;
    errors.push_back(absl::StrCat(id, ": ", result.left_reason()));
  }
  constexpr size_t kShown = 3;
  const size_t more = errors.size() > kShown ? errors.size() - kShown : 0;
  errors.resize(std::min(errors.size(), kShown));
  runs_
      .Fail(absl::StrCat("every worker failed before training: ", absl::StrJoin(errors, "; "),
                         more > 0 ? absl::StrCat(" (and ", more, " more)") : ""))
      .IgnoreError();
}

int64_t ControlPlane::Changed(Persist what) {
  ++version_;
  if (options_.state == nullptr || what == Persist::kNothing) return 0;
  const int64_t ticket = options_.state->StateChanged();
  return what == Persist::kRun ? ticket : 0;
}

}  // namespace localsgd
