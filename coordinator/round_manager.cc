#include "coordinator/round_manager.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/enum_name.h"
#include "common/log.h"
#include "common/proto_time.h"
#include "common/run_spec.h"
#include "common/status_macros.h"
#include "common/status_util.h"
#include "exchange/codec.h"

namespace localsgd {
namespace {

constexpr int64_t kMaxVectorLength = int64_t{1} << 32;

bool IsLeader(const std::vector<ControlPlane::Leader>& leaders, const std::string& id) {
  return std::any_of(leaders.begin(), leaders.end(),
                     [&](const ControlPlane::Leader& l) { return l.worker_id == id; });
}

absl::Status CheckMember(const ControlPlane& plane, const std::string& member_id) {
  if (member_id.empty()) return absl::InvalidArgumentError("member_id: required");
  if (!IsLeader(plane.LiveLeaders(), member_id)) {
    return absl::NotFoundError(
        absl::StrCat("member_id: ", Quoted(member_id), " is not a live node leader (join first)"));
  }
  return absl::OkStatus();
}

}  // namespace

RoundManager::RoundManager(ControlPlane* plane, Options options)
    : plane_(plane), options_(std::move(options)) {
  std::random_device random;
  next_attempt_ = (uint64_t{random()} << 32) | random();
}

RoundManager::~RoundManager() {
  MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !m->pending_.has_value(); },
      this));
}

void RoundManager::Save(PendingCommit commit) {
  pending_ = std::move(commit);
  if (options_.state == nullptr) {
    FinishCommit(*pending_);
    pending_.reset();
    return;
  }
  options_.state->SaveModel(model_.snapshot, [this](const absl::Status& saved) { OnSaved(saved); });
}

void RoundManager::OnSaved(const absl::Status& saved) {
  std::vector<std::shared_ptr<RoundMember>> touched;
  {
    MutexLock lock(&mu_);
    if (!saved.ok()) {
      LogError(absl::StrCat("run ", pending_->run_id, ": the global model of round ",
                            pending_->round, " is not on disk: ", saved.ToString()));
    }
    FinishCommit(*pending_);
    pending_.reset();
    Advance();  // a commit that waited for this one
    touched = touched_.Take();
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
  if (model_.run_id != run.run_id()) {
    if (round_.has_value()) Abort("a new run started");
    model_ = Model();
    model_.run_id = run.run_id();
    model_.spec = run.spec();
    model_.round = run.round();
    model_.global_step = run.global_step();
  }
  return run;
}

absl::StatusOr<ChunkLayout> RoundManager::BeginInit(const v1::InitModelHeader& header) {
  MutexLock lock(&mu_);
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  LOCALSGD_RETURN_IF_ERROR(CheckMember(*plane_, header.member_id()));
  if (header.vector_length() <= 0 || header.vector_length() > kMaxVectorLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("vector_length: must be in [1, 2^32], got ", header.vector_length()));
  }
  if (model_.engine != nullptr) {
    return absl::AlreadyExistsError("the initial model is already set; fetch it instead");
  }
  return ChunkLayout::ForBytes(header.vector_length(), model_.spec.chunk_bytes());
}

absl::Status RoundManager::FinishInit(const v1::InitModelHeader& header,
                                      std::vector<float> values) {
  if (!AllFinite(values)) return absl::InvalidArgumentError("initial model: NaN or infinity");
  MutexLock lock(&mu_);
  // After a model still being saved (of an earlier run), never before it.
  mu_.Await(absl::Condition(
      +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !m->pending_.has_value(); },
      this));
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  if (model_.engine != nullptr) {
    return absl::AlreadyExistsError("the initial model is already set; fetch it instead");
  }
  LOCALSGD_RETURN_IF_ERROR(InstallModel(std::move(values), std::nullopt));
  const ChunkLayout& layout = model_.engine->layout();
  LogInfo(absl::StrCat("run ", model_.run_id, ": initial model (", layout.num_values, " values, ",
                       layout.num_chunks(), " chunks) from ", header.member_id()));
  PendingCommit initial;  // round 0: nothing to record or announce, only the save
  initial.run_id = model_.run_id;
  Save(std::move(initial));
  return absl::OkStatus();
}

absl::Status RoundManager::InstallModel(std::vector<float> global,
                                        std::optional<std::vector<float>> momentum) {
  const ChunkLayout layout =
      ChunkLayout::ForBytes(static_cast<int64_t>(global.size()), model_.spec.chunk_bytes());
  RangeReducer::Options options;
  options.layout = layout;
  options.codec = model_.spec.codec();
  options.outer =
      OuterOptimizer{model_.spec.outer_optimizer().lr(), model_.spec.outer_optimizer().momentum(),
                     model_.spec.outer_optimizer().nesterov()};
  options.max_norm_ratio = model_.spec.max_delta_norm_ratio();
  auto engine = std::make_shared<RangeReducer>(options, std::move(global));
  if (momentum.has_value()) {
    LOCALSGD_RETURN_IF_ERROR(engine->RestoreMomentum(*std::move(momentum)));
  }
  model_.engine = std::move(engine);
  TakeSnapshot();
  return absl::OkStatus();
}

void RoundManager::TakeSnapshot() {
  auto snapshot = std::make_shared<ModelSnapshot>();
  snapshot->run_id = model_.run_id;
  snapshot->round = model_.round;
  snapshot->global_step = model_.global_step;
  snapshot->layout = model_.engine->layout();
  snapshot->values = model_.engine->global_buffer();
  snapshot->momentum = model_.engine->momentum_buffer();
  model_.snapshot = std::move(snapshot);
}

absl::Status RoundManager::Restore() {
  if (options_.state == nullptr) return absl::OkStatus();
  const std::string& path = options_.state->model_path();
  MutexLock lock(&mu_);
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<ModelCheckpoint> loaded, options_.state->LoadModel());
  if (!loaded.has_value()) return absl::OkStatus();
  ModelCheckpoint& saved = *loaded;
  const v1::RunInfo run = plane_->Run();
  if (saved.run_id != run.run_id()) {
    LogInfo(absl::StrCat("not restoring ", path, ": it holds run ", saved.run_id,
                         ", the latest run is ", run.run_id()));
    return absl::OkStatus();
  }
  auto disagree = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat(path, " holds round ", saved.round, " (global step ", saved.global_step,
                     ") of run ", saved.run_id, ", but the run record says round ", run.round(),
                     " (global step ", run.global_step(), "): ", why,
                     ". Move model.bin away to let the node leaders upload their model again"));
  };
  if (saved.round < run.round() || saved.round > run.round() + 1) {
    return disagree("they are more than one commit apart");
  }
  if (saved.round == run.round() + 1) {
    // The model was saved, then the coordinator stopped before the run record followed.
    if (absl::Status s = plane_->CommitRound(run.run_id(), saved.round, saved.global_step);
        !s.ok()) {
      return disagree(s.message());
    }
    LogInfo(absl::StrCat("run ", run.run_id(), ": round ", saved.round,
                         " was saved but not recorded; recorded it now"));
  }
  model_ = Model();
  model_.run_id = run.run_id();
  model_.spec = run.spec();
  model_.round = saved.round;
  model_.global_step = saved.global_step;
  const size_t values = saved.global.size();
  if (absl::Status s = InstallModel(std::move(saved.global), std::move(saved.momentum)); !s.ok()) {
    model_ = Model();
    return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  }
  plane_->RecordEvent(
      v1::EVENT_SEVERITY_INFO, "model_restored",
      absl::StrCat("run ", run.run_id(), ": restored the global model of round ", model_.round,
                   " (global step ", model_.global_step, ", ", values, " values) from ", path));
  return absl::OkStatus();
}

absl::StatusOr<RoundManager::ModelSnapshot> RoundManager::FetchModel(const std::string& run_id) {
  MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !m->pending_.has_value(); },
      this));
  v1::RunInfo run = plane_->Run();
  const std::string id = run_id.empty() ? run.run_id() : run_id;
  if (id.empty() || (id != model_.run_id && id != run.run_id())) {
    return absl::NotFoundError(absl::StrCat("run_id: no run ", Quoted(id)));
  }
  if (id != model_.run_id || model_.engine == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", id, " has no model yet (its first node leader uploads it)"));
  }
  return *model_.snapshot;
}

absl::StatusOr<int64_t> RoundManager::Join(const v1::SyncHeader& header,
                                           std::shared_ptr<RoundMember> member) {
  LOCALSGD_RETURN_IF_ERROR(CheckMember(*plane_, header.member_id()));
  absl::StatusOr<int64_t> session;
  {
    MutexLock lock(&mu_);
    session = JoinLocked(header, member);
    // A live leader whose header is refused is left out of the round at once, so the others
    // need not wait for it until the deadline. (A duplicate header changes nothing.) Not a
    // stale one: it missed a commit, adopts the model and comes back for the next round at its
    // next boundary; leaving it out of that round would make it stale again, round after round.
    const bool stale = absl::IsFailedPrecondition(session.status()) && Stale(header);
    // The run this member trains is over, and its model is here to take.
    const v1::RunState state = plane_->Run().state();
    const bool ended = absl::IsFailedPrecondition(session.status()) &&
                       header.run_id() == model_.run_id && model_.engine != nullptr &&
                       (state == v1::RUN_STATE_COMPLETED || state == v1::RUN_STATE_STOPPED ||
                        state == v1::RUN_STATE_FAILED);
    if (stale || ended) {
      // A structured answer beside the status: the committed round to catch up with.
      auto response = std::make_shared<v1::SyncResponse>();
      response->mutable_stale()->set_committed_round(model_.round);
      response->mutable_stale()->set_global_step(model_.global_step);
      response->mutable_stale()->set_run_ended(ended);
      member->Enqueue(std::move(response));
      Touch(member);
    }
    if (!session.ok() && !absl::IsAlreadyExists(session.status()) && !stale) {
      Refuse(header.member_id(), session.status());
    }
    Advance();
  }
  FlushTouched();
  return session;
}

absl::StatusOr<int64_t> RoundManager::JoinLocked(const v1::SyncHeader& header,
                                                 const std::shared_ptr<RoundMember>& member) {
  // The weight becomes a float: refused at the door when a float cannot hold it.
  if (!std::isfinite(header.weight()) || header.weight() <= 0 ||
      header.weight() > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("weight: must be > 0 and at most ",
                                                   std::numeric_limits<float>::max(), ", got ",
                                                   header.weight()));
  }
  if (header.num_workers() < 1 || header.num_workers() > kMaxRanksPerNode) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers: must be in [1, ", kMaxRanksPerNode,
                                                   "], got ", header.num_workers()));
  }
  if (header.step() < 0) return absl::InvalidArgumentError("step: must be >= 0");
  if (!v1::Codec_IsValid(header.codec())) {
    return absl::InvalidArgumentError(absl::StrCat("codec: unknown codec ", header.codec()));
  }
  LOCALSGD_ASSIGN_OR_RETURN(v1::RunInfo run, RunningRun(header.run_id()));
  if (model_.engine == nullptr) {
    return absl::FailedPreconditionError("the run's model is not initialised (InitModel first)");
  }
  const ChunkLayout& layout = model_.engine->layout();
  if (header.vector_length() != layout.num_values) {
    return absl::InvalidArgumentError(absl::StrCat("vector_length: ", header.vector_length(),
                                                   ", the run's model has ", layout.num_values));
  }
  if (header.codec() != model_.spec.codec()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "codec: ", CodecName(header.codec()), ", the run uses ", CodecName(model_.spec.codec())));
  }
  const int64_t next = model_.round + 1;
  if (Stale(header)) {
    return absl::FailedPreconditionError(absl::StrCat("round: ", header.round(),
                                                      " is stale; round ", model_.round,
                                                      " is committed (fetch the model and go on)"));
  }
  if (header.round() > next) {
    return absl::FailedPreconditionError(
        absl::StrCat("round: ", header.round(), " is in the future; the next round is ", next));
  }
  if (!round_.has_value()) OpenRound(next);
  Round& round = *round_;
  if (round.sharded.has_value()) {
    if (absl::Status s = round.sharded->Arrive(header.member_id(), header.weight(), header.step(),
                                               options_.clock());
        !s.ok()) {
      return s;
    }
    const int64_t session_id = next_session_++;
    sessions_[session_id] = Session{-1, header.member_id(), member, header.step(), 0};
    return session_id;  // the RoundHeader goes out with the layout (AdvanceSharded)
  }
  LOCALSGD_ASSIGN_OR_RETURN(
      const int slot, round.star->Arrive(header.member_id(), header.step(), header.num_workers()));
  if (absl::Status s = model_.engine->SetWeight(slot, header.weight()); !s.ok()) {
    DropSlot(slot, std::string(s.message()), s);
    return s;
  }
  const int64_t session_id = next_session_++;
  round.session_of_slot[slot] = session_id;
  sessions_[session_id] = Session{slot, header.member_id(), member, header.step(), 0};

  auto response = std::make_shared<v1::SyncResponse>();
  v1::RoundHeader* round_header = response->mutable_header();
  round_header->set_round(round.number);
  for (const std::string& id : round.members) round_header->add_members(id);
  round_header->set_codec(model_.spec.codec());
  round_header->set_num_chunks(layout.num_chunks());
  round_header->set_chunk_values(layout.chunk_values);
  member->Enqueue(std::move(response));
  Touch(member);
  return session_id;
}

void RoundManager::OpenRound(int64_t number) {
  Round round;
  round.number = number;
  round.opened = options_.clock();
  const std::vector<ControlPlane::Leader> leaders = plane_->LiveLeaders();
  for (const ControlPlane::Leader& leader : leaders) round.members.push_back(leader.worker_id);
  if (model_.spec.exchange() == v1::EXCHANGE_SHARDED) {
    ShardedRound::Options options;
    options.number = number;
    options.layout = model_.engine->layout();
    options.opened = round.opened;
    options.deadline = absl::Seconds(model_.spec.round_deadline_seconds());
    options.min_workers = model_.spec.min_workers();
    options.min_shard_values = model_.spec.min_shard_bytes() / static_cast<int64_t>(sizeof(float));
    options.lossless = model_.spec.codec() == v1::CODEC_FP32;
    std::vector<ShardedRound::Candidate> candidates;
    for (const ControlPlane::Leader& leader : leaders) {
      candidates.push_back({leader.worker_id, leader.local_world_size, leader.data_address});
    }
    round.sharded.emplace(options, std::move(candidates));
    round.attempt = next_attempt_++;
    round.next = std::make_shared<NextModel>();
    round.next->global = model_.engine->SpareBuffer(static_cast<size_t>(options.layout.num_values));
    round.next->momentum = model_.engine->SpareBuffer(model_.engine->momentum().size());
  } else {
    StarRound::Options options;
    options.number = number;
    options.opened = round.opened;
    options.deadline = absl::Seconds(model_.spec.round_deadline_seconds());
    options.min_workers = model_.spec.min_workers();
    std::vector<StarRound::Candidate> candidates;
    for (const ControlPlane::Leader& leader : leaders) {
      candidates.push_back({leader.worker_id, leader.local_world_size});
    }
    round.star.emplace(options, std::move(candidates));
    round.session_of_slot.assign(round.members.size(), -1);
    model_.engine->BeginRound(static_cast<int>(round.members.size()));
  }
  round_ = std::move(round);
  // Leaders refused for this round before it opened are out from the start.
  for (auto it = refused_.begin(); it != refused_.end();) {
    auto slot = std::find(round_->members.begin(), round_->members.end(), it->first);
    if (it->second.first == number && slot != round_->members.end()) {
      if (round_->sharded.has_value()) {
        round_->sharded->Leave(it->first, it->second.second, round_->opened);
      } else {
        DropSlot(static_cast<int>(slot - round_->members.begin()), it->second.second,
                 absl::OkStatus());
      }
    }
    it = refused_.erase(it);
  }
}

bool RoundManager::Stale(const v1::SyncHeader& header) const {
  return header.run_id() == model_.run_id && header.round() <= model_.round;
}

void RoundManager::Refuse(const std::string& member_id, const absl::Status& status) {
  const std::string reason = absl::StrCat("refused: ", status.message());
  if (sharded()) {
    round_->sharded->Leave(member_id, reason, options_.clock());
  } else if (round_.has_value()) {
    const int slot = round_->star->SlotOf(member_id);
    if (slot >= 0 && !round_->star->arrived(slot)) DropSlot(slot, reason, absl::OkStatus());
  } else if (model_.engine != nullptr) {
    refused_[member_id] = {model_.round + 1, reason};
  }
}

absl::Status RoundManager::AddChunk(int64_t session_id, const v1::Chunk& chunk) {
  std::shared_ptr<RangeReducer> engine;
  {
    MutexLock lock(&mu_);
    if (!sessions_.count(session_id) || !round_.has_value()) {
      return absl::FailedPreconditionError("not in a round (dropped, or the round ended)");
    }
    if (!sharded()) engine = model_.engine;
  }
  if (engine == nullptr) {
    absl::Status status = absl::InvalidArgumentError(
        "chunk: in a sharded round deltas go to the range owners (DataPlane.Reduce), not to "
        "the coordinator");
    Leave(session_id, status);
    return status;
  }
  // Checked and decoded outside the lock, so members' chunks are decoded in parallel.
  std::vector<float> decoded;
  absl::Status status = engine->Check(chunk.index(), chunk.data(), &decoded);
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || model_.engine != engine) {
      return absl::FailedPreconditionError("not in a round (dropped, or the round ended)");
    }
    Session& session = it->second;
    if (status.ok()) status = engine->Add(session.slot, chunk.index(), chunk.data(), decoded);
    if (!status.ok()) {
      DropSlot(session.slot, std::string(status.message()), status);
    } else {
      round_->bytes_received += static_cast<int64_t>(chunk.data().size());
      if (++session.chunks_received == engine->layout().num_chunks()) {
        round_->star->Delivered(session.slot, options_.clock());
      }
    }
    Advance();
  }
  FlushTouched();
  return status;
}

void RoundManager::Leave(int64_t session_id, const absl::Status& why) {
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || !round_.has_value()) return;
    if (sharded()) {
      DropSession(session_id, why);
    } else {
      DropSlot(it->second.slot, absl::StrCat("stream ended: ", why.message()), why);
      Advance();
    }
  }
  FlushTouched();
}

void RoundManager::EndOfInput(int64_t session_id) {
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || !round_.has_value()) return;
    if (sharded()) {
      if (!it->second.delivered) {
        DropSession(session_id, absl::InvalidArgumentError(
                                    "closed its stream before it held the whole update"));
      }
    } else if (it->second.chunks_received != model_.engine->layout().num_chunks()) {
      DropSlot(it->second.slot, "closed its stream before sending every chunk",
               absl::InvalidArgumentError("stream closed before every chunk was sent"));
      Advance();
    }
  }
  FlushTouched();
}

void RoundManager::Tick() {
  {
    MutexLock lock(&mu_);
    if (!round_.has_value() || stopping_run_) return;
    v1::RunInfo run = plane_->Run();
    if (run.run_id() != model_.run_id || run.state() != v1::RUN_STATE_RUNNING) {
      Abort(absl::StrCat("the run is no longer running (", EnumName(run.state()), ")"));
    } else if (sharded()) {
      std::vector<ControlPlane::Leader> leaders = plane_->LiveLeaders();
      const absl::Time now = options_.clock();
      for (const std::string& id : round_->members) {
        if (!IsLeader(leaders, id)) round_->sharded->Leave(id, "lease expired or left", now);
      }
      round_->sharded->Tick(now);
      AdvanceSharded();
    } else {
      std::vector<std::string> live;
      for (const ControlPlane::Leader& leader : plane_->LiveLeaders()) {
        live.push_back(leader.worker_id);
      }
      round_->star->Tick(options_.clock(), live);
      Advance();
    }
  }
  FlushTouched();
}

absl::StatusOr<v1::RunInfo> RoundManager::StopRun(const v1::StopRunRequest& request) {
  {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](RoundManager* m) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return !m->pending_.has_value() && !m->stopping_run_;
        },
        this));
    stopping_run_ = true;
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
  FlushTouched();
  return run;
}

void RoundManager::DropSlot(int slot, const std::string& reason, const absl::Status& status) {
  round_->star->Leave(slot, reason, status);
  ApplyDrops();
}

void RoundManager::ApplyDrops() {
  Round& round = *round_;
  for (const StarRound::Drop& drop : round.star->TakeDrops()) {
    model_.engine->Drop(drop.slot);
    auto it = sessions_.find(round.session_of_slot[drop.slot]);
    if (it == sessions_.end()) continue;
    it->second.member->Close(drop.status);
    Touch(it->second.member);
    sessions_.erase(it);
  }
}

void RoundManager::Advance() {
  if (!round_.has_value()) return;
  if (sharded()) {
    AdvanceSharded();
    return;
  }
  Round& round = *round_;
  StarRound& decided = *round.star;
  ApplyDrops();
  if (decided.phase() == StarRound::Phase::kOpen) {
    absl::StatusOr<std::vector<int>> completed = model_.engine->TakeCompleted();
    if (!completed.ok()) {
      decided.Fail(std::string(completed.status().message()));
    } else {
      for (const RangeReducer::Exclusion& exclusion : model_.engine->TakeExclusions()) {
        decided.Exclude(exclusion.slot,
                        absl::StrFormat("delta norm %.6g is more than max_delta_norm_ratio %g "
                                        "times the median of the others' (%.6g)",
                                        exclusion.norm, model_.spec.max_delta_norm_ratio(),
                                        exclusion.others_median));
      }
      for (int chunk : *completed) {
        auto response = std::make_shared<v1::SyncResponse>();
        response->mutable_update()->set_index(chunk);
        *response->mutable_update()->mutable_data() = model_.engine->TakeEncodedUpdate(chunk);
        const int64_t bytes = static_cast<int64_t>(response->update().data().size());
        for (int64_t session : round.session_of_slot) {
          auto it = sessions_.find(session);
          if (it == sessions_.end()) continue;
          it->second.member->Enqueue(response);
          Touch(it->second.member);
          round.bytes_sent += bytes;
        }
      }
      if (model_.engine->AllComplete()) decided.Averaged();
    }
  }
  if (decided.phase() == StarRound::Phase::kAborted) {
    Abort(decided.abort_reason());
  } else if (decided.phase() == StarRound::Phase::kCommitted && !pending_.has_value() &&
             !stopping_run_) {
    Commit();
  }
}

void RoundManager::Commit() {
  Round& round = *round_;
  model_.engine->Commit();
  const std::vector<std::string> included = round.star->Included();
  Publish(included, round.star->MaxStep(model_.global_step),
          absl::StrCat("round ", round.number, " committed: ", included.size(), " of ",
                       round.members.size(), " members (", absl::StrJoin(included, ", "), ")"));
}

void RoundManager::Publish(const std::vector<std::string>& included, int64_t step,
                           std::string log) {
  Round& round = *round_;
  model_.round = round.number;
  model_.global_step = step;
  TakeSnapshot();
  PendingCommit commit;
  commit.run_id = model_.run_id;
  commit.round = round.number;
  commit.global_step = step;
  commit.included = included;
  for (auto& [id, session] : sessions_) commit.members.push_back(session.member);
  sessions_.clear();
  commit.record = Record(v1::ROUND_OUTCOME_COMMITTED);
  commit.log =
      absl::StrCat(log, ", global step ", step, ", ", commit.record.duration_seconds(), " s, ",
                   commit.record.bytes_received(), " B in, ", commit.record.bytes_sent(), " B out");
  EndRound();
  Save(std::move(commit));
}

void RoundManager::FinishCommit(PendingCommit& commit) {
  if (commit.round == 0) return;  // the initial model
  // The model is on disk (or there is no disk): the run record follows, then the members hear
  // of the commit. A crash between the two saves is finished by Restore.
  if (absl::Status s = plane_->CommitRound(commit.run_id, commit.round, commit.global_step);
      !s.ok()) {
    LogError(absl::StrCat("round ", commit.round, ": the run refused the commit: ", s.ToString()));
  }
  auto response = std::make_shared<v1::SyncResponse>();
  response->mutable_commit()->set_round(commit.round);
  response->mutable_commit()->set_global_step(commit.global_step);
  for (const std::string& id : commit.included) response->mutable_commit()->add_members(id);
  for (const std::shared_ptr<RoundMember>& member : commit.members) {
    member->Enqueue(response);
    member->Close(absl::OkStatus());
    Touch(member);
  }
  LogInfo(commit.log);
  plane_->RecordRound(std::move(commit.record));
}

void RoundManager::EndRound() { round_.reset(); }

void RoundManager::Abort(const std::string& reason) {
  Round& round = *round_;
  if (!round.sharded.has_value()) model_.engine->Abort();
  for (auto& [id, session] : sessions_) {
    session.member->Close(absl::AbortedError(
        absl::StrCat("round ", round.number, " aborted: ", reason,
                     "; keep your local weights and sync at the next boundary")));
    Touch(session.member);
  }
  sessions_.clear();
  v1::RoundRecord record = Record(v1::ROUND_OUTCOME_ABORTED);
  record.set_reason(reason);
  plane_->RecordRound(std::move(record));  // which logs it, as an event
  EndRound();
}

v1::RoundRecord RoundManager::Record(v1::RoundOutcome outcome) const {
  const Round& round = *round_;
  v1::RoundRecord record;
  record.set_round(round.number);
  record.set_outcome(outcome);
  record.set_exchange(model_.spec.exchange());
  if (round.sharded.has_value()) {
    const ShardedRound& decided = *round.sharded;
    for (const std::string& id : decided.Included()) record.add_members(id);
    record.set_ring(decided.ring());
    const int64_t members = static_cast<int64_t>(decided.members().size());
    const ChunkLayout& layout = model_.engine->layout();
    for (size_t s = 0; s < decided.shards().size(); ++s) {
      const ShardedRound::Shard& shard = decided.shards()[s];
      v1::ShardRecord* out = record.add_shards();
      out->set_owner_id(shard.owner_id);
      out->set_address(shard.address);
      out->set_begin(layout.begin(shard.begin_chunk));
      out->set_end(layout.begin(shard.end_chunk - 1) + layout.size(shard.end_chunk - 1));
      const int64_t mean_bytes = s < round.mean_bytes.size() ? round.mean_bytes[s] : 0;
      out->set_mean_bytes(mean_bytes);
      const int64_t range = out->end() - out->begin();
      // A ring's owner gets one fp32 running sum of its range and sends its mean only to the
      // coordinator; otherwise it gets every member's delta and sends its mean to every
      // member but the one relayed through the coordinator, and to the coordinator.
      const bool relayed = shard.relayed_slot >= 0;
      out->set_bytes_received(decided.ring() ? range * static_cast<int64_t>(sizeof(float))
                                             : members * static_cast<int64_t>(EncodedBytes(
                                                             model_.spec.codec(), range)));
      out->set_bytes_sent(decided.ring() ? mean_bytes : (members + (relayed ? 0 : 1)) * mean_bytes);
      if (relayed) out->set_relayed_to(decided.members()[shard.relayed_slot]);
    }
    for (const auto& [id, reason] : decided.dropped()) {
      v1::DroppedMember* dropped = record.add_dropped();
      dropped->set_member_id(id);
      dropped->set_reason(reason);
    }
    if (decided.SlowestWait() > absl::ZeroDuration()) {
      record.set_slowest_wait_seconds(absl::ToDoubleSeconds(decided.SlowestWait()));
    }
  }
  if (round.star.has_value()) {
    const StarRound& decided = *round.star;
    for (const std::string& id : decided.Present()) record.add_members(id);
    for (const auto& [id, reason] : decided.dropped()) {
      v1::DroppedMember* dropped = record.add_dropped();
      dropped->set_member_id(id);
      dropped->set_reason(reason);
    }
    for (const auto& [id, reason] : decided.excluded()) {
      v1::DroppedMember* excluded = record.add_excluded();
      excluded->set_member_id(id);
      excluded->set_reason(reason);
    }
    if (decided.SlowestWait() > absl::ZeroDuration()) {
      record.set_slowest_wait_seconds(absl::ToDoubleSeconds(decided.SlowestWait()));
    }
  }
  record.set_bytes_received(round.bytes_received);
  record.set_bytes_sent(round.bytes_sent);
  record.set_duration_seconds(absl::ToDoubleSeconds(options_.clock() - round.opened));
  record.set_codec(model_.spec.codec());
  const int64_t n = model_.engine->layout().num_values;
  record.set_compression_ratio(
      static_cast<double>(n * sizeof(float)) /
      static_cast<double>(std::max<size_t>(1, EncodedBytes(model_.spec.codec(), n))));
  *record.mutable_start_time() = ToProtoTime(round.opened);
  record.set_global_step(model_.global_step);
  return record;
}

std::map<int64_t, RoundManager::Session>::iterator RoundManager::SessionOf(
    const std::string& member_id) {
  return std::find_if(sessions_.begin(), sessions_.end(),
                      [&](const auto& entry) { return entry.second.member_id == member_id; });
}

void RoundManager::DropSession(int64_t session_id, const absl::Status& status) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  const std::string member_id = it->second.member_id;
  it->second.member->Close(status);
  Touch(it->second.member);
  sessions_.erase(it);
  round_->sharded->Leave(member_id, absl::StrCat("stream ended: ", status.message()),
                         options_.clock());
  AdvanceSharded();
}

void RoundManager::AdvanceSharded() {
  Round& round = *round_;
  ShardedRound& decided = *round.sharded;
  // Drops before the layout need no notice: the layout leaves them out.
  const bool notify = round.laid_out;
  for (const auto& [id, reason] : decided.TakeDrops()) {
    auto it = SessionOf(id);
    if (it != sessions_.end()) {
      it->second.member->Close(absl::AbortedError(
          absl::StrCat("dropped from round ", round.number, ": ", reason,
                       "; keep your local weights and fetch the model after the round commits")));
      Touch(it->second.member);
      sessions_.erase(it);
    }
    if (!notify) continue;
    // Owners stop waiting for its delta.
    auto notice = std::make_shared<v1::SyncResponse>();
    notice->mutable_dropped()->set_member_id(id);
    notice->mutable_dropped()->set_reason(reason);
    for (auto& [session_id, session] : sessions_) {
      session.member->Enqueue(notice);
      Touch(session.member);
    }
  }
  if (decided.TakeLaidOut()) {
    const ChunkLayout& layout = model_.engine->layout();
    auto response = std::make_shared<v1::SyncResponse>();
    v1::RoundHeader* header = response->mutable_header();
    header->set_round(round.number);
    for (const std::string& id : decided.members()) header->add_members(id);
    for (double weight : decided.weights()) header->add_weights(weight);
    header->set_codec(model_.spec.codec());
    header->set_num_chunks(layout.num_chunks());
    header->set_chunk_values(layout.chunk_values);
    header->set_exchange(v1::EXCHANGE_SHARDED);
    header->set_attempt(round.attempt);
    header->set_ring(decided.ring());
    round.relay_session.assign(decided.shards().size(), -1);
    for (size_t s = 0; s < decided.shards().size(); ++s) {
      const ShardedRound::Shard& shard = decided.shards()[s];
      v1::ShardRange* range = header->add_shards();
      range->set_owner_id(shard.owner_id);
      range->set_address(shard.address);
      range->set_begin_chunk(shard.begin_chunk);
      range->set_end_chunk(shard.end_chunk);
      if (shard.relayed_slot >= 0) {
        const std::string& relayed = decided.members()[shard.relayed_slot];
        range->set_relayed_to(relayed);
        for (const auto& [session_id, session] : sessions_) {
          if (session.member_id == relayed) round.relay_session[s] = session_id;
        }
      }
    }
    round.mean_bytes.assign(decided.shards().size(), 0);
    round.laid_out = true;
    for (auto& [session_id, session] : sessions_) {
      session.member->Enqueue(response);
      Touch(session.member);
    }
  }
  if (decided.phase() == ShardedRound::Phase::kAborted) {
    Abort(decided.abort_reason());
  } else if (decided.phase() == ShardedRound::Phase::kCommitted && !pending_.has_value() &&
             !stopping_run_ && round.means_done == model_.engine->layout().num_chunks()) {
    CommitSharded();
  }
}

void RoundManager::CommitSharded() {
  Round& round = *round_;
  // Every member applies the same decoded mean through the same outer step; so did this copy,
  // chunk by chunk, into round.next.
  model_.engine->InstallNext(std::move(round.next->global), std::move(round.next->momentum));
  const std::vector<std::string> included = round.sharded->Included();
  Publish(included, std::max(model_.global_step, round.sharded->MaxStep()),
          absl::StrCat("round ", round.number, " committed: ", included.size(), " of ",
                       round.members.size(), " members (", absl::StrJoin(included, ", "),
                       "), sharded over ", round.sharded->shards().size(),
                       round.sharded->shards().size() == 1 ? " owner" : " owners"));
}

absl::Status RoundManager::AddMean(int64_t session_id, v1::Chunk* chunk) {
  const int index = chunk->index();
  const int64_t bytes = static_cast<int64_t>(chunk->data().size());
  std::shared_ptr<NextModel> next;
  std::shared_ptr<RangeReducer> engine;
  v1::Codec codec = v1::CODEC_FP32;
  OuterOptimizer outer;
  absl::Status status;
  std::string owner_id;
  int shard = -1;  // whose range holds the chunk
  int64_t relay_session = -1;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || !sharded()) {
      return absl::FailedPreconditionError("mean: not in a sharded round");
    }
    owner_id = it->second.member_id;
    // Claims the chunk (its owner, once) before it is decoded.
    status = round_->sharded->AddMean(it->second.member_id, index);
    if (!status.ok()) {
      DropSession(session_id, status);
    } else {
      // Accepted, so in the owner's range.
      shard = round_->sharded->ShardOf(index);
      if (shard >= 0 && static_cast<size_t>(shard) < round_->relay_session.size()) {
        relay_session = round_->relay_session[shard];
      }
      next = round_->next;
      engine = model_.engine;
      codec = model_.spec.codec();
      const v1::OuterOptimizerSpec& spec = model_.spec.outer_optimizer();
      outer = OuterOptimizer{spec.lr(), spec.momentum(), spec.nesterov()};
    }
  }
  if (status.ok()) {
    // Outside the lock: the chunk's range of `next` is this call's alone (claimed above), and
    // the engine's model does not change before the round commits, which waits for this chunk.
    // The outer step runs here, as the chunks arrive, rather than all at once at the commit.
    const ChunkLayout& layout = engine->layout();
    const size_t begin = static_cast<size_t>(layout.begin(index));
    const size_t size = static_cast<size_t>(layout.size(index));
    absl::Span<float> region = absl::MakeSpan(*next->global).subspan(begin, size);
    absl::Span<const float> momentum = engine->momentum();
    status = Decode(codec, chunk->data(), region);
    if (!status.ok()) {
      status = absl::InvalidArgumentError(absl::StrCat("mean ", index, ": ", status.message()));
    } else if (!OuterStepInto(outer, region, engine->global().subspan(begin, size),
                              momentum.empty() ? momentum : momentum.subspan(begin, size),
                              next->momentum->empty()
                                  ? absl::Span<float>()
                                  : absl::MakeSpan(*next->momentum).subspan(begin, size))) {
      status = absl::OutOfRangeError(absl::StrCat("the update of chunk ", index,
                                                  " overflows fp32 (the deltas are too large)"));
    }
    // The member this range is relayed to gets the owner's bytes as they are (moved, not
    // copied).
    std::shared_ptr<v1::SyncResponse> relayed;
    if (status.ok() && relay_session != -1) {
      relayed = std::make_shared<v1::SyncResponse>();
      relayed->mutable_update()->Swap(chunk);
    }
    MutexLock lock(&mu_);
    if (!sharded() || round_->next != next) {
      return absl::FailedPreconditionError("mean: the round ended");
    }
    Round& round = *round_;
    if (absl::IsOutOfRange(status)) {
      Abort(std::string(status.message()));
    } else if (!status.ok()) {
      DropSession(session_id, status);  // the owner leaves ...
      if (sharded() && round_->next == next) {
        // ... and the chunk it claimed can never come: the round aborts at once (the owner's
        // range counted as averaged, so its leaving alone would not abort it).
        round_->sharded->RefuseMean(owner_id, index, std::string(status.message()));
        AdvanceSharded();
      }
    } else {
      ++round.means_done;
      round.bytes_received += bytes;
      if (shard >= 0 && static_cast<size_t>(shard) < round.mean_bytes.size()) {
        round.mean_bytes[shard] += bytes;  // the same round: `next` is unchanged
      }
      if (auto target = sessions_.find(relay_session); relayed && target != sessions_.end()) {
        target->second.member->Enqueue(std::move(relayed));
        Touch(target->second.member);
        round.bytes_sent += bytes;
      }
      AdvanceSharded();
    }
  }
  FlushTouched();
  return status;
}

absl::Status RoundManager::Unreachable(int64_t session_id,
                                       const v1::OwnerUnreachable& unreachable) {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || !sharded()) {
      return absl::FailedPreconditionError("unreachable: not in a sharded round");
    }
    status = round_->sharded->Unreachable(it->second.member_id, unreachable.owner_id(),
                                          unreachable.reason());
    if (status.ok()) {
      AdvanceSharded();
    } else {
      DropSession(session_id, status);
    }
  }
  FlushTouched();
  return status;
}

absl::Status RoundManager::Deliver(int64_t session_id) {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || !sharded()) {
      return absl::FailedPreconditionError("delivered: not in a sharded round");
    }
    status = round_->sharded->Deliver(it->second.member_id, options_.clock());
    if (status.ok()) {
      it->second.delivered = true;
      AdvanceSharded();
    } else {
      DropSession(session_id, status);
    }
  }
  FlushTouched();
  return status;
}

void RoundManager::Touch(const std::shared_ptr<RoundMember>& member) { touched_.Add(member); }

void RoundManager::FlushTouched() {
  std::vector<std::shared_ptr<RoundMember>> touched;
  {
    MutexLock lock(&mu_);
    touched = touched_.Take();
  }
  TouchedStreams<RoundMember>::Flush(std::move(touched));
}

}  // namespace localsgd
