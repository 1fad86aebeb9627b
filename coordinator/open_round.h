#ifndef LOCALSGD_COORDINATOR_OPEN_ROUND_H_
#define LOCALSGD_COORDINATOR_OPEN_ROUND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/control_plane.h"
#include "coordinator/round_driver.h"
#include "coordinator/sharded_driver.h"
#include "coordinator/star_driver.h"
#include "proto/localsgd/v1/averaging.pb.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The round the round manager has open: what its driver sees of it, who was expected and who
// sits it out, the model bytes it moved, and the driver of the run's exchange mode.
struct OpenRound {
  // Round `info`, which the live leaders `suspended` (id, why) sit out.
  OpenRound(RoundContext::Round info, std::vector<std::pair<std::string, std::string>> suspended)
      : info(std::move(info)), suspended(std::move(suspended)) {}
  // Gives it the driver of `spec`'s exchange mode over the live leaders `leaders` (the members
  // it expects), acting through `context`; call once context->round() is this round's info.
  void Drive(const v1::RunSpec& spec, const std::vector<ControlPlane::Leader>& leaders,
             RoundContext* context);

  // Its record as it ends now, with `outcome`, the run's model at `global_step`.
  v1::RoundRecord Record(v1::RoundOutcome outcome, const v1::RunSpec& spec, int64_t global_step,
                         absl::Time now) const;

  // An admitted header entered the round: its member's share of the update.
  void Share(const v1::SyncHeader& header, const v1::RunSpec& spec);

  RoundContext::Round info;
  std::vector<std::string> members;                            // the leaders expected
  std::vector<v1::MemberShare> shares;                         // by arrival
  std::vector<std::pair<std::string, std::string>> suspended;  // live leaders left out: why
  int64_t bytes_received = 0;
  int64_t bytes_sent = 0;
  // A live leader was refused for carrying another fragment (excused): the nodes are moving
  // back into phase, and an abort of such a round is no storm (RoundBackoff does not count it).
  bool out_of_phase = false;
  // The mode's driver, and the same as the mode's class (the other null).
  std::unique_ptr<RoundDriver> driver;
  StarDriver* star = nullptr;
  ShardedDriver* sharded = nullptr;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_OPEN_ROUND_H_
