#ifndef LOCALSGD_COMMON_CONTROL_CLIENT_H_
#define LOCALSGD_COMMON_CONTROL_CLIENT_H_

#include <grpcpp/channel.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

namespace localsgd {

// The coordinator's operator API (docs/reference.md, "gRPC API"): start and stop runs, read
// the status and the runs, watch the status. Starting and stopping need the bearer token;
// reads do not. Errors are the coordinator's (e.g. FAILED_PRECONDITION: another run is
// active). Thread-compatible.
class ControlClient {
 public:
  ControlClient(std::shared_ptr<grpc::Channel> channel, std::string token,
                absl::Duration timeout = absl::Seconds(10));

  absl::StatusOr<v1::RunInfo> Start(const v1::RunSpec& spec);
  // Stops `run_id` (empty: the active run).
  absl::StatusOr<v1::RunInfo> Stop(const std::string& run_id, const std::string& reason);
  absl::StatusOr<v1::CoordinatorStatus> Status();
  absl::StatusOr<v1::ListRunsResponse> Runs();
  // Calls `on_status` with the status at once and then at most every `interval` while it
  // changes, until `on_status` returns false or the coordinator ends the stream.
  absl::Status Watch(absl::Duration interval,
                     const std::function<bool(const v1::CoordinatorStatus&)>& on_status);

 private:
  std::unique_ptr<grpc::ClientContext> Context(bool authenticated) const;

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  const std::string token_;
  const absl::Duration timeout_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_CONTROL_CLIENT_H_
