#ifndef LOCALSGD_COORDINATOR_COORDINATOR_SERVICE_H_
#define LOCALSGD_COORDINATOR_COORDINATOR_SERVICE_H_

#include <string>

#include "absl/status/status.h"
#include "coordinator/control_plane.h"
#include "coordinator/round_manager.h"
#include "coordinator/status_watch.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

namespace localsgd {

// The Coordinator gRPC service (callback API): checks the bearer token where the API asks
// for one, hands the request to the ControlPlane (StopRun to the RoundManager, which closes
// the open round first) and maps its Status to gRPC.
// Thread-safe; the plane, round manager and hub must outlive it.
class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(ControlPlane* plane, RoundManager* rounds, StatusWatchHub* watchers,
                     std::string token);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const v1::JoinRequest* request,
                                 v1::JoinResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* StartRun(grpc::CallbackServerContext* context,
                                     const v1::StartRunRequest* request,
                                     v1::StartRunResponse* response) override;
  grpc::ServerUnaryReactor* StopRun(grpc::CallbackServerContext* context,
                                    const v1::StopRunRequest* request,
                                    v1::StopRunResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::CoordinatorStatus* response) override;
  grpc::ServerUnaryReactor* ListRuns(grpc::CallbackServerContext* context,
                                     const v1::ListRunsRequest* request,
                                     v1::ListRunsResponse* response) override;
  grpc::ServerUnaryReactor* GetRunSeries(grpc::CallbackServerContext* context,
                                         const v1::GetRunSeriesRequest* request,
                                         v1::RunSeries* response) override;
  grpc::ServerWriteReactor<v1::CoordinatorStatus>* WatchStatus(
      grpc::CallbackServerContext* context, const v1::WatchStatusRequest* request) override;

 private:
  // Finishes a unary call: runs `body` when the token check (if `authenticated`) passes.
  template <typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, bool authenticated,
                                  Body body);

  ControlPlane* const plane_;
  RoundManager* const rounds_;
  StatusWatchHub* const watchers_;
  const std::string token_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_COORDINATOR_SERVICE_H_
