#ifndef LOCALSGD_EXCHANGE_OWNER_LINK_H_
#define LOCALSGD_EXCHANGE_OWNER_LINK_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "exchange/shard_owner.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// One member's exchange with the owner of one range of a sharded round: the member's delta
// chunks for the range go out while the averaged chunks come back. Over gRPC (GrpcOwnerLink,
// DataPlane.Reduce) or, for the member's own range, in process (LocalOwnerLink).
class OwnerLink {
 public:
  // Writes the member's delta chunk `c` into `out`.
  using Encode = std::function<void(int c, v1::Chunk* out)>;
  // Takes one averaged chunk; an error ends the exchange with it.
  using Take = std::function<absl::Status(const v1::Chunk& mean)>;

  virtual ~OwnerLink() = default;
  // Sends chunks [begin, end) under `header` and hands each averaged chunk to `take` until
  // the owner ends the stream. Returns why it ended: OK, `take`'s error, or the owner's.
  virtual absl::Status Exchange(const v1::ReduceHeader& header, int begin, int end,
                                const Encode& encode, const Take& take) = 0;
  // Ends Exchange early, from another thread (the round is over).
  virtual void Cancel() = 0;
};

// To an owner's DataPlane.Reduce over `channel`, under `context` (its deadline and token).
// Errors name the owner and its address.
class GrpcOwnerLink : public OwnerLink {
 public:
  GrpcOwnerLink(std::shared_ptr<grpc::Channel> channel,
                std::unique_ptr<grpc::ClientContext> context, std::string owner_id,
                std::string address);
  absl::Status Exchange(const v1::ReduceHeader& header, int begin, int end, const Encode& encode,
                        const Take& take) override;
  void Cancel() override;

 private:
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<grpc::ClientContext> context_;
  const std::string owner_id_, address_;
};

// To this node's own ShardOwner: no serialisation, no socket.
class LocalOwnerLink : public OwnerLink {
 public:
  explicit LocalOwnerLink(ShardOwner* owner);
  absl::Status Exchange(const v1::ReduceHeader& header, int begin, int end, const Encode& encode,
                        const Take& take) override;
  void Cancel() override;

 private:
  class Stream;
  ShardOwner* const owner_;
  const std::shared_ptr<Stream> stream_;
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_OWNER_LINK_H_
