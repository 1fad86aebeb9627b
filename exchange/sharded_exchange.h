#ifndef LOCALSGD_EXCHANGE_SHARDED_EXCHANGE_H_
#define LOCALSGD_EXCHANGE_SHARDED_EXCHANGE_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "exchange/exchange.h"
#include "exchange/model_digest.h"
#include "exchange/outer_step.h"
#include "exchange/ring_inbox.h"
#include "exchange/shard_owner.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// The sharded round (docs/design.md, "Sharded rounds"): the header to the coordinator and the
// layout back (MemberRound); as an owner, the range installed in this node's ShardOwner; the
// deltas and means moved by the round's RangeSchedule (AllToAll, or RingMember when the layout
// is a ring); "delivered" with the digests of the next copy (RoundUploader) once every chunk is
// here; and only on the coordinator's commit, the outer step applied to global and momentum
// with exactly the arithmetic every other copy uses. A commit this member delivered for but
// never heard of (its stream broke after the delivery) is applied when a later header for that
// round is answered with it as committed and the coordinator's digest of it is the one this
// member would have (docs/design.md, "Where the model lives").
class ShardedExchange : public Exchange {
 public:
  struct Options {
    // The coordinator (its Averaging service).
    std::shared_ptr<grpc::Channel> coordinator;
    std::string token;
    // For the owners' data planes (the same TLS as for the coordinator).
    std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
    // This node's data plane's owner and ring inbox; null when it serves none (it then owns
    // no range and joins no ring).
    ShardOwner* owner = nullptr;
    RingInbox* inbox = nullptr;
    // The run's outer optimizer, which every member applies.
    OuterOptimizer outer;
    // The run's robust aggregation, which this node's owner applies to its ranges
    // (RunSpec.max_delta_norm_ratio, trimmed_mean_fraction).
    double max_norm_ratio = 0;
    double trim_fraction = 0;
  };

  explicit ShardedExchange(Options options);

  absl::StatusOr<ExchangeResult> Run(const SyncMember& member, const ExchangeRound& round) override;
  bool keeps_momentum() const override { return options_.outer.momentum != 0; }

 private:
  // The channel to the data plane at `address` (kept); `connection` > 0: another TCP
  // connection to it (a ring's stripes).
  std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address, int connection = 0);
  // When `refused` (the answer to this member's header for round `unheard_`) says that round
  // committed and the coordinator's digest of it is the one delivered: applies the update still
  // in averaged_ to its fragment and returns the round's result, or nullopt when this header
  // is another fragment's (the refusal stands: the node holds the run's model now). nullopt
  // otherwise too (the caller goes on as for any refusal); unheard_ is kept while the answers
  // say nothing of the round.
  std::optional<ExchangeResult> HearCommit(const SyncMember& member, const ExchangeRound& in,
                                           const absl::Status& refused);

  const Options options_;
  std::unique_ptr<v1::Averaging::Stub> stub_;
  // The averaged update: filled in a round, applied at its commit (after the round while
  // unheard_). Allocated once, not per round: a fresh model-sized buffer is zeroed and faulted
  // in while the round runs (docs/design.md, "Where the model lives").
  std::vector<float> averaged_;
  // A round whose update is in averaged_, delivered, its outcome not heard.
  struct Unheard {
    std::string run_id;
    int64_t round = 0;
    int fragment = 0;
    int64_t offset = 0;  // where the fragment begins in the held model (ExchangeRound.offset)
    DigestPair digest;   // of the whole model it would make
  };
  std::optional<Unheard> unheard_;
  Mutex mu_;
  std::map<std::pair<std::string, int>, std::shared_ptr<grpc::Channel>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_SHARDED_EXCHANGE_H_
