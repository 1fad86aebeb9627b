#ifndef LOCALSGD_COORDINATOR_COORDINATOR_SERVER_H_
#define LOCALSGD_COORDINATOR_COORDINATOR_SERVER_H_

#include <grpcpp/server.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/tls.h"
#include "coordinator/averaging_service.h"
#include "coordinator/control_plane.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/http_server.h"
#include "coordinator/round_manager.h"
#include "coordinator/state_writer.h"
#include "coordinator/status_watch.h"

namespace localsgd {

// A running coordinator: the gRPC server (Coordinator and Averaging services, gRPC health
// checking and server reflection), the HTTP status endpoint (/, /status, /metrics, /healthz) and
// the threads that expire leases and check round deadlines, and the state writer. Thread-safe.
class CoordinatorServer {
 public:
  struct Options {
    // HOST:PORT for gRPC; port 0 picks a free port (see grpc_address()).
    std::string grpc_address = "127.0.0.1:50051";
    // HOST:PORT for the HTTP status endpoint; empty serves none.
    std::string http_address = "127.0.0.1:8080";
    // Bearer token for Join/Heartbeat/Leave/StartRun/StopRun; empty turns auth off.
    std::string token;
    // Binds node names to keys (ControlPlane::Options::node_key_secret); empty: none.
    std::string node_key_secret;
    // Where the run record is kept; empty keeps nothing.
    std::string state_dir;
    // The share of time the state folder's model.bin may take (StateWriter::Options).
    double model_save_share = 0.05;
    // TLS (and mutual TLS) on the gRPC port; no certificate: plaintext.
    ServerTls tls;
    absl::Duration lease_timeout = absl::Seconds(15);
    absl::Duration heartbeat_interval = absl::Seconds(3);
    std::function<absl::Time()> clock = [] { return absl::Now(); };
    // Testing: called on a state writer thread before each write (a slow disk).
    std::function<void(const std::string& file)> before_state_write;
  };

  // Binds both ports and starts serving. Errors name the flag that is wrong.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(Options options);

  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // The bound addresses, with the real ports.
  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& http_address() const { return http_address_; }

  ControlPlane* control_plane() { return plane_.get(); }
  RoundManager* round_manager() { return rounds_.get(); }

  // Refuses new joins, reports NOT_SERVING, ends status streams, and stops both servers,
  // giving calls in flight `grace` to finish. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  CoordinatorServer() = default;
  // Runs `tick` every `interval` until Shutdown.
  void TickLoop(absl::Duration interval, const std::function<void()>& tick);

  // Outlives everything that queues for it (the plane and the round manager).
  std::unique_ptr<StateWriter> state_;
  std::unique_ptr<ControlPlane> plane_;
  std::unique_ptr<StatusWatchHub> watchers_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<RoundManager> rounds_;
  std::unique_ptr<AveragingService> averaging_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<HttpServer> http_server_;
  std::string grpc_address_;
  std::string http_address_;
  absl::Notification stop_ticking_;
  // Leases and the run's timeouts on one thread, rounds on another: lease expiry never waits
  // behind round work.
  std::thread plane_ticker_;
  std::thread round_ticker_;
  Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_COORDINATOR_SERVER_H_
