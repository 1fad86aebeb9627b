#include "coordinator/round_manager.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "coordinator/restore_plan.h"
#include "coordinator/round_refusal.h"
#include "coordinator/sync_admission.h"

namespace localsgd {

RoundManager::RoundManager(ControlPlane* plane, Options options)
    : plane_(plane), options_(std::move(options)), models_(options_.state) {
  std::random_device random;
  next_attempt_ = (uint64_t{random()} << 32) | random();
}

RoundManager::~RoundManager() {
  MutexLock lock(&mu_);
  pipeline_.AwaitIdle();
}

void RoundManager::Resume(absl::FunctionRef<void()> next) {
  std::vector<std::shared_ptr<RoundMember>> touched;
  {
    MutexLock lock(&mu_);
    next();
    Advance();  // a commit that waited for this one
    touched = sessions_.TakeTouched();
  }
  // Not through `this`: once nothing is pending, the manager may be destroyed.
  TouchedStreams<RoundMember>::Flush(std::move(touched));
}

absl::StatusOr<v1::RunInfo> RoundManager::RunningRun(const std::string& run_id) {
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, plane_->AveragingRun(run_id));
  if (model().run_id() != run.run_id()) {
    if (round_.has_value()) Abort("a new run started");
    models_.StartRun(run);  // the ended run's final model stays to be fetched
    // Refusals, suspensions and streams belong to the run they were made in.
    standing_ = MemberStanding(run.spec());
    backoff_ = RoundBackoff();
    sessions_.ForgetLatest();
  }
  return run;
}

absl::StatusOr<ModelUpload> RoundManager::BeginInit(const v1::InitModelHeader& header) {
  LOCALSGD_RETURN_IF_ERROR(CheckInitModelHeader(header));
  MutexLock lock(&mu_);
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  LOCALSGD_RETURN_IF_ERROR(
      plane_->CheckLeader(header.member_id(), header.member_credential()).status());
  LOCALSGD_RETURN_IF_ERROR(models_.MayInstall(header, run, *plane_, options_.clock()));
  const v1::RunSpec& spec = model().spec();
  return ModelUpload(ChunkLayout::ForBytes(header.vector_length(), spec.chunk_bytes()),
                     header.has_momentum(), spec.exchange() == v1::EXCHANGE_STAR,
                     spec.outer_optimizer().momentum() != 0);
}

absl::Status RoundManager::FinishInit(const v1::InitModelHeader& header, ModelUpload upload,
                                      v1::InitModelResponse* response) {
  MutexLock lock(&mu_);
  // After a model still being saved (of an earlier run), never before it.
  pipeline_.AwaitIdle();
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  // (Checked again: the record and the model may have moved since BeginInit.)
  LOCALSGD_RETURN_IF_ERROR(models_.MayInstall(header, run, *plane_, options_.clock()));
  // A round on the model a checkpoint replaces cannot commit on it.
  if (header.from_checkpoint() && round_.has_value()) {
    Abort(absl::StrCat("the run's model was replaced by ", header.member_id(),
                       "'s checkpoint of round ", header.checkpoint_round()));
  }
  LOCALSGD_RETURN_IF_ERROR(models_.InstallUpload(*plane_, header, std::move(upload)));
  response->set_round(model().round());
  response->set_global_step(model().global_step());
  CommitPipeline::Commit initial;  // round 0: nothing to record or announce, only the save
  initial.run_id = model().run_id();
  pipeline_.Start(std::move(initial), model().snapshot(), /*model_first=*/true);
  return absl::OkStatus();
}

absl::Status RoundManager::Restore() {
  MutexLock lock(&mu_);
  LOCALSGD_ASSIGN_OR_RETURN(const bool restored, models_.Restore(*plane_));
  if (restored) standing_ = MemberStanding(model().spec());
  return absl::OkStatus();
}

absl::StatusOr<RoundManager::ModelSnapshot> RoundManager::FetchModel(const std::string& run_id) {
  std::string id;
  {
    MutexLock lock(&mu_);
    pipeline_.AwaitNoPending();
    v1::RunInfo run = plane_->Run();
    id = run_id.empty() ? run.run_id() : run_id;
    if (id.empty()) return absl::NotFoundError("run_id: no run has started");
    if (std::optional<ModelSnapshot> model = models_.Find(id)) return *std::move(model);
    // A sharded run's model from its record (after a restart).
    if (std::optional<v1::RunInfo> found = plane_->FindRun(id)) {
      if (std::optional<ModelSnapshot> model = ModelKeeper::FromRecord(*found)) return *model;
    }
    if (id == run.run_id()) {
      return absl::FailedPreconditionError(
          absl::StrCat("run ", id, " has no model yet (its first node leader uploads it)"));
    }
  }
  return models_.LoadKept(id);  // an earlier run's, off the lock: it reads the disk
}

std::vector<v1::ModelHolder> RoundManager::Holders(const std::string& run_id, int64_t round) {
  MutexLock lock(&mu_);
  return models_.Holders(run_id, round, plane_->LiveLeaders());
}

absl::StatusOr<int64_t> RoundManager::Join(const v1::SyncHeader& header,
                                           std::shared_ptr<RoundMember> member) {
  const FlushWhenDone flush(this);
  LOCALSGD_ASSIGN_OR_RETURN(const ControlPlane::Leader leader,
                            plane_->CheckLeader(header.member_id(), header.member_credential()));
  MutexLock lock(&mu_);
  sessions_.Supersede(header.member_id(), member);
  const absl::Status running = RunningRun(header.run_id()).status();  // a new run: a new standing
  standing_.Heard(header.member_id(), header.member_credential());
  absl::StatusOr<int64_t> session = running.ok() ? JoinLocked(header, leader, member) : running;
  RefusalContext at;
  at.run_id = model().run_id();
  at.initialised = model().initialised();
  at.committed_round = model().round();
  at.global_step = model().global_step();
  const v1::RunState state = plane_->Run().state();
  at.run_ended = state == v1::RUN_STATE_COMPLETED || state == v1::RUN_STATE_STOPPED ||
                 state == v1::RUN_STATE_FAILED;
  if (round_.has_value()) at.open_round.emplace(round_->info.number, round_->info.fragment);
  RefusalAnswer answer = AnswerRefusal(header, session.status(), at);
  if (answer.response.has_value()) {
    member->Enqueue(std::make_shared<v1::SyncResponse>(*std::move(answer.response)));
    sessions_.Touch(member);
  }
  if (answer.refuse) Refuse(header.member_id(), session.status(), answer.excused);
  Advance();
  return session;
}

absl::StatusOr<int64_t> RoundManager::JoinLocked(const v1::SyncHeader& claimed,
                                                 const ControlPlane::Leader& leader,
                                                 const std::shared_ptr<RoundMember>& member) {
  if (pipeline_.pending() && claimed.round() <= model().round()) {
    // Told now that it is stale, it would adopt a round the run record may not hold yet.
    return absl::UnavailableError(
        absl::StrCat("round: round ", model().round(), " is being committed; try again"));
  }
  SyncAdmission at;
  at.local_world_size = leader.local_world_size;
  at.ranks = leader.ranks;
  at.initialised = model().initialised();
  at.fragments = model().fragments();
  at.codec = model().spec().codec();
  at.committed_round = model().round();
  if (round_.has_value()) at.open_fragment = round_->info.fragment;
  standing_.Suspended(claimed.member_id(), options_.clock(), &at.suspended);
  if (model().spec().round_seconds() > 0) at.paced_max_steps = model().spec().local_sgd_steps();
  LOCALSGD_ASSIGN_OR_RETURN(const v1::SyncHeader header, AdmitSyncHeader(claimed, at));
  models_.AddHolder(leader);  // admitted: its round is the next, so it holds ours
  if (!round_.has_value()) {
    if (std::string why; !backoff_.MayOpen(options_.clock(), Membership(), &why)) {
      return RoundsBackOff(why);
    }
    StartRound(model().round() + 1, header.fragment());
  }
  absl::StatusOr<int64_t> session = round_->driver->Arrive(header, member);
  if (session.ok()) round_->Share(header, model().spec());
  return session;
}

void RoundManager::StartRound(int64_t number, int fragment) {
  RoundContext::Round info;
  info.number = number;
  info.fragment = fragment;
  info.layout = model().FragmentLayout(fragment);
  info.reducer = model().RoundReducer(fragment);
  info.first_chunk = model().first_chunk(fragment);
  info.opened = options_.clock();
  std::vector<ControlPlane::Leader> leaders;
  std::vector<std::pair<std::string, std::string>> suspended;
  for (ControlPlane::Leader& leader : plane_->LiveLeaders()) {
    if (std::string why; standing_.Suspended(leader.worker_id, info.opened, &why)) {
      suspended.emplace_back(leader.worker_id, std::move(why));
    } else {
      if (!standing_.HeardInRun(leader.worker_id)) info.starting.insert(leader.worker_id);
      leaders.push_back(std::move(leader));
    }
  }
  round_.emplace(std::move(info), std::move(suspended));
  round_->Drive(model().spec(), leaders, this);
  // Leaders refused for this round before it opened are out from the start.
  for (const auto& [member_id, reason] : standing_.TakeRefusals(number)) {
    round_->driver->Refuse(member_id, reason, false);
  }
}

void RoundManager::Refuse(const std::string& member_id, const absl::Status& status, bool excused) {
  // A suspended member is in no round, and what it sent then does not count against it later.
  if (standing_.Suspended(member_id, options_.clock())) return;
  const std::string reason = absl::StrCat("refused: ", status.message());
  if (round_.has_value()) {
    round_->driver->Refuse(member_id, reason, excused);
    round_->out_of_phase = round_->out_of_phase || excused;
  } else if (model().initialised()) {
    standing_.RefuseBefore(member_id, model().round() + 1, reason);
  }
}

absl::Status RoundManager::AddChunk(int64_t session_id, const v1::Chunk& chunk) {
  const FlushWhenDone flush(this);
  std::shared_ptr<RangeReducer> engine;
  std::shared_ptr<std::vector<float>> scratch;
  {
    MutexLock lock(&mu_);
    scratch = sessions_.Scratch(session_id);
    if (scratch == nullptr || !round_.has_value()) {
      return absl::FailedPreconditionError("not in a round (dropped, or the round ended)");
    }
    if (round_->star == nullptr) {
      const absl::Status wrong = absl::InvalidArgumentError(
          "chunk: in a sharded round deltas go to the range owners (DataPlane.Reduce), not to "
          "the coordinator");
      round_->driver->Leave(session_id, wrong);
      Advance();
      return wrong;
    }
    engine = round_->info.reducer;
  }
  // Checked and decoded outside the lock, so members' chunks are decoded in parallel.
  std::vector<float>& decoded = *scratch;
  absl::Status checked = engine->deltas().Check(chunk.index(), chunk.data(), &decoded);
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value() || round_->info.reducer != engine) {
      return absl::FailedPreconditionError("not in a round (dropped, or the round ended)");
    }
    status = round_->star->AddChunk(session_id, chunk, std::move(checked), decoded);
    Advance();
  }
  return status;
}

void RoundManager::Leave(int64_t session_id, const absl::Status& why) {
  const FlushWhenDone flush(this);
  MutexLock lock(&mu_);
  if (!sessions_.Contains(session_id) || !round_.has_value()) return;
  round_->driver->Leave(session_id, why);
  Advance();
}

void RoundManager::EndOfInput(int64_t session_id) {
  const FlushWhenDone flush(this);
  MutexLock lock(&mu_);
  if (!sessions_.Contains(session_id) || !round_.has_value()) return;
  round_->driver->EndOfInput(session_id);
  Advance();
}

absl::Status RoundManager::Deliver(int64_t session_id, const v1::Delivered& delivered) {
  return InShardedRound(session_id, "delivered",
                        [&](ShardedDriver& round) { return round.Deliver(session_id, delivered); });
}

absl::Status RoundManager::Unreachable(int64_t session_id,
                                       const v1::OwnerUnreachable& unreachable) {
  return InShardedRound(session_id, "unreachable", [&](ShardedDriver& round) {
    return round.Unreachable(session_id, unreachable);
  });
}

absl::Status RoundManager::InShardedRound(int64_t session_id, absl::string_view what,
                                          absl::FunctionRef<absl::Status(ShardedDriver&)> call) {
  const FlushWhenDone flush(this);
  MutexLock lock(&mu_);
  if (!sessions_.Contains(session_id) || !round_.has_value() || round_->sharded == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": not in a sharded round"));
  }
  absl::Status status = call(*round_->sharded);
  Advance();
  return status;
}

void RoundManager::Tick() {
  const FlushWhenDone flush(this);
  MutexLock lock(&mu_);
  for (const std::string& id : standing_.TakeReadmitted(options_.clock())) {
    plane_->RecordEvent(v1::EVENT_SEVERITY_INFO, "member_readmitted", Readmitted(id));
  }
  if (!round_.has_value() || pipeline_.stopping()) return;
  v1::RunInfo run = plane_->Run();
  if (run.run_id() != model().run_id() || run.state() != v1::RUN_STATE_RUNNING) {
    Abort(absl::StrCat("the run is no longer running (", EnumName(run.state()), ")"));
  } else {
    round_->driver->Tick(options_.clock(), plane_->LiveLeaders());
    Advance();
  }
}

absl::StatusOr<v1::RunInfo> RoundManager::StopRun(const v1::StopRunRequest& request) {
  const FlushWhenDone flush(this);
  {
    MutexLock lock(&mu_);
    pipeline_.BeginStop();  // no commit from here on
  }
  // Off the lock: the stop waits for the run record to be on disk.
  absl::StatusOr<v1::RunInfo> run = plane_->StopRun(request);
  MutexLock lock(&mu_);
  pipeline_.EndStop();
  if (run.ok() && round_.has_value()) {
    Abort("the run was stopped");
  } else {
    Advance();  // a round that was ready to commit
  }
  return run;
}

void RoundManager::Advance() {
  if (round_.has_value()) round_->driver->Advance();
}

void RoundManager::Commit(const std::vector<std::string>& included, int64_t step, DigestPair digest,
                          std::string log) {
  if (round_->info.reducer != nullptr) {
    model().CommitFragment(round_->info.fragment, *round_->info.reducer);
  }
  model().Committed(round_->info.number, step, round_->info.fragment, digest);
  CommitPipeline::Commit commit;
  commit.run_id = model().run_id();
  commit.round = round_->info.number;
  commit.global_step = step;
  commit.synced_step = model().synced_step();
  commit.model = model().Record();
  commit.included = included;
  commit.members = sessions_.TakeAll();
  commit.record = round_->Record(v1::ROUND_OUTCOME_COMMITTED, model().spec(), model().global_step(),
                                 options_.clock());
  commit.log = std::move(log);
  Judge(included);
  backoff_.Committed();
  round_.reset();
  // The run's final model is on disk before the run ends.
  const bool ends_run = CommitEndsRun(model().spec(), commit.synced_step);
  pipeline_.Start(std::move(commit), model().snapshot(), ends_run);
}

void RoundManager::Announced(const std::vector<std::string>& included) {
  models_.SetHolders(included, plane_->LiveLeaders());
}

void RoundManager::Abort(const std::string& reason) {
  round_->driver->OnAbort();
  sessions_.EndAll(RoundAborted(round_->info.number, reason));
  v1::RoundRecord record = round_->Record(v1::ROUND_OUTCOME_ABORTED, model().spec(),
                                          model().global_step(), options_.clock());
  record.set_reason(reason);
  plane_->RecordRound(std::move(record));  // which logs it, as an event
  Judge({});
  const bool out_of_phase = round_->out_of_phase;
  round_.reset();
  if (out_of_phase) return;  // no storm: the nodes are moving back into phase
  if (std::optional<std::string> why = backoff_.Aborted(options_.clock(), Membership(), reason)) {
    plane_->RecordEvent(v1::EVENT_SEVERITY_WARNING, "rounds_backing_off", *why);
  }
}

std::string RoundManager::Membership() const {
  std::string membership;
  for (const ControlPlane::Leader& leader : plane_->LiveLeaders()) {
    if (standing_.Suspended(leader.worker_id, options_.clock())) continue;
    absl::StrAppend(&membership, leader.worker_id, "/", leader.data_plane_key, "/", leader.ranks,
                    ";");
  }
  return membership;
}

void RoundManager::Judge(const std::vector<std::string>& committed) {
  for (const Suspensions::Verdict& verdict :
       standing_.RoundEnded(options_.clock(), committed, round_->driver->Faults())) {
    plane_->RecordEvent(v1::EVENT_SEVERITY_WARNING, "member_suspended", Describe(verdict));
  }
}

void RoundManager::FlushTouched() {
  std::vector<std::shared_ptr<RoundMember>> touched;
  {
    MutexLock lock(&mu_);
    touched = sessions_.TakeTouched();
  }
  TouchedStreams<RoundMember>::Flush(std::move(touched));
}

}  // namespace localsgd
