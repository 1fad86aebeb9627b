#ifndef LOCALSGD_COMMON_CONTROL_CLIENT_H_
#define LOCALSGD_COMMON_CONTROL_CLIENT_H_

#include <grpcpp/channel.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

namespace localsgd {

// The coordinator's operator API (docs/reference.md, "gRPC API"): start and stop runs, read
// the status and the runs, watch the status. Starting and stopping need the bearer token;
// reads do not. Errors are the coordinator's (e.g. FAILED_PRECONDITION: another run is
// active). Thread-compatible, but for CancelWatch, which any thread may call.
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
  // changes, until `on_status` returns false, CancelWatch(`watch_id`) is called (both: OK) or
  // the coordinator ends the stream.
  absl::Status Watch(absl::Duration interval,
                     const std::function<bool(const v1::CoordinatorStatus&)>& on_status,
                     int64_t watch_id = 0);
  // Ends the Watch of `watch_id` now rather than at its next status, which may never come
  // once the run ended (a caller leaving must not leave it blocked in gRPC); one not begun
  // yet ends at its first status.
  void CancelWatch(int64_t watch_id);

 private:
  std::unique_ptr<grpc::ClientContext> Context(bool authenticated) const;

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  Mutex watches_mu_;
  // Watches in flight by id, and ids cancelled before their Watch began.
  std::map<int64_t, grpc::ClientContext*> watches_ ABSL_GUARDED_BY(watches_mu_);
  std::set<int64_t> cancelled_ ABSL_GUARDED_BY(watches_mu_);
  const std::string token_;
  const absl::Duration timeout_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_CONTROL_CLIENT_H_
