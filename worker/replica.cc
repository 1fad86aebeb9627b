#include "worker/replica.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/create_channel.h>

#include <atomic>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/control_client.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "worker/environment.h"
#include "worker/last_step.h"

namespace localsgd {
namespace {

// Whether a Replica of this process is open (Connect to Finish or Leave).
std::atomic<bool> g_replica_open{false};

// How often Step() asks whether the run ended (a copy of the run under a lock).
constexpr absl::Duration kLookEvery = absl::Milliseconds(100);

// Global rank 0's part in Options::start: starts `spec` unless a run is active, retrying
// while the coordinator is unreachable (as joining does).
absl::Status StartUnlessActive(const SessionOptions& options, v1::RunSpec spec) {
  LOCALSGD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                            MakeChannelCredentials(options.tls));
  ControlClient control(grpc::CreateChannel(options.coordinator, credentials), options.token);
  if (!spec.has_min_workers()) spec.set_min_workers(options.world_size);
  // OK when a run is active (the operator's, another rank's, or this one's).
  const auto start_once = [&]() -> absl::Status {
    LOCALSGD_ASSIGN_OR_RETURN(const v1::CoordinatorStatus status, control.Status());
    if (status.run().state() == v1::RUN_STATE_WAITING_FOR_WORKERS ||
        status.run().state() == v1::RUN_STATE_RUNNING) {
      return absl::OkStatus();
    }
    absl::StatusOr<v1::RunInfo> run = control.Start(spec);
    if (run.ok()) LogInfo(absl::StrCat("started run ", run->run_id()));
    if (absl::IsFailedPrecondition(run.status())) return absl::OkStatus();  // just started
    return run.status();
  };
  RetryPolicy policy;
  policy.budget = options.connect_timeout;
  policy.stop = options.stop;
  const absl::Status started = Retry(policy, start_once);
  if (IsUnreachable(started)) {
    return absl::UnavailableError(absl::StrCat("starting a run: the coordinator at ",
                                               options.coordinator,
                                               " is unreachable: ", started.message()));
  }
  if (!started.ok()) {
    return absl::Status(started.code(), absl::StrCat("starting a run: ", started.message()));
  }
  return started;
}

}  // namespace

absl::Status CheckExpectedSpec(const v1::RunSpec& expect, const v1::RunSpec& spec) {
  const google::protobuf::Reflection* reflection = expect.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(expect, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    v1::RunSpec wanted = expect, running = spec, wanted_field, running_field;
    reflection->SwapFields(&wanted, &wanted_field, {field});
    reflection->SwapFields(&running, &running_field, {field});
    if (google::protobuf::util::MessageDifferencer::Equals(wanted_field, running_field)) continue;
    std::string want, have;
    google::protobuf::TextFormat::PrintToString(wanted_field, &want);
    google::protobuf::TextFormat::PrintToString(running_field, &have);
    return absl::FailedPreconditionError(absl::StrCat(
        field->name(), ": this program expects ", absl::StripAsciiWhitespace(want),
        " but the run has ", have.empty() ? "it unset" : absl::StripAsciiWhitespace(have),
        " (start the run with it, or stop expecting it)"));
  }
  return absl::OkStatus();
}

Replica::Replica(std::unique_ptr<Session> session, std::vector<at::Tensor> tensors)
    : session_(std::move(session)), window_start_(absl::Now()) {
  const v1::RunSpec& spec = session_->spec();
  local_sgd_ = std::make_unique<LocalSGD>(session_.get(), std::move(tensors), session_->schedule(),
                                          spec.enabled(), session_->first_step());
  if (spec.duration_case() == v1::RunSpec::kTotalSteps) {
    local_sgd_->set_last_step(spec.total_steps());
  }
  bound_.max_unsynced_steps = spec.max_unsynced_steps();
  bound_.stop = [this] { return session_->RunHalted(); };
  bound_.on_wait = [this](int64_t step, int64_t unsynced_steps) {
    session_->coordinator().ReportUnsynced(step, unsynced_steps);
  };
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Connect(std::vector<at::Tensor> tensors,
                                                          Options options) {
  // One rank per process: a second replica would join in the first one's name and take its
  // place at the coordinator.
  if (g_replica_open.exchange(true)) {
    return absl::FailedPreconditionError(
        "a localsgd replica (localsgd.LocalSGD) is open in this process already: one process is "
        "one rank; finish or leave it (close() in Python) before connecting another");
  }
  absl::StatusOr<std::unique_ptr<Replica>> replica = ConnectOnce(std::move(tensors), options);
  if (!replica.ok()) g_replica_open = false;
  return replica;
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::ConnectOnce(std::vector<at::Tensor> tensors,
                                                              Options& options) {
  SessionOptions session_options;
  if (options.session.has_value()) {
    session_options = *std::move(options.session);
  } else {
    LOCALSGD_ASSIGN_OR_RETURN(session_options, SessionOptionsFromEnvironment());
  }
  if (options.start.has_value() && session_options.rank == 0) {
    LOCALSGD_RETURN_IF_ERROR(StartUnlessActive(session_options, *options.start));
  }
  LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                            Session::Join(std::move(session_options)));
  absl::Status status = CheckExpectedSpec(options.expect, session->spec());
  if (session->spec().average_buffers()) {
    tensors.insert(tensors.end(), options.buffers.begin(), options.buffers.end());
  }
  if (status.ok()) status = session->FormNodeGroup();
  if (status.ok()) status = session->Start(tensors).status();
  if (!status.ok()) {
    session
        ->Leave(absl::IsCancelled(status) ? "stopped before training"
                                          : absl::StrCat("failed: ", status.ToString()),
                absl::IsCancelled(status) ? Session::Departure::kDone : Session::Departure::kFailed)
        .IgnoreError();
    return status;
  }
  const v1::RunSpec& spec = session->spec();
  if (spec.duration_case() == v1::RunSpec::kTotalSteps) {
    session->coordinator().ReportTotalSteps(spec.total_steps());
  }
  return std::unique_ptr<Replica>(new Replica(std::move(session), std::move(tensors)));
}

Replica::~Replica() {
  if (absl::Status s = Finish(); !s.ok()) LogWarning(absl::StrCat("finishing: ", s.ToString()));
}

absl::Status Replica::Step() {
  MutexLock lock(&mu_);
  if (done_) return absl::FailedPreconditionError("Step after Finish or Leave");
  const int64_t completed = local_sgd_->rounds_completed();
  absl::Status status = local_sgd_->Step();
  const v1::RunSpec& spec = session_->spec();
  if (spec.duration_case() == v1::RunSpec::kTotalSteps && steps() == spec.total_steps()) {
    status = SyncLastStep(*local_sgd_, session_.get(), completed, std::move(status));
  } else {
    status = WaitWithinBound(*local_sgd_, session_.get(), bound_, completed, std::move(status));
  }
  LOCALSGD_RETURN_IF_ERROR(session_->Health());
  if (absl::IsOutOfRange(status)) return status;  // the run ended without this rank
  if (!status.ok()) {
    LogWarning(absl::StrCat("sync at step ", steps(), " failed (", status.ToString(),
                            "); training goes on from the local model"));
  }
  session_->coordinator().ReportUnsynced(steps(), local_sgd_->unsynced_steps());
  session_->coordinator().Report(steps(), loss_, samples_per_second_, false, test_accuracy_);
  if (const absl::Time now = absl::Now(); now >= next_look_) {
    next_look_ = now + kLookEvery;
    if (session_->RunHalted()) {
      const v1::RunInfo run = session_->coordinator().run();
      return absl::OutOfRangeError(absl::StrCat(
          "run ", run.run_id(), " ended (", v1::RunState_Name(run.state()), "): ", run.reason()));
    }
  }
  return absl::OkStatus();
}

absl::Status Replica::Report(double loss, double test_accuracy, int64_t samples) {
  MutexLock lock(&mu_);
  if (!std::isfinite(test_accuracy) || test_accuracy > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("accuracy: ", test_accuracy, " must be a fraction in [0, 1] (or none)"));
  }
  if (samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("samples: ", samples, " must be >= 0"));
  }
  loss_ = loss;
  if (test_accuracy >= 0) test_accuracy_ = test_accuracy;
  window_samples_ += samples;
  const absl::Time now = absl::Now();
  if (const double seconds = absl::ToDoubleSeconds(now - window_start_); seconds >= 1.0) {
    samples_per_second_ = static_cast<double>(window_samples_) / seconds;
    window_samples_ = 0;
    window_start_ = now;
  }
  session_->coordinator().Report(steps(), loss_, samples_per_second_, false, test_accuracy_);
  return absl::OkStatus();
}

absl::Status Replica::Finish(absl::Duration wait) {
  MutexLock lock(&mu_);
  if (done_) return absl::OkStatus();
  done_ = true;
  g_replica_open = false;
  const RetryPolicy policy =
      LastRoundRetry([this] { return !session_->Health().ok() || session_->RunEnded(); });
  const absl::Status last = RetryAfter(
      policy, local_sgd_->Finish(), [this] { return local_sgd_->Resync(); },
      [&](const absl::Status& why, int retry, absl::Duration) {
        LogWarning(absl::StrCat("the last sync failed (", why.message(), "); trying again (", retry,
                                " of ", policy.max_retries, ")"));
      });
  if (!last.ok() && !absl::IsOutOfRange(last)) {
    LogWarning(absl::StrCat("the last sync failed: ", last.ToString()));
  }
  return session_->Finish(steps(), loss_, samples_per_second_, test_accuracy_, "finished",
                          Session::Ending::kFinished, wait);
}

absl::Status Replica::Leave(const std::string& reason, Departure departure) {
  MutexLock lock(&mu_);
  if (done_) return absl::OkStatus();
  done_ = true;
  g_replica_open = false;
  local_sgd_->Abandon();
  return session_->Leave(reason, departure);
}

}  // namespace localsgd
