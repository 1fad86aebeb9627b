#include "coordinator/coordinator_service.h"

#include <cmath>
#include <utility>

#include "common/address.h"
#include "common/auth.h"
#include "common/status_macros.h"
#include "common/status_util.h"

namespace localsgd {
namespace {

constexpr double kDefaultWatchIntervalSeconds = 0.2;
constexpr double kMaxWatchIntervalSeconds = 3600;

// A WatchStatus stream refused before its first write.
class RefusedWatch : public grpc::ServerWriteReactor<v1::CoordinatorStatus> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

CoordinatorService::CoordinatorService(ControlPlane* plane, RoundManager* rounds,
                                       StatusWatchHub* watchers, std::string token)
    : plane_(plane), rounds_(rounds), watchers_(watchers), token_(std::move(token)) {}

template <typename Body>
grpc::ServerUnaryReactor* CoordinatorService::Unary(grpc::CallbackServerContext* context,
                                                    bool authenticated, Body body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status =
      authenticated ? CheckBearerToken(context->client_metadata(), token_) : absl::OkStatus();
  if (status.ok()) status = body();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* context,
                                                   const v1::JoinRequest* request,
                                                   v1::JoinResponse* response) {
  return Unary(context, true, [&]() -> absl::Status {
    // A wildcard host in the advertised data plane is where this call came from.
    v1::JoinRequest resolved = *request;
    LOCALSGD_ASSIGN_OR_RETURN(
        std::string data_address,
        ResolveAdvertisedAddress(request->data_address(), context->peer(), "data_address"));
    resolved.set_data_address(data_address);
    absl::StatusOr<v1::JoinResponse> joined = plane_->Join(resolved);
    if (joined.ok()) *response = *std::move(joined);
    return joined.status();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* context,
                                                        const v1::HeartbeatRequest* request,
                                                        v1::HeartbeatResponse* response) {
  return Unary(context, true, [&] {
    absl::StatusOr<v1::HeartbeatResponse> beat = plane_->Heartbeat(*request);
    if (beat.ok()) *response = *std::move(beat);
    return beat.status();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::Leave(grpc::CallbackServerContext* context,
                                                    const v1::LeaveRequest* request,
                                                    v1::LeaveResponse*) {
  return Unary(context, true, [&] { return plane_->Leave(*request); });
}

grpc::ServerUnaryReactor* CoordinatorService::StartRun(grpc::CallbackServerContext* context,
                                                       const v1::StartRunRequest* request,
                                                       v1::StartRunResponse* response) {
  return Unary(context, true, [&] {
    absl::StatusOr<v1::RunInfo> run = plane_->StartRun(*request);
    if (run.ok()) *response->mutable_run() = *std::move(run);
    return run.status();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::StopRun(grpc::CallbackServerContext* context,
                                                      const v1::StopRunRequest* request,
                                                      v1::StopRunResponse* response) {
  return Unary(context, true, [&] {
    absl::StatusOr<v1::RunInfo> run = rounds_->StopRun(*request);
    if (run.ok()) *response->mutable_run() = *std::move(run);
    return run.status();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetStatus(grpc::CallbackServerContext* context,
                                                        const v1::GetStatusRequest*,
                                                        v1::CoordinatorStatus* response) {
  return Unary(context, false, [&] {
    *response = plane_->Status();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListRuns(grpc::CallbackServerContext* context,
                                                       const v1::ListRunsRequest*,
                                                       v1::ListRunsResponse* response) {
  return Unary(context, false, [&] {
    for (v1::RunInfo& run : plane_->ListRuns()) *response->add_runs() = std::move(run);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetRunSeries(grpc::CallbackServerContext* context,
                                                           const v1::GetRunSeriesRequest* request,
                                                           v1::RunSeries* response) {
  return Unary(context, false, [&] {
    absl::StatusOr<v1::RunSeries> series = plane_->Series(request->run_id());
    if (series.ok()) *response = *std::move(series);
    return series.status();
  });
}

grpc::ServerWriteReactor<v1::CoordinatorStatus>* CoordinatorService::WatchStatus(
    grpc::CallbackServerContext*, const v1::WatchStatusRequest* request) {
  double interval = request->min_interval_seconds();
  if (!std::isfinite(interval) || interval < 0 || interval > kMaxWatchIntervalSeconds) {
    return new RefusedWatch(
        ToGrpcStatus(absl::InvalidArgumentError("min_interval_seconds: must be in [0, 3600]")));
  }
  if (interval == 0) interval = kDefaultWatchIntervalSeconds;
  return watchers_->Add(absl::Seconds(interval));
}

}  // namespace localsgd
