#ifndef LOCALSGD_WORKER_COORDINATOR_CLIENT_H_
#define LOCALSGD_WORKER_COORDINATOR_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

namespace localsgd {

// A worker's membership (no LibTorch): joins with exponential backoff while the coordinator is
// unreachable, heartbeats in the background with the latest progress, rejoins when its lease
// was lost, and leaves. Thread-safe.
class CoordinatorClient {
 public:
  struct Options {
    std::string address;
    // Plaintext, TLS or mutual TLS (common/tls.h).
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    std::string token;
    v1::WorkerIdentity identity;
    std::string node_key;  // JoinRequest.node_key
    std::string hostname;
    // Node leaders: where they serve the sharded data plane (JoinRequest.data_address).
    std::string data_address;
    // How long to keep retrying an unreachable coordinator before giving up.
    absl::Duration connect_timeout = absl::Minutes(5);
    // Connect gives up (CANCELLED) once this returns true, e.g. on Ctrl-C; looked at every
    // 100 ms while it waits to retry.
    std::function<bool()> stop;
  };

  // Joins (retrying with backoff on UNAVAILABLE) and starts heartbeating.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(Options options);
  ~CoordinatorClient();

  // Waits until the coordinator reports a RUNNING run (or `stop` returns true: CANCELLED).
  absl::StatusOr<v1::RunInfo> WaitForRun(const std::function<bool()>& stop);

  // Progress for the next heartbeats.
  void Report(int64_t step, double loss, double samples_per_second, bool finished,
              double test_accuracy);
  // The steps this worker trains in all, for the next heartbeats (the run's progress).
  void ReportTotalSteps(int64_t total_steps);
  // HeartbeatRequest.unsynced_steps (LocalSGD::unsynced_steps) at optimizer step `step`: the
  // next heartbeat sends the most reported since the last one.
  void ReportUnsynced(int64_t step, int64_t unsynced_steps);
  // The newest checkpoint this worker's node wrote, for the next heartbeats.
  void ReportCheckpoint(const v1::CheckpointInfo& checkpoint);
  // Where this worker saved the trained model, for the next heartbeats.
  void ReportModelPath(const std::string& path);

  // Leads this worker's node from now on: joins again with JoinRequest.node_leader (and so
  // every later re-join), serving the sharded data plane at `data_address` (empty: none).
  // `replaces`: the worker id of the node's leader that died, or empty.
  absl::Status ClaimNodeLead(const std::string& replaces, const std::string& data_address);

  // Sends a heartbeat now (e.g. the final report before leaving).
  absl::Status Flush() { return Beat(); }

  // The run as of the latest heartbeat.
  v1::RunInfo run() const;

  // How a worker leaves (LeaveRequest): done (its training finished, or the run ended or was
  // stopped first), preempted (stopped from outside before training was done: it is expected
  // back), or failed (on an error, which `reason` says).
  enum class Departure { kDone, kPreempted, kFailed };
  // Stops heartbeating and leaves. Idempotent.
  absl::Status Leave(const std::string& reason, Departure departure = Departure::kDone);

  std::string worker_id() const {
    MutexLock lock(&mu_);
    return worker_id_;
  }
  // The credential of this worker's latest Join (JoinResponse.member_credential): every call
  // in its name carries it, and it changes when the worker joins again.
  std::string member_credential() const {
    MutexLock lock(&mu_);
    return credential_;
  }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  const std::string& token() const { return options_.token; }

 private:
  explicit CoordinatorClient(Options options);
  absl::Status Join(absl::Duration deadline = absl::Seconds(10));
  // Sends the latest progress. One heartbeat at a time (beat_mu_): the coordinator keeps what
  // arrives last, so a periodic beat must not overtake the final report (Flush).
  absl::Status Beat() ABSL_LOCKS_EXCLUDED(beat_mu_);
  void HeartbeatLoop();
  std::unique_ptr<grpc::ClientContext> Context() const;

  Options options_;  // data_address changes under mu_ (ClaimNodeLead)
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  Mutex beat_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::string credential_ ABSL_GUARDED_BY(mu_);
  absl::Duration interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(3);
  v1::HeartbeatRequest progress_ ABSL_GUARDED_BY(mu_);
  // The most unsynced steps reported since the last heartbeat that got through, so that the
  // coordinator sees a wait that ended between two heartbeats.
  int64_t peak_unsynced_ ABSL_GUARDED_BY(mu_) = 0;
  v1::RunInfo run_ ABSL_GUARDED_BY(mu_);
  bool left_ ABSL_GUARDED_BY(mu_) = false;
  bool node_leader_ ABSL_GUARDED_BY(mu_) = false;
  std::string replaces_ ABSL_GUARDED_BY(mu_);        // sent with the next Join only
  bool claim_pending_ ABSL_GUARDED_BY(mu_) = false;  // the claim's Join did not get through

  absl::Notification stop_;
  std::thread heartbeat_;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_COORDINATOR_CLIENT_H_
