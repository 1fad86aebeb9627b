#include "coordinator/round_driver.h"

#include "coordinator/round_step.h"

namespace localsgd {

int64_t RoundContext::step_ceiling() const {
  return StepCeiling(committed_step(), spec().max_unsynced_steps(), spec().local_sgd_steps());
}

void RecordRoundOutcomes(const std::vector<std::pair<std::string, std::string>>& dropped,
                         absl::Duration slowest_wait, v1::RoundRecord* record) {
  for (const auto& [id, reason] : dropped) {
    v1::DroppedMember* out = record->add_dropped();
    out->set_member_id(id);
    out->set_reason(reason);
  }
  if (slowest_wait > absl::ZeroDuration()) {
    record->set_slowest_wait_seconds(absl::ToDoubleSeconds(slowest_wait));
  }
}

}  // namespace localsgd
