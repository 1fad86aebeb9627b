// Sharded rounds on the coordinator (docs/design.md, "Sharded rounds"): a ShardedRound
// decides; this driver sends the layout, the drop notices and the commit, takes each owner's
// averaged chunks and applies them through the outer optimizer into the next model exactly as
// the members do. It sends no member model bytes: the owners send the means to every member.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data_plane_tag.h"
#include "coordinator/round_manager.h"
#include "coordinator/sharded_round.h"
#include "exchange/codec.h"
#include "exchange/model_digest.h"
#include "exchange/outer_step.h"

namespace localsgd {

class RoundManager::ShardedDriver : public RoundManager::Driver {
 public:
  ShardedDriver(RoundManager* manager, const std::vector<ControlPlane::Leader>& leaders)
      : m_(manager), round_(Options(*manager), Candidates(leaders)) {
    for (const ControlPlane::Leader& leader : leaders) {
      data_plane_keys_[leader.worker_id] = leader.data_plane_key;
    }
    RangeReducer& engine = *m_->round_->reducer;
    attempt_ = m_->next_attempt_++;
    next_ = std::make_shared<NextModel>();
    next_->global = engine.SpareBuffer(static_cast<size_t>(engine.layout().num_values));
    next_->momentum = engine.SpareBuffer(engine.momentum().size());
    next_->digests = RangeDigests(engine.layout().num_chunks());
  }

  absl::StatusOr<int64_t> Arrive(const v1::SyncHeader& header,
                                 const std::shared_ptr<RoundMember>& member) override {
    if (absl::Status s =
            round_.Arrive(header.member_id(), header.weight(), header.step(), m_->options_.clock());
        !s.ok()) {
      return s;
    }
    // The RoundHeader goes out with the layout (Advance).
    return m_->AddSession(Session{-1, header.member_id(), member, header.step()});
  }

  void Refuse(const std::string& member_id, const std::string& reason, bool excused) override {
    round_.Leave(member_id, reason, m_->options_.clock(), excused);
  }

  void Leave(int64_t session, const absl::Status& why) override { DropSession(session, why); }

  void EndOfInput(int64_t session) override {
    if (!m_->sessions_.at(session).delivered) {
      DropSession(session,
                  absl::InvalidArgumentError("closed its stream before it held the whole update"));
    }
  }

  void Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) override {
    for (const std::string& id : m_->round_->members) {
      if (std::none_of(leaders.begin(), leaders.end(),
                       [&](const ControlPlane::Leader& l) { return l.worker_id == id; })) {
        round_.Leave(id, "lease expired or left", now);
      }
    }
    round_.Tick(now);
  }

  absl::StatusOr<std::shared_ptr<RangeReducer>> ChunkReducer(int64_t session) override {
    absl::Status status = absl::InvalidArgumentError(
        "chunk: in a sharded round deltas go to the range owners (DataPlane.Reduce), not to "
        "the coordinator");
    DropSession(session, status);
    return status;
  }

  absl::StatusOr<MeanWork> ClaimMean(int64_t session, int index) override {
    const std::string owner_id = m_->sessions_.at(session).member_id;
    if (absl::Status status = round_.AddMean(owner_id, index); !status.ok()) {
      DropSession(session, status);
      return status;
    }
    // Accepted, so in the owner's range.
    MeanWork work;
    work.shard = round_.ShardOf(index);
    work.next = next_;
    work.engine = m_->round_->reducer;
    work.codec = m_->model_.spec().codec();
    const v1::OuterOptimizerSpec& spec = m_->model_.spec().outer_optimizer();
    work.outer = OuterOptimizer{spec.lr(), spec.momentum(), spec.nesterov()};
    return work;
  }

  absl::Status FinishMean(int64_t session, int index, int64_t bytes, const MeanWork& work,
                          absl::Status applied) override {
    if (work.next != next_) return absl::FailedPreconditionError("mean: the round ended");
    if (absl::IsOutOfRange(applied)) {
      round_.Fail(std::string(applied.message()));
      return applied;
    }
    if (!applied.ok()) {
      const std::string owner_id =
          m_->sessions_.count(session) ? m_->sessions_.at(session).member_id : "";
      DropSession(session, applied);  // the owner leaves, and the chunk it claimed can never
      // come: the round aborts at once (the owner's range counted as averaged, so its
      // leaving alone would not abort it).
      round_.RefuseMean(owner_id, index, std::string(applied.message()));
      return applied;
    }
    ++means_done_;
    m_->round_->bytes_received += bytes;
    if (work.shard >= 0 && static_cast<size_t>(work.shard) < mean_bytes_.size()) {
      mean_bytes_[work.shard] += bytes;
    }
    return absl::OkStatus();
  }

  absl::Status Deliver(int64_t session, const v1::Delivered& delivered) override {
    Session& s = m_->sessions_.at(session);
    absl::Status status = round_.Deliver(
        s.member_id, {delivered.range_digests().begin(), delivered.range_digests().end()},
        m_->options_.clock());
    if (status.ok()) {
      s.delivered = true;
    } else {
      DropSession(session, status);
    }
    return status;
  }

  absl::Status Unreachable(int64_t session, const v1::OwnerUnreachable& unreachable) override {
    absl::Status status = round_.Unreachable(m_->sessions_.at(session).member_id,
                                             unreachable.owner_id(), unreachable.reason());
    if (!status.ok()) DropSession(session, status);
    return status;
  }

  void Advance() override {
    SendDrops();
    if (round_.TakeLaidOut()) SendLayout();
    if (round_.phase() == ShardedRound::Phase::kAborted) {
      m_->Abort(std::string(round_.abort_reason()));  // this driver ends with the round
    } else if (round_.phase() == ShardedRound::Phase::kCommitted && m_->MayCommit() &&
               means_done_ == m_->round_->reducer->layout().num_chunks()) {
      // Every member applies the same decoded mean through the same outer step; so did this
      // copy, chunk by chunk, into next_. Nothing commits on copies that differ.
      std::vector<uint64_t> reference;
      for (const ShardedRound::Shard& shard : round_.shards()) {
        reference.push_back(next_->digests.Of(shard.begin_chunk, shard.end_chunk));
      }
      if (!round_.Verify(reference)) {
        SendDiverged();
        m_->Abort(std::string(round_.abort_reason()));
        return;
      }
      m_->round_->reducer->InstallNext(std::move(next_->global), std::move(next_->momentum));
      const std::vector<std::string> included = round_.Included();
      const size_t owners = round_.shards().size();
      m_->Publish(
          included, round_.Step(m_->model_.global_step()),
          absl::StrCat("round ", round_.number(), " committed: ", included.size(), " of ",
                       m_->round_->members.size(), " members (", absl::StrJoin(included, ", "),
                       "), sharded over ", owners, owners == 1 ? " owner" : " owners"));
    }
  }

  std::vector<RoundFault> Faults() const override { return round_.Faults(); }

  void Record(v1::RoundRecord* record) const override {
    for (const std::string& id : round_.Included()) record->add_members(id);
    record->set_ring(round_.ring());
    const int64_t members = static_cast<int64_t>(round_.members().size());
    const ChunkLayout& layout = m_->round_->reducer->layout();
    const v1::Codec codec = m_->model_.spec().codec();
    for (size_t s = 0; s < round_.shards().size(); ++s) {
      const ShardedRound::Shard& shard = round_.shards()[s];
      v1::ShardRecord* out = record->add_shards();
      out->set_owner_id(shard.owner_id);
      out->set_address(shard.address);
      out->set_begin(layout.begin(shard.begin_chunk));
      out->set_end(layout.begin(shard.end_chunk - 1) + layout.size(shard.end_chunk - 1));
      const int64_t mean_bytes = s < mean_bytes_.size() ? mean_bytes_[s] : 0;
      out->set_mean_bytes(mean_bytes);
      const int64_t range = out->end() - out->begin();
      // A ring's owner gets one fp32 running sum of its range and sends its mean to succ and
      // the coordinator; otherwise it gets every member's delta and sends its mean to every
      // member (itself in process) and to the coordinator.
      out->set_bytes_received(round_.ring()
                                  ? range * static_cast<int64_t>(sizeof(float))
                                  : members * static_cast<int64_t>(EncodedBytes(codec, range)));
      out->set_bytes_sent((round_.ring() ? 2 : members + 1) * mean_bytes);
    }
    RecordOutcomes(round_.dropped(), round_.SlowestWait(), record);
  }

 private:
  static ShardedRound::Options Options(const RoundManager& m) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const v1::RunSpec& spec = m.model_.spec();
    ShardedRound::Options options;
    options.number = m.round_->number;
    options.layout = m.round_->reducer->layout();
    options.opened = m.round_->opened;
    options.deadline = absl::Seconds(spec.round_deadline_seconds());
    options.min_workers = spec.min_workers();
    options.min_shard_values = spec.min_shard_bytes() / static_cast<int64_t>(sizeof(float));
    options.owners_hold_deltas =
        spec.max_delta_norm_ratio() != 0 || spec.trimmed_mean_fraction() != 0;
    return options;
  }
  static std::vector<ShardedRound::Candidate> Candidates(
      const std::vector<ControlPlane::Leader>& leaders) {
    std::vector<ShardedRound::Candidate> candidates;
    for (const ControlPlane::Leader& leader : leaders) {
      candidates.push_back({leader.worker_id, leader.ranks, leader.data_address});
    }
    return candidates;
  }

  // The session's member leaves the round (stream ended, bad input); its stream is closed
  // with `status`.
  void DropSession(int64_t session, const absl::Status& status) {
    auto it = m_->sessions_.find(session);
    if (it == m_->sessions_.end()) return;
    const std::string member_id = it->second.member_id;
    it->second.member->Close(status);
    m_->Touch(it->second.member);
    m_->sessions_.erase(it);
    round_.Leave(member_id, absl::StrCat("stream ended: ", status.message()), m_->options_.clock());
  }

  // Ends the dropped members' streams and, once laid out, tells the others (owners stop
  // waiting for their deltas). Drops before the layout need no notice: it leaves them out.
  void SendDrops() {
    for (const auto& [id, reason] : round_.TakeDrops()) {
      auto it = m_->SessionOf(id);
      if (it != m_->sessions_.end()) {
        it->second.member->Close(absl::AbortedError(
            absl::StrCat("dropped from round ", round_.number(), ": ", reason,
                         "; keep your local weights and fetch the model after the round commits")));
        m_->Touch(it->second.member);
        m_->sessions_.erase(it);
      }
      if (!laid_out_) continue;
      auto notice = std::make_shared<v1::SyncResponse>();
      notice->mutable_dropped()->set_member_id(id);
      notice->mutable_dropped()->set_reason(reason);
      for (auto& [session_id, session] : m_->sessions_) {
        session.member->Enqueue(notice);
        m_->Touch(session.member);
      }
    }
  }

  // The members whose copies differ fetch the committed model: a StaleRound, then the end of
  // their streams (FAILED_PRECONDITION), before the others' end ABORTED.
  void SendDiverged() {
    for (const std::string& id : round_.diverged()) {
      auto it = m_->SessionOf(id);
      if (it == m_->sessions_.end()) continue;
      auto response = std::make_shared<v1::SyncResponse>();
      response->mutable_stale()->set_committed_round(m_->model_.round());
      response->mutable_stale()->set_global_step(m_->model_.global_step());
      it->second.member->Enqueue(std::move(response));
      it->second.member->Close(absl::FailedPreconditionError(
          absl::StrCat("round ", round_.number(), " aborted: ", round_.abort_reason(),
                       "; fetch the committed model (round ", m_->model_.round(), ")")));
      m_->Touch(it->second.member);
      m_->sessions_.erase(it);
    }
  }

  // The RoundHeader with the layout, to every member.
  void SendLayout() {
    const ChunkLayout& layout = m_->round_->reducer->layout();
    auto response = std::make_shared<v1::SyncResponse>();
    v1::RoundHeader* header = response->mutable_header();
    header->set_round(round_.number());
    for (const std::string& id : round_.members()) header->add_members(id);
    for (double weight : round_.weights()) header->add_weights(weight);
    header->set_codec(m_->model_.spec().codec());
    header->set_num_chunks(layout.num_chunks());
    header->set_chunk_values(layout.chunk_values);
    header->set_exchange(v1::EXCHANGE_SHARDED);
    header->set_attempt(attempt_);
    header->set_ring(round_.ring());
    if (round_.ring()) header->set_ring_streams(m_->model_.spec().ring_streams());
    header->set_fragment(m_->round_->fragment);
    for (size_t s = 0; s < round_.shards().size(); ++s) {
      const ShardedRound::Shard& shard = round_.shards()[s];
      v1::ShardRange* range = header->add_shards();
      range->set_owner_id(shard.owner_id);
      range->set_address(shard.address);
      range->set_begin_chunk(shard.begin_chunk);
      range->set_end_chunk(shard.end_chunk);
    }
    mean_bytes_.assign(round_.shards().size(), 0);
    laid_out_ = true;
    // Each member gets its own copy, with the tags of the streams it is to open
    // (docs/design.md, "Security").
    const std::vector<std::string>& members = round_.members();
    for (auto& [session_id, session] : m_->sessions_) {
      const auto slot = std::find(members.begin(), members.end(), session.member_id);
      if (slot == members.end()) continue;
      auto copy = std::make_shared<v1::SyncResponse>(*response);
      AddStreamTags(static_cast<int>(slot - members.begin()), copy->mutable_header());
      session.member->Enqueue(std::move(copy));
      m_->Touch(session.member);
    }
  }

  // By position in the members, the tag of each stream member `slot` opens, made under the
  // receiver's key (empty where it opens none): in a ring, its Pass stream to its successor;
  // otherwise a Reduce stream to every other owner.
  void AddStreamTags(int slot, v1::RoundHeader* header) const {
    const std::vector<std::string>& members = round_.members();
    const int n = static_cast<int>(members.size());
    for (int receiver = 0; receiver < n; ++receiver) {
      const bool owner =
          std::any_of(round_.shards().begin(), round_.shards().end(),
                      [&](const ShardedRound::Shard& s) { return s.owner_slot == receiver; });
      const bool opens = round_.ring() ? receiver == (slot + 1) % n : owner && receiver != slot;
      auto key = data_plane_keys_.find(members[receiver]);
      header->add_stream_tags(
          opens && key != data_plane_keys_.end()
              ? DataPlaneTag(key->second,
                             DataPlaneStream{m_->model_.run_id(), round_.number(), attempt_,
                                             members[slot], members[receiver]})
              : std::string());
    }
  }

  RoundManager* const m_;
  ShardedRound round_;
  // By member: its data-plane key as of the round's opening (ControlPlane::Leader).
  std::map<std::string, std::string> data_plane_keys_;
  uint64_t attempt_ = 0;
  bool laid_out_ = false;  // the RoundHeader went out
  // The next model, computed chunk by chunk as the means arrive, installed at the commit.
  std::shared_ptr<NextModel> next_;
  int means_done_ = 0;
  std::vector<int64_t> mean_bytes_;  // by shard
};

absl::Status RoundManager::MeanWork::Apply(int index, const v1::Chunk& chunk) const {
  // The chunk's range of `next` is this call's alone (ClaimMean claimed it), and the engine's
  // model does not change before the round commits, which waits for this chunk.
  const ChunkLayout& layout = engine->layout();
  const size_t begin = static_cast<size_t>(layout.begin(index));
  const size_t size = static_cast<size_t>(layout.size(index));
  absl::Span<float> region = absl::MakeSpan(*next->global).subspan(begin, size);
  absl::Span<const float> momentum = engine->momentum();
  if (absl::Status status = Decode(codec, chunk.data(), region); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("mean ", index, ": ", status.message()));
  }
  const absl::Span<float> next_momentum =
      next->momentum->empty() ? absl::Span<float>()
                              : absl::MakeSpan(*next->momentum).subspan(begin, size);
  if (!OuterStepInto(outer, region, engine->global().subspan(begin, size),
                     momentum.empty() ? momentum : momentum.subspan(begin, size), next_momentum)) {
    return absl::OutOfRangeError(
        absl::StrCat("the update of chunk ", index, " overflows fp32 (the deltas are too large)"));
  }
  next->digests.Set(index, ChunkDigest(region, next_momentum));
  return absl::OkStatus();
}

std::unique_ptr<RoundManager::Driver> RoundManager::MakeShardedDriver(
    RoundManager* manager, const std::vector<ControlPlane::Leader>& leaders) {
  return std::make_unique<ShardedDriver>(manager, leaders);
}

}  // namespace localsgd
