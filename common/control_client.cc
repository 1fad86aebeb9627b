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
    absl::Duration interval, const std::function<bool(const v1::CoordinatorStatus&)>& on_status,
    int64_t watch_id) {
  v1::WatchStatusRequest request;
  request.set_min_interval_seconds(absl::ToDoubleSeconds(interval));
  grpc::ClientContext context;  // no deadline: until on_status says stop
  {
    MutexLock lock(&watches_mu_);
    if (cancelled_.erase(watch_id) > 0) return absl::OkStatus();
    watches_[watch_id] = &context;
  }
  auto reader = stub_->WatchStatus(&context, request);
  v1::CoordinatorStatus status;
  bool stopped = false;
  while (!stopped && reader->Read(&status)) {
    if (!on_status(status)) {
      context.TryCancel();
      stopped = true;
      while (reader->Read(&status)) {
      }
    }
  }
  const grpc::Status finished = reader->Finish();
  bool cancelled;
  {
    MutexLock lock(&watches_mu_);
    watches_.erase(watch_id);
    cancelled = cancelled_.erase(watch_id) > 0;
  }
  if (stopped || cancelled) return absl::OkStatus();
  return FromGrpcStatus(finished);
}

void ControlClient::CancelWatch(int64_t watch_id) {
  MutexLock lock(&watches_mu_);
  cancelled_.insert(watch_id);
  if (auto it = watches_.find(watch_id); it != watches_.end()) it->second->TryCancel();
}

}  // namespace localsgd
