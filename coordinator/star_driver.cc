#include "coordinator/star_driver.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "exchange/model_digest.h"

namespace localsgd {
namespace {

StarRound::Options OptionsOf(const RoundContext& context) {
  StarRound::Options options;
  options.number = context.round().number;
  options.opened = context.round().opened;
  options.deadline = absl::Seconds(context.spec().round_deadline_seconds());
  options.grace = RoundGrace::Of(context.spec());
  options.min_workers = context.spec().min_workers();
  return options;
}

std::vector<StarRound::Candidate> CandidatesOf(const std::vector<ControlPlane::Leader>& leaders,
                                               const std::set<std::string>& starting) {
  std::vector<StarRound::Candidate> candidates;
  for (const ControlPlane::Leader& leader : leaders) {
    candidates.push_back({leader.worker_id, leader.ranks, starting.count(leader.worker_id) == 0});
  }
  return candidates;
}

}  // namespace

StarDriver::StarDriver(RoundContext* context, const std::vector<ControlPlane::Leader>& leaders)
    : context_(context),
      reducer_(*context->round().reducer),
      round_(OptionsOf(*context), CandidatesOf(leaders, context->round().starting)) {
  session_of_slot_.assign(leaders.size(), -1);
  chunks_received_.assign(leaders.size(), 0);
  reducer_.BeginRound(static_cast<int>(leaders.size()));
}

absl::StatusOr<int64_t> StarDriver::Arrive(const v1::SyncHeader& header,
                                           std::shared_ptr<RoundMember> stream) {
  LOCALSGD_ASSIGN_OR_RETURN(const int slot, round_.Arrive(header.member_id(), header.step(),
                                                          header.num_workers(), context_->Now()));
  if (absl::Status s = reducer_.deltas().SetWeight(slot, header.weight()); !s.ok()) {
    Drop(slot, std::string(s.message()), s);
    return s;
  }
  const int64_t session = context_->sessions().Add(header.member_id(), std::move(stream));
  session_of_slot_[slot] = session;
  slot_of_session_[session] = slot;
  const ChunkLayout& layout = reducer_.layout();
  auto response = std::make_shared<v1::SyncResponse>();
  v1::RoundHeader* round_header = response->mutable_header();
  round_header->set_round(context_->round().number);
  for (const std::string& id : round_.members()) round_header->add_members(id);
  round_header->set_codec(context_->spec().codec());
  round_header->set_num_chunks(layout.num_chunks());
  round_header->set_chunk_values(layout.chunk_values);
  round_header->set_fragment(context_->round().fragment);
  context_->sessions().Send(session, std::move(response));
  return session;
}

void StarDriver::Refuse(const std::string& member_id, const std::string& reason, bool excused) {
  const int slot = round_.SlotOf(member_id);
  if (slot >= 0 && !round_.arrived(slot)) {
    round_.Leave(slot, reason, absl::OkStatus(), excused);
    ApplyDrops();
  }
}

void StarDriver::Leave(int64_t session, const absl::Status& why) {
  Drop(slot_of_session_.at(session), absl::StrCat("stream ended: ", why.message()), why);
}

void StarDriver::EndOfInput(int64_t session) {
  const int slot = slot_of_session_.at(session);
  if (chunks_received_[slot] != reducer_.layout().num_chunks()) {
    Drop(slot, "closed its stream before sending every chunk",
         absl::InvalidArgumentError("stream closed before every chunk was sent"));
  }
}

void StarDriver::Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) {
  std::vector<std::string> live;
  for (const ControlPlane::Leader& leader : leaders) live.push_back(leader.worker_id);
  round_.Tick(now, live);
  ApplyDrops();
}

absl::Status StarDriver::AddChunk(int64_t session, const v1::Chunk& chunk, absl::Status checked,
                                  const std::vector<float>& decoded) {
  const int slot = slot_of_session_.at(session);
  if (checked.ok()) checked = reducer_.deltas().Add(slot, chunk.index(), chunk.data(), decoded);
  if (!checked.ok()) {
    Drop(slot, std::string(checked.message()), checked);
    return checked;
  }
  context_->CountBytes(static_cast<int64_t>(chunk.data().size()), 0);
  if (++chunks_received_[slot] == reducer_.layout().num_chunks()) {
    round_.Delivered(slot, context_->Now());
  }
  return absl::OkStatus();
}

void StarDriver::Advance() {
  ApplyDrops();
  if (round_.phase() == StarRound::Phase::kOpen) {
    absl::StatusOr<std::vector<int>> completed = reducer_.TakeCompleted();
    if (!completed.ok()) {
      round_.Fail(std::string(completed.status().message()));
    } else {
      for (const DeltaMean::Exclusion& exclusion : reducer_.deltas().TakeExclusions()) {
        round_.Exclude(exclusion.slot,
                       absl::StrFormat("delta norm %.6g is more than max_delta_norm_ratio %g "
                                       "times the median of the others' (%.6g)",
                                       exclusion.norm, context_->spec().max_delta_norm_ratio(),
                                       exclusion.others_median));
      }
      for (int chunk : *completed) Send(chunk);
      if (reducer_.AllComplete()) round_.Averaged();
    }
  }
  if (round_.phase() == StarRound::Phase::kAborted) {
    context_->Abort(std::string(round_.abort_reason()));  // this driver ends with the round
  } else if (round_.phase() == StarRound::Phase::kCommitted && context_->MayCommit()) {
    reducer_.Commit();
    const std::vector<std::string> included = round_.Included();
    // The coordinator averaged: the digest is its own copy's.
    const DigestPair digest = ModelDigest(reducer_.global(), reducer_.momentum(), reducer_.layout(),
                                          context_->round().first_chunk);
    context_->Commit(
        included, round_.Step(context_->committed_step(), context_->step_ceiling()), digest,
        absl::StrCat("round ", round_.number(), " committed: ", included.size(), " of ",
                     round_.members().size(), " members (", absl::StrJoin(included, ", "), ")"));
  }
}

void StarDriver::OnAbort() { reducer_.Abort(); }

std::vector<RoundFault> StarDriver::Faults() const { return round_.Faults(); }

void StarDriver::Record(v1::RoundRecord* record) const {
  for (const std::string& id : round_.Present()) record->add_members(id);
  RecordRoundOutcomes(round_.dropped(), round_.SlowestWait(), record);
  for (const auto& [id, reason] : round_.excluded()) {
    v1::DroppedMember* excluded = record->add_excluded();
    excluded->set_member_id(id);
    excluded->set_reason(reason);
  }
}

void StarDriver::Drop(int slot, const std::string& reason, const absl::Status& status) {
  round_.Leave(slot, reason, status);
  ApplyDrops();
}

void StarDriver::ApplyDrops() {
  for (const StarRound::Drop& drop : round_.TakeDrops()) {
    reducer_.deltas().Drop(drop.slot);
    const int64_t session = session_of_slot_[drop.slot];
    if (slot_of_session_.erase(session) > 0) context_->sessions().End(session, drop.status);
  }
}

void StarDriver::Send(int chunk) {
  auto response = std::make_shared<v1::SyncResponse>();
  response->mutable_update()->set_index(chunk);
  *response->mutable_update()->mutable_data() = reducer_.TakeEncodedUpdate(chunk);
  const int64_t bytes = static_cast<int64_t>(response->update().data().size());
  for (int64_t session : session_of_slot_) {
    if (slot_of_session_.count(session) > 0 && context_->sessions().Send(session, response)) {
      context_->CountBytes(0, bytes);
    }
  }
}

}  // namespace localsgd
