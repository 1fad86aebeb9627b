// Star rounds on the coordinator (docs/design.md, "Star rounds"): a StarRound decides, the
// range reducer averages every member's delta here, and each update chunk goes to every
// member as soon as it is averaged.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/round_manager.h"
#include "coordinator/star_round.h"

namespace localsgd {

class RoundManager::StarDriver : public RoundManager::Driver {
 public:
  StarDriver(RoundManager* manager, const std::vector<ControlPlane::Leader>& leaders)
      : m_(manager), round_(Options(*manager), Candidates(leaders)) {
    session_of_slot_.assign(leaders.size(), -1);
    m_->round_->reducer->BeginRound(static_cast<int>(leaders.size()));
  }

  absl::StatusOr<int64_t> Arrive(const v1::SyncHeader& header,
                                 const std::shared_ptr<RoundMember>& member) override {
    LOCALSGD_ASSIGN_OR_RETURN(
        const int slot, round_.Arrive(header.member_id(), header.step(), header.num_workers()));
    if (absl::Status s = m_->round_->reducer->SetWeight(slot, header.weight()); !s.ok()) {
      Drop(slot, std::string(s.message()), s);
      return s;
    }
    const int64_t session =
        m_->AddSession(Session{slot, header.member_id(), member, header.step()});
    session_of_slot_[slot] = session;
    const ChunkLayout& layout = m_->round_->reducer->layout();
    auto response = std::make_shared<v1::SyncResponse>();
    v1::RoundHeader* round_header = response->mutable_header();
    round_header->set_round(m_->round_->number);
    for (const std::string& id : round_.members()) round_header->add_members(id);
    round_header->set_codec(m_->model_.spec().codec());
    round_header->set_num_chunks(layout.num_chunks());
    round_header->set_chunk_values(layout.chunk_values);
    round_header->set_fragment(m_->round_->fragment);
    member->Enqueue(std::move(response));
    m_->Touch(member);
    return session;
  }

  void Refuse(const std::string& member_id, const std::string& reason, bool excused) override {
    const int slot = round_.SlotOf(member_id);
    if (slot >= 0 && !round_.arrived(slot)) {
      round_.Leave(slot, reason, absl::OkStatus(), excused);
      ApplyDrops();
    }
  }

  void Leave(int64_t session, const absl::Status& why) override {
    Drop(m_->sessions_.at(session).slot, absl::StrCat("stream ended: ", why.message()), why);
  }

  void EndOfInput(int64_t session) override {
    const Session& s = m_->sessions_.at(session);
    if (s.chunks_received != m_->round_->reducer->layout().num_chunks()) {
      Drop(s.slot, "closed its stream before sending every chunk",
           absl::InvalidArgumentError("stream closed before every chunk was sent"));
    }
  }

  void Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) override {
    std::vector<std::string> live;
    for (const ControlPlane::Leader& leader : leaders) live.push_back(leader.worker_id);
    round_.Tick(now, live);
    ApplyDrops();
  }

  absl::StatusOr<std::shared_ptr<RangeReducer>> ChunkReducer(int64_t) override {
    return m_->round_->reducer;
  }

  absl::Status AddChunk(int64_t session, const v1::Chunk& chunk, absl::Status checked,
                        const std::vector<float>& decoded) override {
    Session& s = m_->sessions_.at(session);
    RangeReducer& engine = *m_->round_->reducer;
    if (checked.ok()) checked = engine.Add(s.slot, chunk.index(), chunk.data(), decoded);
    if (!checked.ok()) {
      Drop(s.slot, std::string(checked.message()), checked);
      return checked;
    }
    m_->round_->bytes_received += static_cast<int64_t>(chunk.data().size());
    if (++s.chunks_received == engine.layout().num_chunks()) {
      round_.Delivered(s.slot, m_->options_.clock());
    }
    return absl::OkStatus();
  }

  void Advance() override {
    ApplyDrops();
    RangeReducer& engine = *m_->round_->reducer;
    if (round_.phase() == StarRound::Phase::kOpen) {
      absl::StatusOr<std::vector<int>> completed = engine.TakeCompleted();
      if (!completed.ok()) {
        round_.Fail(std::string(completed.status().message()));
      } else {
        for (const RangeReducer::Exclusion& exclusion : engine.TakeExclusions()) {
          round_.Exclude(exclusion.slot,
                         absl::StrFormat("delta norm %.6g is more than max_delta_norm_ratio %g "
                                         "times the median of the others' (%.6g)",
                                         exclusion.norm, m_->model_.spec().max_delta_norm_ratio(),
                                         exclusion.others_median));
        }
        for (int chunk : *completed) Send(chunk);
        if (engine.AllComplete()) round_.Averaged();
      }
    }
    if (round_.phase() == StarRound::Phase::kAborted) {
      m_->Abort(std::string(round_.abort_reason()));  // this driver ends with the round
    } else if (round_.phase() == StarRound::Phase::kCommitted && m_->MayCommit()) {
      engine.Commit();
      const std::vector<std::string> included = round_.Included();
      m_->Publish(
          included, round_.Step(m_->model_.global_step()),
          absl::StrCat("round ", round_.number(), " committed: ", included.size(), " of ",
                       round_.members().size(), " members (", absl::StrJoin(included, ", "), ")"));
    }
  }

  void OnAbort() override { m_->round_->reducer->Abort(); }

  std::vector<RoundFault> Faults() const override { return round_.Faults(); }

  void Record(v1::RoundRecord* record) const override {
    for (const std::string& id : round_.Present()) record->add_members(id);
    RecordOutcomes(round_.dropped(), round_.SlowestWait(), record);
    for (const auto& [id, reason] : round_.excluded()) {
      v1::DroppedMember* excluded = record->add_excluded();
      excluded->set_member_id(id);
      excluded->set_reason(reason);
    }
  }

 private:
  static StarRound::Options Options(const RoundManager& m) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    StarRound::Options options;
    options.number = m.round_->number;
    options.opened = m.round_->opened;
    options.deadline = absl::Seconds(m.model_.spec().round_deadline_seconds());
    options.min_workers = m.model_.spec().min_workers();
    return options;
  }
  static std::vector<StarRound::Candidate> Candidates(
      const std::vector<ControlPlane::Leader>& leaders) {
    std::vector<StarRound::Candidate> candidates;
    for (const ControlPlane::Leader& leader : leaders) {
      candidates.push_back({leader.worker_id, leader.ranks});
    }
    return candidates;
  }

  // The slot's member leaves the round, then ApplyDrops.
  void Drop(int slot, const std::string& reason, const absl::Status& status) {
    round_.Leave(slot, reason, status);
    ApplyDrops();
  }

  // The reducer stops waiting for the members the round dropped, and their streams end.
  void ApplyDrops() {
    for (const StarRound::Drop& drop : round_.TakeDrops()) {
      m_->round_->reducer->Drop(drop.slot);
      auto it = m_->sessions_.find(session_of_slot_[drop.slot]);
      if (it == m_->sessions_.end()) continue;
      it->second.member->Close(drop.status);
      m_->Touch(it->second.member);
      m_->sessions_.erase(it);
    }
  }

  // An averaged update chunk, encoded once, to every member.
  void Send(int chunk) {
    auto response = std::make_shared<v1::SyncResponse>();
    response->mutable_update()->set_index(chunk);
    *response->mutable_update()->mutable_data() = m_->round_->reducer->TakeEncodedUpdate(chunk);
    const int64_t bytes = static_cast<int64_t>(response->update().data().size());
    for (int64_t session : session_of_slot_) {
      auto it = m_->sessions_.find(session);
      if (it == m_->sessions_.end()) continue;
      it->second.member->Enqueue(response);
      m_->Touch(it->second.member);
      m_->round_->bytes_sent += bytes;
    }
  }

  RoundManager* const m_;
  StarRound round_;
  std::vector<int64_t> session_of_slot_;  // -1: not joined
};

std::unique_ptr<RoundManager::Driver> RoundManager::MakeStarDriver(
    RoundManager* manager, const std::vector<ControlPlane::Leader>& leaders) {
  return std::make_unique<StarDriver>(manager, leaders);
}

}  // namespace localsgd
