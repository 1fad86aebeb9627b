#ifndef LOCALSGD_EXCHANGE_RANGE_SCHEDULE_H_
#define LOCALSGD_EXCHANGE_RANGE_SCHEDULE_H_

#include "absl/status/status.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// How a member of a sharded round moves its delta to the ranges' owners and gets their means
// back (docs/design.md, "Sharded rounds", "Ring rounds"): all-to-all (AllToAll) or a ring
// (RingMember). The RoundHeader picks one per round; ShardedExchange runs it between the
// layout and the commit. It starts on construction; errors name the peer to the coordinator
// as they happen.
class RangeSchedule {
 public:
  virtual ~RangeSchedule() = default;
  // The round is over (`committed` or not): ends the streams and waits for the threads.
  // Returns the first failure of an exchange with a peer (not a cancellation), OK if none.
  virtual absl::Status Stop(bool committed) = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_RANGE_SCHEDULE_H_
