#ifndef LOCALSGD_EXCHANGE_RING_PLAN_H_
#define LOCALSGD_EXCHANGE_RING_PLAN_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "exchange/chunking.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// What one member of a ring round expects and sends (docs/design.md, "Ring rounds"), with no
// network: member `self` of N owns range `self`, gets from pred (self - 1) the running sums
// of every range but pred's and the means of every range but its own, and sends succ
// (self + 1) the sums of every range but its own and the means of every range but succ's (its
// own first of all, as each of its sums completes). Its own chain, pred's range, starts here.
// Thread-compatible: Accept is the reader's.
class RingPlan {
 public:
  // A ring layout (MemberRound::Open checked it) of `layout`, seen from slot `self`; sums and
  // means travel in the header's codec.
  RingPlan(const v1::RoundHeader& header, const ChunkLayout& layout, int self);

  // How many chunks of its chain a member starts more than 1 / (N - 1) of the sums that came
  // from pred ("Ring rounds", the schedule). Enough to keep a link busy over its round trip: 4
  // left 200-400 Mbit/s links with a 100 ms round trip idle half the time.
  static constexpr int kChainLead = 16;

  int self() const { return self_; }
  int pred() const { return pred_; }
  int succ() const { return succ_; }
  // This member's weight and 1 / the total weight (a complete sum times it is the mean).
  float weight() const { return weight_; }
  float inverse_total() const { return inverse_total_; }
  // Messages from pred and to succ in the whole round.
  int expected_in() const { return expected_in_; }
  int expected_out() const { return expected_out_; }
  // The chunks of pred's range: the chain that starts here.
  int chain_begin() const { return chain_begin_; }
  int chain_end() const { return chain_end_; }
  // Whether chunk `next` of the chain may start once `sums_in` sums came from pred.
  bool MayStartChain(int next, int sums_in) const;
  // What to do with a message from pred.
  enum class Action {
    kTakeMean,         // take it into the update; pass it on when `passes_on`
    kAddAndPass,       // add this member's delta and send the sum to succ
    kCompleteAverage,  // this member's own range: add its delta, the sum is complete
  };
  struct Accepted {
    Action action;
    int range = 0;
    bool passes_on = false;  // kTakeMean: succ does not own the range
  };
  // Message `field` (PassRequest's sum or mean) of chunk `c`, `bytes` long. INVALID_ARGUMENT
  // for what the ring does not send: neither field, a chunk outside the vector, a mean of this
  // member's range, a sum of pred's range or a second sum of a chunk, a sum whose
  // size is not the chunk's in the round's codec.
  absl::StatusOr<Accepted> Accept(int field, int c, size_t bytes);

 private:
  const ChunkLayout layout_;
  const v1::Codec codec_;  // how sums travel
  const int self_;
  int pred_ = 0, succ_ = 0, others_ = 0;
  float weight_ = 0, inverse_total_ = 0;
  std::vector<int> range_of_;  // by chunk
  int expected_in_ = 0, expected_out_ = 0;
  int chain_begin_ = 0, chain_end_ = 0;
  std::vector<bool> sums_seen_;  // by chunk
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_RING_PLAN_H_
