#include "common/control_client.h"

#include <utility>

#include "common/auth.h"
#include "common/status_util.h"

namespace localsgd {

ControlClient::ControlClient(std::shared_ptr<grpc::Channel> channel, std::string token,
                             absl::Duration timeout)
    : stub_(v1::Coordinator::NewStub(std::move(channel))),
      token_(std::move(token)),
      timeout_(timeout) {}

std::unique_ptr<grpc::ClientContext> ControlClient::Context(bool authenticated) const {
  return AuthorizedContext(authenticated ? token_ : "", timeout_);
}

absl::StatusOr<v1::RunInfo> ControlClient::Start(const v1::RunSpec& spec) {
  v1::StartRunRequest request;
  *request.mutable_spec() = spec;
  v1::StartRunResponse response;
  grpc::Status status = stub_->StartRun(Context(true).get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.run();
}

absl::StatusOr<v1::RunInfo> ControlClient::Stop(const std::string& run_id,
                                                const std::string& reason) {
  v1::StopRunRequest request;
  request.set_run_id(run_id);
  request.set_reason(reason);
  v1::StopRunResponse response;
  grpc::Status status = stub_->StopRun(Context(true).get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.run();
}

absl::StatusOr<v1::CoordinatorStatus> ControlClient::Status() {
  v1::CoordinatorStatus response;
  grpc::Status status = stub_->GetStatus(Context(false).get(), v1::GetStatusRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::ListRunsResponse> ControlClient::Runs() {
  v1::ListRunsResponse response;
  grpc::Status status = stub_->ListRuns(Context(false).get(), v1::ListRunsRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status ControlClient::Watch(
    absl::Duration interval, const std::function<bool(const v1::CoordinatorStatus&)>& on_status) {
  v1::WatchStatusRequest request;
  request.set_min_interval_seconds(absl::ToDoubleSeconds(interval));
  grpc::ClientContext context;  // no deadline: until on_status says stop
  auto reader = stub_->WatchStatus(&context, request);
  v1::CoordinatorStatus status;
  while (reader->Read(&status)) {
    if (!on_status(status)) {
      context.TryCancel();
      while (reader->Read(&status)) {
      }
      reader->Finish().ok();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader->Finish());
}

}  // namespace localsgd
