#include "coordinator/open_round.h"

#include <algorithm>

#include "common/proto_time.h"
#include "exchange/codec.h"

namespace localsgd {

void OpenRound::Drive(const v1::RunSpec& spec, const std::vector<ControlPlane::Leader>& leaders,
                      RoundContext* context) {
  for (const ControlPlane::Leader& leader : leaders) members.push_back(leader.worker_id);
  if (spec.exchange() == v1::EXCHANGE_SHARDED) {
    auto mode = std::make_unique<ShardedDriver>(context, leaders);
    sharded = mode.get();
    driver = std::move(mode);
  } else {
    auto mode = std::make_unique<StarDriver>(context, leaders);
    star = mode.get();
    driver = std::move(mode);
  }
}

void OpenRound::Share(const v1::SyncHeader& header, const v1::RunSpec& spec) {
  v1::MemberShare& share = shares.emplace_back();
  share.set_member_id(header.member_id());
  share.set_weight(header.weight());
  share.set_workers(header.num_workers());
  share.set_steps(spec.round_seconds() > 0
                      ? static_cast<int64_t>(header.weight() / header.num_workers())
                      : spec.local_sgd_steps());
}

v1::RoundRecord OpenRound::Record(v1::RoundOutcome outcome, const v1::RunSpec& spec,
                                  int64_t global_step, absl::Time now) const {
  v1::RoundRecord record;
  record.set_round(info.number);
  record.set_outcome(outcome);
  record.set_exchange(spec.exchange());
  driver->Record(&record);
  if (outcome == v1::ROUND_OUTCOME_COMMITTED) {
    for (const std::string& id : record.members()) {
      for (const v1::MemberShare& share : shares) {
        if (share.member_id() == id) *record.add_shares() = share;
      }
    }
  }
  record.set_bytes_received(bytes_received);
  record.set_bytes_sent(bytes_sent);
  record.set_duration_seconds(absl::ToDoubleSeconds(now - info.opened));
  record.set_codec(spec.codec());
  const int64_t n = info.layout.num_values;
  record.set_fragment(info.fragment);
  record.set_values(n);
  record.set_compression_ratio(
      static_cast<double>(n * sizeof(float)) /
      static_cast<double>(std::max<size_t>(1, EncodedBytes(spec.codec(), n))));
  *record.mutable_start_time() = ToProtoTime(info.opened);
  record.set_global_step(global_step);
  for (const auto& [id, why] : suspended) {
    v1::DroppedMember* out = record.add_suspended();
    out->set_member_id(id);
    out->set_reason(why);
  }
  return record;
}

}  // namespace localsgd
