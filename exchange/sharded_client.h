#ifndef LOCALSGD_EXCHANGE_SHARDED_CLIENT_H_
#define LOCALSGD_EXCHANGE_SHARDED_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "exchange/outer_step.h"
#include "exchange/ring_inbox.h"
#include "exchange/shard_owner.h"
#include "exchange/star_client.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// A node leader's side of a sharded round (docs/design.md, "Sharded rounds"), on flat float
// vectors (no LibTorch). Per round: the header to the coordinator; the layout back; as an
// owner, the range installed in this node's ShardOwner, whose averaged chunks an uploader
// thread sends to the coordinator; one Reduce stream per owner carrying this member's delta
// for that owner's range while the averaged chunks come back (in a ring round instead, a
// RingMember passing sums and means to the next leader); "delivered" once every chunk is
// here; and only on the coordinator's commit, the outer step applied to global (and momentum)
// with exactly the arithmetic every other copy uses.
// Thread-compatible: one Sync at a time.
class ShardedClient {
 public:
  struct Options {
    // The coordinator (its Averaging service).
    std::shared_ptr<grpc::Channel> coordinator;
    std::string token;
    // For the owners' data planes (the same TLS as for the coordinator).
    std::shared_ptr<grpc::ChannelCredentials> peer_credentials;
    // This node's data plane; null when it serves none (it then owns no range).
    ShardOwner* owner = nullptr;
    // This node's ring inbox (the same data plane's); null when it serves none.
    RingInbox* inbox = nullptr;
  };

  explicit ShardedClient(Options options);

  // One round. On commit `global` becomes global[r] and `momentum` (empty without outer
  // momentum) advances; on any error both are unchanged. A stale round's error carries the
  // StaleRound (StaleRoundOf); ABORTED: the round ended without an update (keep the local
  // weights and sync at the next boundary).
  absl::StatusOr<StarClient::SyncResult> Sync(const StarClient::Member& member,
                                              const OuterOptimizer& outer, int64_t round,
                                              int64_t step, absl::Span<const float> params,
                                              absl::Span<float> global, absl::Span<float> momentum,
                                              absl::Duration timeout);

 private:
  std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address);

  const Options options_;
  std::unique_ptr<v1::Averaging::Stub> stub_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_SHARDED_CLIENT_H_
