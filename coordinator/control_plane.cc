#include "coordinator/control_plane.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/proto_time.h"

namespace localsgd {
namespace {

constexpr size_t kMaxReasonLength = 1024;
constexpr size_t kMaxRunIdLength = 256;

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
  std::optional<RunStore> store;
  std::optional<v1::SavedState> saved;
  if (!options.state_dir.empty()) {
    absl::StatusOr<RunStore> opened = RunStore::Open(options.state_dir);
    if (!opened.ok()) return opened.status();
    absl::StatusOr<std::optional<v1::SavedState>> loaded = opened->Load();
    if (!loaded.ok()) return loaded.status();
    saved = *std::move(loaded);
    store.emplace(*std::move(opened));
  }
  std::unique_ptr<ControlPlane> plane(new ControlPlane(std::move(options), std::move(store)));
  if (saved.has_value()) {
    MutexLock lock(&plane->mu_);
    const v1::RunInfo& run = saved->run();
    plane->runs_.Restore(run);
    for (const v1::MemberStatus& member : saved->members()) {
      if (absl::Status s = plane->membership_.Restore(member); !s.ok()) {
        return absl::DataLossError(absl::StrCat(plane->store_->path(), ": saved member ",
                                                member.worker_id(), ": ", s.message()));
      }
    }
    {
      MutexLock lock(&plane->save_mu_);
      plane->saved_state_ = saved->SerializeAsString();
    }
    LogInfo(absl::StrCat("restored run ", run.run_id(), " (", RunStateName(run.state()),
                         ", round ", run.round(), ", global step ", run.global_step(), ", ",
                         saved->members_size(), " members on fresh leases) from ",
                         plane->store_->path()));
  }
  return plane;
}

ControlPlane::ControlPlane(Options options, std::optional<RunStore> store)
    : options_(std::move(options)),
      start_time_(options_.clock()),
      store_(std::move(store)),
      membership_(Membership::Options{options_.lease_timeout, options_.max_members},
                  options_.clock),
      runs_(options_.clock) {
  if (store_.has_value()) writer_ = std::thread([this] { WriterLoop(); });
}

ControlPlane::~ControlPlane() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

void ControlPlane::WriterLoop() {
  while (true) {
    std::pair<int64_t, v1::SavedState> snapshot;
    {
      MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ControlPlane* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return p->members_dirty_ || p->stopping_;
          },
          this));
      if (!members_dirty_) return;  // stopping, nothing left to save
      members_dirty_ = false;
      snapshot = Snapshot();
    }
    Save(snapshot.first, snapshot.second);
  }
}

std::pair<int64_t, v1::SavedState> ControlPlane::Snapshot() {
  v1::SavedState state;
  *state.mutable_run() = runs_.info();
  for (const Member& member : membership_.Members()) *state.add_members() = MemberIdentity(member);
  return {++snapshots_, std::move(state)};
}

void ControlPlane::Save(int64_t sequence, const v1::SavedState& state) {
  std::string serialized = state.SerializeAsString();
  MutexLock lock(&save_mu_);
  if (sequence <= saved_snapshot_ || serialized == saved_state_) return;
  if (absl::Status status = store_->Save(state); !status.ok()) {
    LogError(absl::StrCat("cannot save the coordinator's state: ", status.ToString()));
    return;
  }
  saved_snapshot_ = sequence;
  saved_state_ = std::move(serialized);
}

ControlPlane::Persist ControlPlane::RunOrMembers(v1::RunState before) const {
  return runs_.info().state() != before ? Persist::kRun : Persist::kMembers;
}

absl::StatusOr<v1::JoinResponse> ControlPlane::Join(const v1::JoinRequest& request) {
  MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  const bool replaces_live =
      !request.replaces().empty() && membership_.Find(request.replaces()) != nullptr;
  absl::StatusOr<Member> member = membership_.Join(request);
  if (!member.ok()) return member.status();
  ++joins_total_;
  LogInfo(absl::StrCat("worker ", member->worker_id, " joined (generation ", member->generation,
                       ", host ", member->hostname, ", pid ", member->pid,
                       member->node_leader ? ", node leader" : "", ")"));
  if (replaces_live) {
    LogWarning(absl::StrCat("worker ", request.replaces(), " removed: ",
                            member->worker_id, " leads its node now (the node's ranks saw it die)"));
  }
  const v1::RunState before = runs_.info().state();
  UpdateRun();
  Changed(RunOrMembers(before));
  v1::JoinResponse response;
  response.set_worker_id(member->worker_id);
  response.set_generation(member->generation);
  response.set_lease_timeout_seconds(absl::ToDoubleSeconds(options_.lease_timeout));
  response.set_heartbeat_interval_seconds(absl::ToDoubleSeconds(options_.heartbeat_interval));
  *response.mutable_run() = runs_.info();
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> ControlPlane::Heartbeat(
    const v1::HeartbeatRequest& request) {
  if (request.model_path().size() > kMaxReasonLength * 4) {
    return absl::InvalidArgumentError("model_path: longer than 4096 bytes");
  }
  MutexLock lock(&mu_);
  if (absl::Status status = membership_.Heartbeat(request); !status.ok()) return status;
  ++heartbeats_total_;
  bool run_changed = false;
  if (!request.model_path().empty() && request.model_path() != runs_.info().model_path() &&
      !runs_.info().run_id().empty()) {
    runs_.SetModelPath(request.model_path());
    LogInfo(absl::StrCat("run ", runs_.info().run_id(), ": trained model saved to ",
                         request.model_path(), " by ", request.worker_id()));
    run_changed = true;
  }
  if (!std::isfinite(request.loss()) && runs_.info().state() == v1::RUN_STATE_RUNNING) {
    std::vector<Member> members = membership_.Members();
    if (std::all_of(members.begin(), members.end(),
                    [](const Member& m) { return !std::isfinite(m.loss); })) {
      runs_.Fail("every worker reports a non-finite training loss (NaN or infinity): training "
                 "diverged (lower optimizer.lr, or check the data)")
          .IgnoreError();
      LogError(absl::StrCat("run ", runs_.info().run_id(), ": RUNNING -> FAILED (",
                            runs_.info().reason(), ")"));
      run_changed = true;
    }
  }
  if (request.finished() && runs_.info().state() == v1::RUN_STATE_RUNNING) {
    std::vector<Member> members = membership_.Members();
    const bool all_finished = std::all_of(members.begin(), members.end(),
                                          [](const Member& m) { return m.finished; });
    if (all_finished && static_cast<int>(members.size()) >= runs_.info().spec().min_workers()) {
      runs_.Complete("every worker finished training").IgnoreError();
      LogInfo(absl::StrCat("run ", runs_.info().run_id(), ": RUNNING -> COMPLETED (",
                           runs_.info().reason(), ")"));
      run_changed = true;
    }
  }
  Changed(run_changed ? Persist::kRun : Persist::kNothing);
  v1::HeartbeatResponse response;
  response.set_lease_timeout_seconds(absl::ToDoubleSeconds(options_.lease_timeout));
  *response.mutable_run() = runs_.info();
  return response;
}

absl::Status ControlPlane::Leave(const v1::LeaveRequest& request) {
  if (request.reason().size() > kMaxReasonLength) {
    return absl::InvalidArgumentError("reason: longer than 1024 bytes");
  }
  MutexLock lock(&mu_);
  if (absl::Status status = membership_.Leave(request.worker_id()); !status.ok()) return status;
  LogInfo(absl::StrCat("worker ", request.worker_id(), " left",
                       request.reason().empty() ? "" : absl::StrCat(": ", request.reason())));
  const v1::RunState before = runs_.info().state();
  UpdateRun();
  Changed(RunOrMembers(before));
  return absl::OkStatus();
}

absl::StatusOr<v1::RunInfo> ControlPlane::StartRun(const v1::StartRunRequest& request) {
  if (!request.has_spec()) return absl::InvalidArgumentError("spec: required");
  MutexLock lock(&mu_);
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  absl::StatusOr<v1::RunInfo> run = runs_.Start(request.spec(), membership_.size());
  if (!run.ok()) return run.status();
  LogInfo(absl::StrCat("run ", run->run_id(), " started: ", RunStateName(run->state()),
                       " (min_workers ", run->spec().min_workers(), ", ", membership_.size(),
                       " joined)"));
  Changed(Persist::kRun);
  return run;
}

absl::StatusOr<v1::RunInfo> ControlPlane::StopRun(const v1::StopRunRequest& request) {
  if (request.run_id().size() > kMaxRunIdLength) {
    return absl::InvalidArgumentError("run_id: longer than 256 bytes");
  }
  if (request.reason().size() > kMaxReasonLength) {
    return absl::InvalidArgumentError("reason: longer than 1024 bytes");
  }
  MutexLock lock(&mu_);
  absl::StatusOr<v1::RunInfo> run = runs_.Stop(request.run_id(), request.reason());
  if (!run.ok()) return run.status();
  LogInfo(absl::StrCat("run ", run->run_id(), " stopped: ", run->reason()));
  Changed(Persist::kRun);
  return run;
}

v1::CoordinatorStatus ControlPlane::Status() const {
  MutexLock lock(&mu_);
  absl::Time now = options_.clock();
  v1::CoordinatorStatus status;
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
  return status;
}

v1::RunInfo ControlPlane::Run() const {
  MutexLock lock(&mu_);
  return runs_.info();
}

void ControlPlane::Tick() {
  MutexLock lock(&mu_);
  std::vector<std::string> expired = membership_.ExpireLeases();
  for (const std::string& id : expired) {
    LogWarning(absl::StrCat("worker ", id, " lease expired after ",
                            absl::FormatDuration(options_.lease_timeout), " without heartbeat"));
  }
  leases_expired_total_ += static_cast<int64_t>(expired.size());
  v1::RunState before = runs_.info().state();
  UpdateRun();
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
  std::vector<Leader> leaders;
  for (const Member& member : membership_.Members()) {
    // A leader that finished training will not sync again: rounds must not wait for it.
    if (member.node_leader && !member.finished) {
      leaders.push_back(
          Leader{member.worker_id, member.identity.local_world_size(), member.data_address});
    }
  }
  return leaders;
}

absl::Status ControlPlane::CommitRound(const std::string& run_id, int64_t round,
                                       int64_t global_step) {
  MutexLock lock(&mu_);
  if (run_id != runs_.info().run_id()) {
    return absl::FailedPreconditionError(absl::StrCat("run ", run_id, " is not the current run"));
  }
  v1::RunState before = runs_.info().state();
  if (absl::Status status = runs_.CommitRound(round, global_step); !status.ok()) return status;
  if (runs_.info().state() != before) {
    LogInfo(absl::StrCat("run ", run_id, ": ", RunStateName(before), " -> ",
                         RunStateName(runs_.info().state()), " (", runs_.info().reason(), ")"));
  }
  Changed(Persist::kRun);
  return absl::OkStatus();
}

void ControlPlane::RecordRound(v1::RoundRecord record) {
  constexpr size_t kMaxRecords = 100;
  MutexLock lock(&mu_);
  bytes_received_total_ += record.bytes_received();
  bytes_sent_total_ += record.bytes_sent();
  if (record.outcome() == v1::ROUND_OUTCOME_COMMITTED) {
    ++rounds_committed_total_;
  } else {
    ++rounds_aborted_total_;
  }
  recent_rounds_.push_back(std::move(record));
  while (recent_rounds_.size() > kMaxRecords) recent_rounds_.pop_front();
  Changed(Persist::kNothing);
}

void ControlPlane::UpdateRun() {
  v1::RunState before = runs_.info().state();
  if (!runs_.Update(membership_.size())) return;
  const v1::RunInfo& run = runs_.info();
  std::string line = absl::StrCat("run ", run.run_id(), ": ", RunStateName(before), " -> ",
                                  RunStateName(run.state()),
                                  run.reason().empty() ? "" : absl::StrCat(" (", run.reason(), ")"));
  if (run.state() == v1::RUN_STATE_FAILED) {
    LogError(line);
  } else {
    LogInfo(line);
  }
}

void ControlPlane::Changed(Persist what) {
  ++version_;
  if (!store_.has_value() || what == Persist::kNothing) return;
  if (what == Persist::kMembers) {
    members_dirty_ = true;  // the writer thread saves it
    return;
  }
  std::pair<int64_t, v1::SavedState> snapshot = Snapshot();
  Save(snapshot.first, snapshot.second);
}

}  // namespace localsgd
