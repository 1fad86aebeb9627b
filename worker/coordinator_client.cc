#include "worker/coordinator_client.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_channel.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "common/status_util.h"

namespace localsgd {
CoordinatorClient::CoordinatorClient(Options options)
    : options_(std::move(options)),
      channel_(CreateStreamingChannel(options_.address, options_.credentials)),
      stub_(v1::Coordinator::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::Context() const {
  return AuthorizedContext(options_.token, absl::Seconds(10));
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(Options options) {
  std::unique_ptr<CoordinatorClient> client(new CoordinatorClient(std::move(options)));
  const std::function<bool()>& stop = client->options_.stop;
  RetryPolicy policy;
  policy.backoff = absl::Milliseconds(100);
  policy.max_backoff = absl::Seconds(10);
  policy.budget = client->options_.connect_timeout;
  policy.stop = stop;
  // Short attempts, so that a stop is seen soon even when connecting hangs.
  const absl::Status joined = Retry(
      policy, [&] { return client->Join(absl::Seconds(3)); },
      [&](const absl::Status& why, int, absl::Duration pause) {
        LogWarning(absl::StrCat("coordinator ", client->options_.address, " unreachable (",
                                why.message(), "); retrying in ", absl::FormatDuration(pause)));
      });
  if (!joined.ok() && stop != nullptr && stop()) {
    return absl::CancelledError("stopped while connecting to the coordinator");
  }
  if (!joined.ok()) {
    return absl::Status(joined.code(), absl::StrCat("join ", client->options_.address, ": ",
                                                    joined.message(), ConnectionHint(joined)));
  }
  CoordinatorClient* raw = client.get();
  client->heartbeat_ = std::thread([raw] { raw->HeartbeatLoop(); });
  return client;
}

CoordinatorClient::~CoordinatorClient() { Leave("worker exiting").IgnoreError(); }

absl::Status CoordinatorClient::Join(absl::Duration deadline) {
  v1::JoinRequest request;
  *request.mutable_identity() = options_.identity;
  request.set_node_key(options_.node_key);
  request.set_hostname(options_.hostname);
  request.set_pid(getpid());
  {
    MutexLock lock(&mu_);
    request.set_data_address(options_.data_address);
    request.set_node_leader(node_leader_);
    request.set_replaces(replaces_);
  }
  v1::JoinResponse response;
  grpc::Status status =
      stub_->Join(AuthorizedContext(options_.token, deadline).get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  MutexLock lock(&mu_);
  worker_id_ = response.worker_id();
  credential_ = response.member_credential();
  replaces_.clear();
  claim_pending_ = false;
  interval_ = absl::Seconds(std::max(0.1, response.heartbeat_interval_seconds()));
  run_ = response.run();
  return absl::OkStatus();
}

absl::Status CoordinatorClient::ClaimNodeLead(const std::string& replaces,
                                              const std::string& data_address) {
  {
    MutexLock lock(&mu_);
    node_leader_ = true;
    claim_pending_ = true;
    replaces_ = replaces;
    options_.data_address = data_address;
  }
  return Join();
}

absl::Status CoordinatorClient::Beat() {
  MutexLock beating(&beat_mu_);
  v1::HeartbeatRequest request;
  bool claim_pending;
  {
    MutexLock lock(&mu_);
    claim_pending = claim_pending_;
    request = progress_;
    // Reported apart from the step: never more than the step it is sent with.
    request.set_unsynced_steps(std::min(peak_unsynced_, request.step()));
    request.set_worker_id(worker_id_);
    request.set_member_credential(credential_);
  }
  if (claim_pending) return Join();  // the node's lead, claimed while unreachable
  v1::HeartbeatResponse response;
  grpc::Status status = stub_->Heartbeat(Context().get(), request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    // The lease expired (a partition, say): join again and carry on.
    LogWarning("lease lost; joining again");
    return Join();
  }
  if (!status.ok()) return FromGrpcStatus(status);
  MutexLock lock(&mu_);
  run_ = response.run();
  peak_unsynced_ = progress_.unsynced_steps();
  return absl::OkStatus();
}

void CoordinatorClient::HeartbeatLoop() {
  auto interval = [this] {
    MutexLock lock(&mu_);
    return interval_;
  };
  while (!stop_.WaitForNotificationWithTimeout(interval())) {
    absl::Status status = Beat();
    if (!status.ok()) LogWarning(absl::StrCat("heartbeat failed: ", status.ToString()));
  }
}

absl::StatusOr<v1::RunInfo> CoordinatorClient::WaitForRun(const std::function<bool()>& stop) {
  // What it waits for is said when it changes, and again every kWaitNoteEvery.
  constexpr absl::Duration kWaitNoteEvery = absl::Seconds(10);
  std::string said;
  absl::Time next_note = absl::InfinitePast();
  // UNAVAILABLE (passing) while no run is running, or the coordinator is out of reach.
  const auto look = [&]() -> absl::StatusOr<v1::RunInfo> {
    v1::RunInfo current = run();
    if (current.state() == v1::RUN_STATE_RUNNING) return current;
    // (Not "run ..." at the start: that line says this worker took its run up.)
    const std::string note =
        current.state() == v1::RUN_STATE_WAITING_FOR_WORKERS
            ? absl::StrCat("waiting for workers to join run ", current.run_id(), ": ",
                           current.waiting_for())
            : "waiting for a run: none is active on the coordinator (an operator starts one "
              "with localsgdctl start)";
    if (const absl::Time now = absl::Now(); note != said || now >= next_note) {
      LogInfo(note);
      said = note;
      next_note = now + kWaitNoteEvery;
    }
    LOCALSGD_RETURN_IF_ERROR(Beat());
    return absl::UnavailableError(note);
  };
  RetryPolicy policy;
  policy.backoff = policy.max_backoff = absl::Milliseconds(200);
  policy.stop = stop;
  absl::StatusOr<v1::RunInfo> running = Retry(policy, look);
  if (!running.ok() && stop()) return absl::CancelledError("stopped while waiting for a run");
  return running;
}

void CoordinatorClient::Report(int64_t step, double loss, double samples_per_second, bool finished,
                               double test_accuracy) {
  MutexLock lock(&mu_);
  progress_.set_step(step);
  progress_.set_loss(loss);  // NaN and infinity too: status shows a diverged worker as such
  progress_.set_samples_per_second(samples_per_second);
  progress_.set_finished(finished);
  progress_.set_test_accuracy(test_accuracy);
}

void CoordinatorClient::ReportTotalSteps(int64_t total_steps) {
  MutexLock lock(&mu_);
  progress_.set_total_steps(total_steps);
}

void CoordinatorClient::ReportUnsynced(int64_t step, int64_t unsynced_steps) {
  MutexLock lock(&mu_);
  progress_.set_step(step);
  progress_.set_unsynced_steps(unsynced_steps);
  peak_unsynced_ = std::max(peak_unsynced_, unsynced_steps);
}

void CoordinatorClient::ReportCheckpoint(const v1::CheckpointInfo& checkpoint) {
  MutexLock lock(&mu_);
  *progress_.mutable_checkpoint() = checkpoint;
}

void CoordinatorClient::ReportModelPath(const std::string& path) {
  MutexLock lock(&mu_);
  progress_.set_model_path(path);
}

v1::RunInfo CoordinatorClient::run() const {
  MutexLock lock(&mu_);
  return run_;
}

absl::Status CoordinatorClient::Leave(const std::string& reason, Departure departure) {
  {
    MutexLock lock(&mu_);
    if (left_) return absl::OkStatus();
    left_ = true;
  }
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
  v1::LeaveRequest request;
  request.set_worker_id(worker_id());
  request.set_member_credential(member_credential());
  request.set_reason(reason);
  request.set_preempted(departure == Departure::kPreempted);
  request.set_failed(departure == Departure::kFailed);
  v1::LeaveResponse response;
  return FromGrpcStatus(stub_->Leave(Context().get(), request, &response));
}

}  // namespace localsgd
