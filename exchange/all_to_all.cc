#include "exchange/all_to_all.h"

#include <utility>

#include "common/status_macros.h"

namespace localsgd {

AllToAll::AllToAll(Setup setup) : setup_(std::move(setup)) {
  const int ranges = setup_.round->num_ranges();
  status_.resize(static_cast<size_t>(ranges));
  for (int s = 0; s < ranges; ++s) {
    threads_.emplace_back([this, s] {
      status_[s] = Run(s);
      // This member cannot complete the round: the coordinator aborts it, naming the owner
      // (unless the round already ended, which cancelled this exchange).
      if (!status_[s].ok() && !absl::IsCancelled(status_[s])) {
        setup_.unreachable(setup_.round->range(s).owner_id(), status_[s]);
      }
    });
  }
}

AllToAll::~AllToAll() { Stop(false).IgnoreError(); }

absl::Status AllToAll::Run(int s) {
  const MemberRound& round = *setup_.round;
  const v1::ShardRange& range = round.range(s);
  LOCALSGD_RETURN_IF_ERROR(setup_.links[s]->Exchange(
      setup_.headers[s], range.begin_chunk(), range.end_chunk(), setup_.encode,
      [&](const v1::Chunk& mean) { return setup_.take(s, mean); }));
  return round.RangeComplete(s);
}

absl::Status AllToAll::Stop(bool committed) {
  if (!committed) {
    for (auto& link : setup_.links) link->Cancel();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  for (const absl::Status& s : status_) {
    if (!s.ok() && !absl::IsCancelled(s)) return s;
  }
  return absl::OkStatus();
}

}  // namespace localsgd
