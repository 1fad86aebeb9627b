#ifndef LOCALSGD_COORDINATOR_AVERAGING_SERVICE_H_
#define LOCALSGD_COORDINATOR_AVERAGING_SERVICE_H_

#include <string>

#include "coordinator/round_manager.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {

// The Averaging gRPC service (callback API) over the RoundManager: one reactor per Sync,
// InitModel and FetchModel stream. Reactors never block; their writes go through a
// StreamOutbox. Thread-safe; the round manager must outlive it.
class AveragingService final : public v1::Averaging::CallbackService {
 public:
  AveragingService(RoundManager* rounds, std::string token);

  grpc::ServerBidiReactor<v1::SyncRequest, v1::SyncResponse>* Sync(
      grpc::CallbackServerContext* context) override;
  grpc::ServerReadReactor<v1::InitModelRequest>* InitModel(
      grpc::CallbackServerContext* context, v1::InitModelResponse* response) override;
  grpc::ServerWriteReactor<v1::FetchModelResponse>* FetchModel(
      grpc::CallbackServerContext* context, const v1::FetchModelRequest* request) override;

 private:
  RoundManager* const rounds_;
  const std::string token_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_AVERAGING_SERVICE_H_
