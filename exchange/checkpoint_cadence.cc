#include "exchange/checkpoint_cadence.h"

namespace localsgd {

void CheckpointCadence::Wrote(int64_t round, absl::Time began, absl::Time ended) {
  constexpr int64_t kMaxPeriod = int64_t{1} << 40;
  if (share_ < 1 && round > last_round_ && since_ != absl::InfinitePast()) {
    const double round_seconds = absl::ToDoubleSeconds(began - since_) / (round - last_round_);
    const double rounds_needed =
        absl::ToDoubleSeconds(ended - began) / share_ / (round_seconds > 0 ? round_seconds : 1e-9);
    period_ = every_rounds_;
    while (period_ < rounds_needed && period_ < kMaxPeriod) period_ *= 2;
  }
  last_round_ = round;
  since_ = began;
}

}  // namespace localsgd
