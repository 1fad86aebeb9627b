#ifndef LOCALSGD_EXCHANGE_STAR_EXCHANGE_H_
#define LOCALSGD_EXCHANGE_STAR_EXCHANGE_H_

#include <grpcpp/channel.h>

#include <memory>
#include <string>
#include <vector>

#include "exchange/exchange.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// The star round (docs/design.md, "Star rounds"): the member streams its encoded delta to the
// coordinator chunk by chunk while it reads the update chunks, and on the commit adds the
// update to global. The outer step is the coordinator's, so no momentum here.
class StarExchange : public Exchange {
 public:
  StarExchange(std::shared_ptr<grpc::Channel> channel, std::string token);

  absl::StatusOr<ExchangeResult> Run(const SyncMember& member, const ExchangeRound& round) override;
  bool keeps_momentum() const override { return false; }

 private:
  std::unique_ptr<v1::Averaging::Stub> stub_;
  const std::string token_;
  std::vector<float> update_;  // the decoded update until the commit; sized on the first round
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_STAR_EXCHANGE_H_
