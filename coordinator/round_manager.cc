#include "coordinator/round_manager.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "coordinator/restore_plan.h"
#include "coordinator/round_refusal.h"
#include "coordinator/sync_admission.h"
#include "exchange/codec.h"

namespace localsgd {
namespace {

constexpr int64_t kMaxVectorLength = int64_t{1} << 32;

Suspensions SuspensionsFor(const v1::RunSpec& spec) {
  Suspensions::Options options;
  options.strikes = spec.suspend_after_failed_rounds();
  return Suspensions(options);
}

// A call in the name of node leader `member_id`, carrying `credential`: the leader's own
// (docs/design.md, "Security"). Returns the leader as it joined.
absl::StatusOr<ControlPlane::Leader> CheckMember(const ControlPlane& plane,
                                                 const std::string& member_id,
                                                 absl::string_view credential) {
  if (member_id.empty()) return absl::InvalidArgumentError("member_id: required");
  std::vector<ControlPlane::Leader> leaders = plane.LiveLeaders();
  auto leader = std::find_if(leaders.begin(), leaders.end(), [&](const ControlPlane::Leader& l) {
    return l.worker_id == member_id;
  });
  if (leader == leaders.end()) {
    return absl::NotFoundError(
        absl::StrCat("member_id: ", Quoted(member_id), " is not a live node leader (join first)"));
  }
  LOCALSGD_RETURN_IF_ERROR(plane.Authenticate(member_id, credential));
  return std::move(*leader);
}

}  // namespace

RoundManager::RoundManager(ControlPlane* plane, Options options)
    : plane_(plane), options_(std::move(options)), models_(options_.state) {
  std::random_device random;
  next_attempt_ = (uint64_t{random()} << 32) | random();
}

RoundManager::~RoundManager() {
  MutexLock lock(&mu_);
  AwaitNoSave();
}

void RoundManager::AwaitNoSave() {
  if (options_.state != nullptr) options_.state->FlushModel();
  mu_.Await(absl::Condition(
      +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !m->pending_.has_value() && m->saves_in_flight_ == 0;
      },
      this));
}

void RoundManager::AwaitNoPendingCommit() {
  mu_.Await(absl::Condition(
      +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !m->pending_.has_value(); },
      this));
}

void RoundManager::SaveBehind() {
  if (options_.state == nullptr) return;
  ++saves_in_flight_;
  options_.state->SaveModelLater(model().snapshot(), [this](const absl::Status& saved) {
    MutexLock lock(&mu_);
    if (!saved.ok()) {
      LogError(absl::StrCat("run ", model().run_id(),
                            ": the global model is not on disk: ", saved.ToString()));
    }
    --saves_in_flight_;
  });
}

void RoundManager::SaveModel() {
  if (options_.state == nullptr) {
    RecordCommit();
    return;
  }
  options_.state->SaveModel(model().snapshot(), [this](const absl::Status& saved) {
    Resume([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (!saved.ok()) {
        LogError(absl::StrCat("run ", pending_->run_id, ": the global model of round ",
                              pending_->round, " is not on disk: ", saved.ToString()));
      }
      RecordCommit();
    });
  });
}

void RoundManager::RecordCommit() {
  const PendingCommit& commit = *pending_;
  if (commit.round > 0) {
    if (absl::Status s = plane_->CommitRound(commit.run_id, commit.round, commit.global_step,
                                             commit.synced_step);
        !s.ok()) {
      LogError(
          absl::StrCat("round ", commit.round, ": the run refused the commit: ", s.ToString()));
    }
    if (options_.state != nullptr) {
      // The writer logs a failed write; the commit is announced either way.
      options_.state->SaveStateThen([this](const absl::Status&) {
        Resume([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { Announce(); });
      });
      return;
    }
  }
  Announce();
}

void RoundManager::Resume(absl::FunctionRef<void()> next) {
  std::vector<std::shared_ptr<RoundMember>> touched;
  {
    MutexLock lock(&mu_);
    next();
    Advance();  // a commit that waited for this one
    touched = sessions_.TakeTouched();
  }
  // Not through `this`: once pending_ is reset, the manager may be destroyed.
  TouchedStreams<RoundMember>::Flush(std::move(touched));
}

absl::StatusOr<v1::RunInfo> RoundManager::RunningRun(const std::string& run_id) {
  v1::RunInfo run = plane_->Run();
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
  if (model().run_id() != run.run_id()) {
    if (round_.has_value()) Abort("a new run started");
    models_.StartRun(run);  // the ended run's final model stays to be fetched
    refused_.clear();       // refusals, suspensions and streams belong to the run they were made in
    sessions_.ForgetLatest();
    suspensions_ = SuspensionsFor(run.spec());
    heard_in_run_.clear();
    heard_since_commit_.clear();
    credentials_.clear();
  }
  return run;
}

absl::StatusOr<ChunkLayout> RoundManager::BeginInit(const v1::InitModelHeader& header) {
  MutexLock lock(&mu_);
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  LOCALSGD_RETURN_IF_ERROR(
      CheckMember(*plane_, header.member_id(), header.member_credential()).status());
  if (header.vector_length() <= 0 || header.vector_length() > kMaxVectorLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("vector_length: must be in [1, 2^32], got ", header.vector_length()));
  }
  if (!header.from_checkpoint() && (header.has_momentum() || header.checkpoint_round() != 0 ||
                                    header.checkpoint_global_step() != 0)) {
    return absl::InvalidArgumentError(
        "has_momentum, checkpoint_round, checkpoint_global_step: for a checkpoint only "
        "(from_checkpoint)");
  }
  LOCALSGD_RETURN_IF_ERROR(MayInstall(header, run));
  return ChunkLayout::ForBytes(header.vector_length(), model().spec().chunk_bytes());
}

absl::Status RoundManager::MayInstall(const v1::InitModelHeader& header,
                                      const v1::RunInfo& run) const {
  if (header.from_checkpoint()) {
    LOCALSGD_RETURN_IF_ERROR(CheckCheckpointOffer(header, run));
    if (models_.TakesCheckpoint(header.checkpoint_global_step())) return absl::OkStatus();
  } else if (!model().initialised()) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError("the run's model is already set; fetch it instead");
}

absl::Status RoundManager::FinishInit(const v1::InitModelHeader& header, std::vector<float> values,
                                      std::optional<std::vector<float>> momentum,
                                      v1::InitModelResponse* response) {
  if (!AllFinite(values) || (momentum.has_value() && !AllFinite(*momentum))) {
    return absl::InvalidArgumentError("initial model: NaN or infinity");
  }
  if (momentum.has_value() != header.has_momentum()) {
    return absl::InvalidArgumentError("has_momentum: the momentum did not come as the header says");
  }
  MutexLock lock(&mu_);
  // After a model still being saved (of an earlier run), never before it.
  AwaitNoSave();
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  // (Checked again: the record and the model may have moved since BeginInit.)
  LOCALSGD_RETURN_IF_ERROR(MayInstall(header, run));
  if (header.from_checkpoint()) {
    // A round on the model it replaces cannot commit on this one.
    if (round_.has_value()) {
      Abort(absl::StrCat("the run's model was replaced by ", header.member_id(),
                         "'s checkpoint of round ", header.checkpoint_round()));
    }
    ModelCheckpoint checkpoint{header.run_id(), header.checkpoint_round(),
                               header.checkpoint_global_step(), std::move(values),
                               momentum.has_value() ? *std::move(momentum) : std::vector<float>()};
    LOCALSGD_RETURN_IF_ERROR(models_.Adopt(*plane_, std::move(checkpoint),
                                           absl::StrCat(header.member_id(), "'s checkpoint")));
  } else {
    LOCALSGD_RETURN_IF_ERROR(model().Install(std::move(values), std::nullopt));
    const ChunkLayout& layout = model().reducer()->layout();
    LogInfo(absl::StrCat("run ", model().run_id(), ": initial model (", layout.num_values,
                         " values, ", layout.num_chunks(), " chunks) from ", header.member_id()));
  }
  models_.SetHolders({header.member_id()});
  response->set_round(model().round());
  response->set_global_step(model().global_step());
  PendingCommit initial;  // round 0: nothing to record or announce, only the save
  initial.run_id = model().run_id();
  pending_ = std::move(initial);
  SaveModel();
  return absl::OkStatus();
}

absl::Status RoundManager::Restore() {
  MutexLock lock(&mu_);
  LOCALSGD_ASSIGN_OR_RETURN(const bool restored, models_.Restore(*plane_));
  if (restored) suspensions_ = SuspensionsFor(model().spec());
  return absl::OkStatus();
}

absl::StatusOr<RoundManager::ModelSnapshot> RoundManager::FetchModel(const std::string& run_id) {
  std::string id;
  {
    MutexLock lock(&mu_);
    AwaitNoPendingCommit();
    v1::RunInfo run = plane_->Run();
    id = run_id.empty() ? run.run_id() : run_id;
    if (id.empty()) return absl::NotFoundError("run_id: no run has started");
    if (std::optional<ModelSnapshot> model = models_.Find(id)) return *std::move(model);
    if (id == run.run_id()) {
      return absl::FailedPreconditionError(
          absl::StrCat("run ", id, " has no model yet (its first node leader uploads it)"));
    }
  }
  // An earlier run's, from the state folder (off the lock: it reads the disk).
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<ModelSnapshot> kept, models_.LoadKept(id));
  if (kept.has_value()) return *std::move(kept);
  return models_.NotKept(id);
}

std::vector<v1::ModelHolder> RoundManager::Holders(const std::string& run_id, int64_t round) {
  MutexLock lock(&mu_);
  return models_.Holders(run_id, round, plane_->LiveLeaders());
}

absl::StatusOr<int64_t> RoundManager::Join(const v1::SyncHeader& header,
                                           std::shared_ptr<RoundMember> member) {
  const FlushWhenDone flush(this);
  LOCALSGD_ASSIGN_OR_RETURN(const ControlPlane::Leader leader,
                            CheckMember(*plane_, header.member_id(), header.member_credential()));
  absl::StatusOr<int64_t> session;
  {
    MutexLock lock(&mu_);
    sessions_.Supersede(header.member_id(), member);
    if (auto [known, inserted] =
            credentials_.try_emplace(header.member_id(), header.member_credential());
        !inserted && known->second != header.member_credential()) {
      // Joined again (a restarted process): the failures and the silence were the old one's.
      known->second = header.member_credential();
      suspensions_.Forget(header.member_id());
      heard_in_run_.erase(header.member_id());
    }
    session = JoinLocked(header, leader, member);
    heard_in_run_.insert(header.member_id());
    heard_since_commit_.insert(header.member_id());
    // A live leader whose header is refused is left out of the round at once, so the others
    // need not wait for it until the deadline. (A duplicate header changes nothing.) Not a
    // stale one: it missed a commit, adopts the model and comes back for the next round at its
    // next boundary; leaving it out of that round would make it stale again, round after round.
    const bool stale = absl::IsFailedPrecondition(session.status()) && Stale(header);
    // The run this member trains is over, and its model is here to take.
    const v1::RunState state = plane_->Run().state();
    const bool ended = absl::IsFailedPrecondition(session.status()) &&
                       header.run_id() == model().run_id() && model().initialised() &&
                       (state == v1::RUN_STATE_COMPLETED || state == v1::RUN_STATE_STOPPED ||
                        state == v1::RUN_STATE_FAILED);
    if (stale || ended) {
      // A structured answer beside the status: the committed round to catch up with.
      auto response = std::make_shared<v1::SyncResponse>();
      response->mutable_stale()->set_committed_round(model().round());
      response->mutable_stale()->set_global_step(model().global_step());
      response->mutable_stale()->set_run_ended(ended);
      member->Enqueue(std::move(response));
      sessions_.Touch(member);
    }
    // A member a step apart brings another fragment than the round's (after aborted rounds,
    // nodes' steps drift apart): it sits the round out, told the round's fragment, and moves its
    // steps into the round's phase, so that its next rounds carry the others' fragments. That
    // is no fault of its: held against it, two nodes out of phase suspended each other.
    const bool other_fragment = absl::IsFailedPrecondition(session.status()) &&
                                round_.has_value() && header.run_id() == model().run_id() &&
                                header.round() == round_->info.number &&
                                header.fragment() != round_->info.fragment;
    if (other_fragment) {
      auto response = std::make_shared<v1::SyncResponse>();
      response->mutable_other_fragment()->set_round(round_->info.number);
      response->mutable_other_fragment()->set_fragment(round_->info.fragment);
      member->Enqueue(std::move(response));
      sessions_.Touch(member);
    }
    // Nor one whose round aborted (quorum lost, say) or that is to try again: that is no fault of
    // the member, and a refusal kept for the next attempt would drop it there and abort that one
    // too.
    if (!session.ok() && !absl::IsAlreadyExists(session.status()) &&
        !absl::IsAborted(session.status()) && !absl::IsUnavailable(session.status()) && !stale) {
      Refuse(header.member_id(), session.status(), other_fragment);
    }
    Advance();
  }
  return session;
}

absl::StatusOr<int64_t> RoundManager::JoinLocked(const v1::SyncHeader& claimed,
                                                 const ControlPlane::Leader& leader,
                                                 const std::shared_ptr<RoundMember>& member) {
  LOCALSGD_RETURN_IF_ERROR(RunningRun(claimed.run_id()).status());
  if (pending_.has_value() && claimed.round() <= model().round()) {
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
  suspensions_.Suspended(claimed.member_id(), options_.clock(), &at.suspended);
  LOCALSGD_ASSIGN_OR_RETURN(const v1::SyncHeader header, AdmitSyncHeader(claimed, at));
  models_.AddHolder(header.member_id());  // admitted: its round is the next, so it holds ours
  if (!round_.has_value()) OpenRound(model().round() + 1, header.fragment());
  return round_->driver->Arrive(header, member);
}

void RoundManager::OpenRound(int64_t number, int fragment) {
  Round round;
  round.info.number = number;
  round.info.fragment = fragment;
  round.info.reducer = model().RoundReducer(fragment);
  round.info.first_chunk = model().first_chunk(fragment);
  round.info.opened = options_.clock();
  std::vector<ControlPlane::Leader> leaders;
  for (ControlPlane::Leader& leader : plane_->LiveLeaders()) {
    if (std::string why; suspensions_.Suspended(leader.worker_id, round.info.opened, &why)) {
      round.suspended.emplace_back(leader.worker_id, std::move(why));
    } else {
      leaders.push_back(std::move(leader));
    }
  }
  for (const ControlPlane::Leader& leader : leaders) round.members.push_back(leader.worker_id);
  round_ = std::move(round);  // the driver reads it
  if (model().spec().exchange() == v1::EXCHANGE_SHARDED) {
    auto driver = std::make_unique<ShardedDriver>(&context_, leaders);
    round_->sharded = driver.get();
    round_->driver = std::move(driver);
  } else {
    auto driver = std::make_unique<StarDriver>(&context_, leaders);
    round_->star = driver.get();
    round_->driver = std::move(driver);
  }
  // Leaders refused for this round before it opened are out from the start.
  for (const auto& [member_id, refused] : refused_) {
    if (refused.first == number) round_->driver->Refuse(member_id, refused.second, false);
  }
  refused_.clear();
}

bool RoundManager::Stale(const v1::SyncHeader& header) const {
  return header.run_id() == model().run_id() && header.round() <= model().round();
}

void RoundManager::Refuse(const std::string& member_id, const absl::Status& status, bool excused) {
  // A suspended member is in no round, and what it sent then does not count against it later.
  if (suspensions_.Suspended(member_id, options_.clock())) return;
  const std::string reason = absl::StrCat("refused: ", status.message());
  if (round_.has_value()) {
    round_->driver->Refuse(member_id, reason, excused);
  } else if (model().initialised()) {
    refused_[member_id] = {model().round() + 1, reason};
  }
}

absl::Status RoundManager::AddChunk(int64_t session_id, const v1::Chunk& chunk) {
  const FlushWhenDone flush(this);
  absl::StatusOr<std::shared_ptr<RangeReducer>> engine;
  std::shared_ptr<std::vector<float>> scratch;
  {
    MutexLock lock(&mu_);
    scratch = sessions_.Scratch(session_id);
    if (scratch == nullptr || !round_.has_value()) {
      return absl::FailedPreconditionError("not in a round (dropped, or the round ended)");
    }
    if (round_->star == nullptr) {
      engine = absl::InvalidArgumentError(
          "chunk: in a sharded round deltas go to the range owners (DataPlane.Reduce), not to "
          "the coordinator");
      round_->driver->Leave(session_id, engine.status());
      Advance();
    } else {
      engine = round_->info.reducer;
    }
  }
  if (!engine.ok()) return engine.status();
  // Checked and decoded outside the lock, so members' chunks are decoded in parallel.
  std::vector<float>& decoded = *scratch;
  absl::Status checked = (*engine)->Check(chunk.index(), chunk.data(), &decoded);
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value() || round_->info.reducer != *engine) {
      return absl::FailedPreconditionError("not in a round (dropped, or the round ended)");
    }
    status = round_->star->AddChunk(session_id, chunk, std::move(checked), decoded);
    Advance();
  }
  return status;
}

void RoundManager::Leave(int64_t session_id, const absl::Status& why) {
  const FlushWhenDone flush(this);
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value()) return;
    round_->driver->Leave(session_id, why);
    Advance();
  }
}

void RoundManager::EndOfInput(int64_t session_id) {
  const FlushWhenDone flush(this);
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value()) return;
    round_->driver->EndOfInput(session_id);
    Advance();
  }
}

absl::Status RoundManager::AddMean(int64_t session_id, const v1::Chunk& chunk) {
  const FlushWhenDone flush(this);
  const int index = chunk.index();
  const int64_t bytes = static_cast<int64_t>(chunk.data().size());
  absl::StatusOr<ShardedDriver::MeanWork> work;
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value() || round_->sharded == nullptr) {
      return absl::FailedPreconditionError("mean: not in a sharded round");
    }
    // Claims the chunk (its owner, once) before it is decoded.
    work = round_->sharded->ClaimMean(session_id, index);
    if (!work.ok()) Advance();
  }
  if (!work.ok()) return work.status();
  // Outside the lock: decoded and stepped into the next model as the chunks arrive.
  absl::Status status = work->Apply(index, chunk);
  {
    MutexLock lock(&mu_);
    if (!round_.has_value() || round_->sharded == nullptr) {
      return absl::FailedPreconditionError("mean: the round ended");
    }
    status = round_->sharded->FinishMean(session_id, index, bytes, *work, std::move(status));
    Advance();
  }
  return status;
}

absl::Status RoundManager::Deliver(int64_t session_id, const v1::Delivered& delivered) {
  const FlushWhenDone flush(this);
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value() || round_->sharded == nullptr) {
      return absl::FailedPreconditionError("delivered: not in a sharded round");
    }
    status = round_->sharded->Deliver(session_id, delivered);
    Advance();
  }
  return status;
}

absl::Status RoundManager::Unreachable(int64_t session_id,
                                       const v1::OwnerUnreachable& unreachable) {
  const FlushWhenDone flush(this);
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (!sessions_.Contains(session_id) || !round_.has_value() || round_->sharded == nullptr) {
      return absl::FailedPreconditionError("unreachable: not in a sharded round");
    }
    status = round_->sharded->Unreachable(session_id, unreachable);
    Advance();
  }
  return status;
}

void RoundManager::Tick() {
  const FlushWhenDone flush(this);
  {
    MutexLock lock(&mu_);
    for (const std::string& id : suspensions_.TakeReadmitted(options_.clock())) {
      plane_->RecordEvent(v1::EVENT_SEVERITY_INFO, "member_readmitted",
                          absl::StrCat(id,
                                       " takes part in rounds again, on probation (its next "
                                       "failed round suspends it again)"));
    }
    if (!round_.has_value() || stopping_run_) return;
    v1::RunInfo run = plane_->Run();
    if (run.run_id() != model().run_id() || run.state() != v1::RUN_STATE_RUNNING) {
      Abort(absl::StrCat("the run is no longer running (", EnumName(run.state()), ")"));
    } else {
      round_->driver->Tick(options_.clock(), plane_->LiveLeaders());
      Advance();
    }
  }
}

absl::StatusOr<v1::RunInfo> RoundManager::StopRun(const v1::StopRunRequest& request) {
  const FlushWhenDone flush(this);
  {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !m->stopping_run_; }, this));
    stopping_run_ = true;  // no commit from here on
    AwaitNoSave();         // the last commit's model on disk before the stop is recorded
  }
  // Off the lock: the stop waits for the run record to be on disk.
  absl::StatusOr<v1::RunInfo> run = plane_->StopRun(request);
  {
    MutexLock lock(&mu_);
    stopping_run_ = false;
    if (run.ok() && round_.has_value()) {
      Abort("the run was stopped");
    } else {
      Advance();  // a round that was ready to commit
    }
  }
  return run;
}

void RoundManager::Advance() {
  if (round_.has_value()) round_->driver->Advance();
}

void RoundManager::Publish(const std::vector<std::string>& included, int64_t step,
                           DigestPair digest, std::string log) {
  model().CommitFragment(round_->info.fragment, *round_->info.reducer);
  model().Committed(round_->info.number, step, round_->info.fragment, digest);
  PendingCommit commit;
  commit.run_id = model().run_id();
  commit.round = round_->info.number;
  commit.global_step = step;
  commit.synced_step = model().synced_step();
  commit.included = included;
  commit.members = sessions_.TakeAll();
  commit.record = Record(v1::ROUND_OUTCOME_COMMITTED);
  commit.log =
      absl::StrCat(log, ", global step ", step, ", ", commit.record.duration_seconds(), " s, ",
                   commit.record.bytes_received(), " B in, ", commit.record.bytes_sent(), " B out");
  Judge(included);
  round_.reset();
  const bool ends_run = CommitEndsRun(model().spec(), commit.synced_step);
  pending_ = std::move(commit);
  if (ends_run) {
    SaveModel();  // the run's final model: on disk before the run ends
    return;
  }
  RecordCommit();
  SaveBehind();
}

void RoundManager::Announce() {
  PendingCommit commit = *std::move(pending_);
  pending_.reset();
  if (commit.round == 0) return;  // the initial model
  auto response = std::make_shared<v1::SyncResponse>();
  response->mutable_commit()->set_round(commit.round);
  response->mutable_commit()->set_global_step(commit.global_step);
  for (const std::string& id : commit.included) response->mutable_commit()->add_members(id);
  for (const std::shared_ptr<RoundMember>& member : commit.members) {
    member->Enqueue(response);
    member->Close(absl::OkStatus());
    sessions_.Touch(member);
  }
  models_.SetHolders(commit.included);
  LogInfo(commit.log);
  plane_->RecordRound(std::move(commit.record));
}

void RoundManager::Abort(const std::string& reason) {
  round_->driver->OnAbort();
  for (const std::shared_ptr<RoundMember>& member : sessions_.TakeAll()) {
    member->Close(RoundAborted(round_->info.number, reason));
    sessions_.Touch(member);
  }
  v1::RoundRecord record = Record(v1::ROUND_OUTCOME_ABORTED);
  record.set_reason(reason);
  plane_->RecordRound(std::move(record));  // which logs it, as an event
  Judge({});
  round_.reset();
}

void RoundManager::Judge(const std::vector<std::string>& committed) {
  std::vector<RoundFault> faults = round_->driver->Faults();
  // Silent only once it has synced in this run (its first round may find it still starting
  // up), and not when it sent a header since the last commit (a stale one, told so, comes back
  // at its next boundary).
  for (RoundFault& fault : faults) {
    fault.silent &=
        heard_in_run_.count(fault.member_id) > 0 && heard_since_commit_.count(fault.member_id) == 0;
  }
  if (!committed.empty()) heard_since_commit_.clear();
  for (const Suspensions::Verdict& verdict :
       suspensions_.RoundEnded(options_.clock(), committed, faults)) {
    plane_->RecordEvent(
        v1::EVENT_SEVERITY_WARNING, "member_suspended",
        absl::StrCat(verdict.member_id, " sits out rounds for ",
                     absl::FormatDuration(verdict.length), " after failing ", verdict.failed_rounds,
                     " round(s) in a row (last: ", verdict.reason, ")"));
  }
}

v1::RoundRecord RoundManager::Record(v1::RoundOutcome outcome) const {
  const Round& round = *round_;
  v1::RoundRecord record;
  record.set_round(round.info.number);
  record.set_outcome(outcome);
  record.set_exchange(model().spec().exchange());
  round.driver->Record(&record);
  record.set_bytes_received(round.bytes_received);
  record.set_bytes_sent(round.bytes_sent);
  record.set_duration_seconds(absl::ToDoubleSeconds(options_.clock() - round.info.opened));
  record.set_codec(model().spec().codec());
  const int64_t n = round.info.reducer->layout().num_values;
  record.set_fragment(round.info.fragment);
  record.set_values(n);
  record.set_compression_ratio(
      static_cast<double>(n * sizeof(float)) /
      static_cast<double>(std::max<size_t>(1, EncodedBytes(model().spec().codec(), n))));
  *record.mutable_start_time() = ToProtoTime(round.info.opened);
  record.set_global_step(model().global_step());
  for (const auto& [id, why] : round.suspended) {
    v1::DroppedMember* out = record.add_suspended();
    out->set_member_id(id);
    out->set_reason(why);
  }
  return record;
}

void RoundManager::FlushTouched() {
  std::vector<std::shared_ptr<RoundMember>> touched;
  {
    MutexLock lock(&mu_);
    touched = sessions_.TakeTouched();
  }
  TouchedStreams<RoundMember>::Flush(std::move(touched));
}

// --- The open round as its driver sees it ---

absl::Time RoundManager::Context::Now() const { return m_->options_.clock(); }

const std::string& RoundManager::Context::run_id() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->model().run_id();
}

const v1::RunSpec& RoundManager::Context::spec() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->model().spec();
}

int64_t RoundManager::Context::committed_round() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->model().round();
}

int64_t RoundManager::Context::committed_step() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->model().global_step();
}

const RoundContext::Round& RoundManager::Context::round() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->round_->info;
}

uint64_t RoundManager::Context::NextAttempt() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->next_attempt_++;
}

RoundSessions& RoundManager::Context::sessions() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->sessions_;
}

void RoundManager::Context::CountBytes(int64_t received,
                                       int64_t sent) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  m_->round_->bytes_received += received;
  m_->round_->bytes_sent += sent;
}

bool RoundManager::Context::MayCommit() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return m_->MayCommit();
}

void RoundManager::Context::Commit(const std::vector<std::string>& included, int64_t step,
                                   DigestPair digest,
                                   std::string log) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  m_->Publish(included, step, digest, std::move(log));
}

void RoundManager::Context::Abort(const std::string& reason) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  m_->Abort(reason);
}

}  // namespace localsgd
