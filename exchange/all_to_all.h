#ifndef LOCALSGD_EXCHANGE_ALL_TO_ALL_H_
#define LOCALSGD_EXCHANGE_ALL_TO_ALL_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "exchange/member_round.h"
#include "exchange/owner_link.h"
#include "exchange/range_schedule.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// The all-to-all schedule of a sharded round (docs/design.md, "Sharded rounds"): one exchange
// per range with its owner, each on a thread of its own, over the link the caller made for it
// (in process for this member's own range); each owner's stream brings back its range's
// means. Thread-safe.
class AllToAll : public RangeSchedule {
 public:
  struct Setup {
    const MemberRound* round = nullptr;
    // By range: names this member and the attempt, tagged for the range's owner.
    std::vector<v1::ReduceHeader> headers;
    std::vector<std::unique_ptr<OwnerLink>> links;  // by range
    OwnerLink::Encode encode;
    // Takes averaged chunk `mean` of range `s` into the member's update.
    std::function<absl::Status(int s, const v1::Chunk& mean)> take;
    // The exchange with `owner_id` failed: the coordinator must abort the round.
    std::function<void(const std::string& owner_id, const absl::Status& why)> unreachable;
  };

  explicit AllToAll(Setup setup);
  ~AllToAll() override;
  AllToAll(const AllToAll&) = delete;
  AllToAll& operator=(const AllToAll&) = delete;

  absl::Status Stop(bool committed) override;

 private:
  absl::Status Run(int s);

  Setup setup_;
  std::vector<absl::Status> status_;  // by range; each its thread's until Stop joins it
  std::vector<std::thread> threads_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_ALL_TO_ALL_H_
