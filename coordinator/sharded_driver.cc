#include "coordinator/sharded_driver.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data_plane_tag.h"
#include "exchange/codec.h"

namespace localsgd {
namespace {

ShardedRound::Options OptionsOf(const RoundContext& context) {
  const v1::RunSpec& spec = context.spec();
  ShardedRound::Options options;
  options.number = context.round().number;
  options.layout = context.round().layout;
  options.opened = context.round().opened;
  options.deadline = absl::Seconds(spec.round_deadline_seconds());
  options.grace = RoundGrace::Of(spec);
  options.min_workers = spec.min_workers();
  options.min_shard_values = spec.min_shard_bytes() / static_cast<int64_t>(sizeof(float));
  options.owners_hold_deltas =
      spec.max_delta_norm_ratio() != 0 || spec.trimmed_mean_fraction() != 0;
  return options;
}

std::vector<ShardedRound::Candidate> CandidatesOf(const std::vector<ControlPlane::Leader>& leaders,
                                                  const std::set<std::string>& starting) {
  std::vector<ShardedRound::Candidate> candidates;
  for (const ControlPlane::Leader& leader : leaders) {
    candidates.push_back({leader.worker_id, leader.ranks, leader.data_address,
                          starting.count(leader.worker_id) == 0});
  }
  return candidates;
}

std::vector<std::string> IdsOf(const std::vector<ControlPlane::Leader>& leaders) {
  std::vector<std::string> ids;
  for (const ControlPlane::Leader& leader : leaders) ids.push_back(leader.worker_id);
  return ids;
}

}  // namespace

ShardedDriver::ShardedDriver(RoundContext* context,
                             const std::vector<ControlPlane::Leader>& leaders)
    : context_(context),
      round_(OptionsOf(*context), CandidatesOf(leaders, context->round().starting)),
      expected_(IdsOf(leaders)),
      attempt_(context->NextAttempt()) {
  for (const ControlPlane::Leader& leader : leaders) {
    data_plane_keys_[leader.worker_id] = leader.data_plane_key;
  }
}

absl::StatusOr<int64_t> ShardedDriver::Arrive(const v1::SyncHeader& header,
                                              std::shared_ptr<RoundMember> stream) {
  if (absl::Status s =
          round_.Arrive(header.member_id(), header.weight(), header.step(), context_->Now());
      !s.ok()) {
    return s;
  }
  // The RoundHeader goes out with the layout (Advance).
  return context_->sessions().Add(header.member_id(), std::move(stream));
}

void ShardedDriver::Refuse(const std::string& member_id, const std::string& reason, bool excused) {
  round_.Leave(member_id, reason, context_->Now(), excused);
}

void ShardedDriver::Leave(int64_t session, const absl::Status& why) { DropSession(session, why); }

void ShardedDriver::EndOfInput(int64_t session) {
  if (delivered_.count(session) == 0) {
    DropSession(session,
                absl::InvalidArgumentError("closed its stream before it held the whole update"));
  }
}

void ShardedDriver::Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) {
  for (const std::string& id : expected_) {
    if (std::none_of(leaders.begin(), leaders.end(),
                     [&](const ControlPlane::Leader& l) { return l.worker_id == id; })) {
      round_.Leave(id, "lease expired or left", now);
    }
  }
  round_.Tick(now);
}

absl::Status ShardedDriver::Deliver(int64_t session, const v1::Delivered& delivered) {
  absl::Status status;
  if (delivered.value_digests_size() != delivered.range_digests_size()) {
    status = absl::InvalidArgumentError(
        absl::StrCat("delivered.value_digests: ", delivered.value_digests_size(), " digests for ",
                     delivered.range_digests_size(), " range_digests"));
  } else {
    std::vector<DigestPair> digests;
    for (int s = 0; s < delivered.range_digests_size(); ++s) {
      digests.push_back({delivered.range_digests(s), delivered.value_digests(s)});
    }
    status =
        round_.Deliver(context_->sessions().MemberOf(session), std::move(digests), context_->Now());
  }
  if (status.ok()) {
    delivered_.insert(session);
  } else {
    DropSession(session, status);
  }
  return status;
}

absl::Status ShardedDriver::Unreachable(int64_t session, const v1::OwnerUnreachable& unreachable) {
  absl::Status status = round_.Unreachable(context_->sessions().MemberOf(session),
                                           unreachable.owner_id(), unreachable.reason());
  if (!status.ok()) DropSession(session, status);
  return status;
}

void ShardedDriver::Advance() {
  SendDrops();
  if (round_.TakeLaidOut()) SendLayout();
  if (round_.phase() == ShardedRound::Phase::kAborted) {
    context_->Abort(std::string(round_.abort_reason()));  // this driver ends with the round
  } else if (round_.phase() == ShardedRound::Phase::kCommitted && context_->MayCommit()) {
    // Every member applies the same decoded means through the same outer step; nothing
    // commits on copies that differ.
    if (!round_.Verify()) {
      SendDiverged();
      context_->Abort(std::string(round_.abort_reason()));
      return;
    }
    DigestPair digest;  // the fragment's
    for (const DigestPair& range : round_.agreed()) digest = RangeDigests::Combine(digest, range);
    const std::vector<std::string> included = round_.Included();
    const size_t owners = round_.shards().size();
    context_->Commit(
        included, round_.Step(context_->committed_step(), context_->step_ceiling()), digest,
        absl::StrCat("round ", round_.number(), " committed: ", included.size(), " of ",
                     expected_.size(), " members (", absl::StrJoin(included, ", "),
                     "), sharded over ", owners, owners == 1 ? " owner" : " owners"));
  }
}

std::vector<RoundFault> ShardedDriver::Faults() const { return round_.Faults(); }

void ShardedDriver::Record(v1::RoundRecord* record) const {
  for (const std::string& id : round_.Included()) record->add_members(id);
  record->set_ring(round_.ring());
  const int64_t members = static_cast<int64_t>(round_.members().size());
  const ChunkLayout& layout = context_->round().layout;
  const v1::Codec codec = context_->spec().codec();
  for (size_t s = 0; s < round_.shards().size(); ++s) {
    const ShardedRound::Shard& shard = round_.shards()[s];
    v1::ShardRecord* out = record->add_shards();
    out->set_owner_id(shard.owner_id);
    out->set_address(shard.address);
    out->set_begin(layout.begin(shard.begin_chunk));
    out->set_end(layout.begin(shard.end_chunk - 1) + layout.size(shard.end_chunk - 1));
    const int64_t range = out->end() - out->begin();
    const int64_t mean_bytes = static_cast<int64_t>(EncodedBytes(codec, range));
    out->set_mean_bytes(mean_bytes);
    // A ring's owner gets one fp32 running sum of its range and sends its mean to succ;
    // otherwise it gets every member's delta and sends its mean to every member (itself in
    // process).
    out->set_bytes_received(round_.ring() ? range * static_cast<int64_t>(sizeof(float))
                                          : members * mean_bytes);
    out->set_bytes_sent((round_.ring() ? 1 : members) * mean_bytes);
  }
  RecordRoundOutcomes(round_.dropped(), round_.SlowestWait(), record);
}

void ShardedDriver::DropSession(int64_t session, const absl::Status& status) {
  const std::string member_id = context_->sessions().MemberOf(session);
  if (member_id.empty()) return;
  context_->sessions().End(session, status);
  delivered_.erase(session);
  round_.Leave(member_id, absl::StrCat("stream ended: ", status.message()), context_->Now());
}

void ShardedDriver::SendDrops() {
  for (const auto& [id, reason] : round_.TakeDrops()) {
    if (const int64_t session = context_->sessions().SessionOf(id); session >= 0) {
      context_->sessions().End(
          session, absl::AbortedError(
                       absl::StrCat("dropped from round ", round_.number(), ": ", reason,
                                    "; keep your local weights and fetch the model after the round "
                                    "commits")));
      delivered_.erase(session);
    }
    if (!laid_out_) continue;
    auto notice = std::make_shared<v1::SyncResponse>();
    notice->mutable_dropped()->set_member_id(id);
    notice->mutable_dropped()->set_reason(reason);
    for (int64_t session : context_->sessions().Ids()) context_->sessions().Send(session, notice);
  }
}

void ShardedDriver::SendDiverged() {
  for (const std::string& id : round_.diverged()) {
    const int64_t session = context_->sessions().SessionOf(id);
    if (session < 0) continue;
    auto response = std::make_shared<v1::SyncResponse>();
    response->mutable_stale()->set_committed_round(context_->committed_round());
    response->mutable_stale()->set_global_step(context_->committed_step());
    context_->sessions().Send(session, std::move(response));
    context_->sessions().End(
        session, absl::FailedPreconditionError(absl::StrCat(
                     "round ", round_.number(), " aborted: ", round_.abort_reason(),
                     "; fetch the committed model (round ", context_->committed_round(), ")")));
  }
}

void ShardedDriver::SendLayout() {
  const ChunkLayout& layout = context_->round().layout;
  auto response = std::make_shared<v1::SyncResponse>();
  v1::RoundHeader* header = response->mutable_header();
  header->set_round(round_.number());
  for (const std::string& id : round_.members()) header->add_members(id);
  for (double weight : round_.weights()) header->add_weights(weight);
  header->set_codec(context_->spec().codec());
  header->set_num_chunks(layout.num_chunks());
  header->set_chunk_values(layout.chunk_values);
  header->set_exchange(v1::EXCHANGE_SHARDED);
  header->set_attempt(attempt_);
  header->set_ring(round_.ring());
  if (round_.ring()) header->set_ring_streams(context_->spec().ring_streams());
  header->set_fragment(context_->round().fragment);
  header->set_first_chunk(context_->round().first_chunk);
  for (const ShardedRound::Shard& shard : round_.shards()) {
    v1::ShardRange* range = header->add_shards();
    range->set_owner_id(shard.owner_id);
    range->set_address(shard.address);
    range->set_begin_chunk(shard.begin_chunk);
    range->set_end_chunk(shard.end_chunk);
  }
  laid_out_ = true;
  // Each member gets its own copy, with the tags of the streams it is to open
  // (docs/design.md, "Security").
  const std::vector<std::string>& members = round_.members();
  for (int64_t session : context_->sessions().Ids()) {
    const auto slot =
        std::find(members.begin(), members.end(), context_->sessions().MemberOf(session));
    if (slot == members.end()) continue;
    auto copy = std::make_shared<v1::SyncResponse>(*response);
    AddStreamTags(static_cast<int>(slot - members.begin()), copy->mutable_header());
    context_->sessions().Send(session, std::move(copy));
  }
}

void ShardedDriver::AddStreamTags(int slot, v1::RoundHeader* header) const {
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
            ? DataPlaneTag(key->second, DataPlaneStream{context_->run_id(), round_.number(),
                                                        attempt_, members[slot], members[receiver]})
            : std::string());
  }
}

}  // namespace localsgd
