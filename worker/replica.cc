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

namespace localsgd {
namespace {

// Whether a Replica of this process is open (Connect to Finish or Leave).
std::atomic<bool> g_replica_open{false};

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

Replica::Replica(std::unique_ptr<Session> session, std::vector<at::Tensor> tensors,
                 const AveragerWrapper& wrap, std::function<bool()> stop, bool began)
    : session_(std::move(session)),
      tensors_(std::move(tensors)),
      began_(began),
      window_start_(absl::Now()) {
  const v1::RunSpec& spec = session_->spec();
  ParameterAverager* averager = session_.get();
  if (wrap) {
    wrapped_ = wrap(averager, absl::StrCat(session_->node_name(), "-", session_->local_rank()));
    if (wrapped_ != nullptr) averager = wrapped_.get();
  }
  TrainingSteps::Options options;
  options.schedule = session_->schedule();
  options.pace = session_->pace();
  options.enabled = spec.enabled();
  options.first_step = session_->first_step();
  options.max_unsynced_steps = spec.max_unsynced_steps();
  options.halted = [this] {
    if (!session_->RunHalted()) return absl::OkStatus();
    const v1::RunInfo run = session_->coordinator().run();
    return absl::OutOfRangeError(absl::StrCat("run ", run.run_id(), " ended (",
                                              v1::RunState_Name(run.state()), "): ", run.reason()));
  };
  options.run_ended = [this] { return session_->RunEnded(); };
  options.stop = std::move(stop);
  options.on_step = [this](int64_t step, int64_t unsynced_steps) {
    session_->coordinator().ReportUnsynced(step, unsynced_steps);
    session_->coordinator().Report(step, loss_, samples_per_second_, false, test_accuracy_);
  };
  training_ = std::make_unique<TrainingSteps>(averager, tensors_, std::move(options));
  if (spec.duration_case() == v1::RunSpec::kTotalSteps) {
    training_->set_last_step(spec.total_steps());
    session_->coordinator().ReportTotalSteps(spec.total_steps());
  }
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Connect(std::vector<at::Tensor> tensors,
                                                          Options options) {
  std::vector<at::Tensor> buffers = std::move(options.buffers);
  return Connect(
      [&](const v1::RunSpec& spec) -> absl::StatusOr<std::vector<at::Tensor>> {
        if (spec.average_buffers()) tensors.insert(tensors.end(), buffers.begin(), buffers.end());
        return std::move(tensors);
      },
      std::move(options));
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Connect(TensorsFor tensors_for, Options options) {
  // One rank per process: a second replica would join in the first one's name and take its
  // place at the coordinator.
  if (g_replica_open.exchange(true)) {
    return absl::FailedPreconditionError(
        "a localsgd replica (localsgd.LocalSGD) is open in this process already: one process is "
        "one rank; finish or leave it (close() in Python) before connecting another");
  }
  absl::StatusOr<std::unique_ptr<Replica>> replica = ConnectOnce(tensors_for, options);
  if (!replica.ok()) g_replica_open = false;
  return replica;
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::ConnectOnce(TensorsFor tensors_for,
                                                              Options& options) {
  SessionOptions session_options;
  if (options.session.has_value()) {
    session_options = *std::move(options.session);
  } else {
    LOCALSGD_ASSIGN_OR_RETURN(session_options, SessionOptionsFromEnvironment());
  }
  const std::function<bool()> stop =
      session_options.stop ? session_options.stop : [] { return false; };
  if (options.start.has_value() && session_options.rank == 0) {
    LOCALSGD_RETURN_IF_ERROR(StartUnlessActive(session_options, *options.start));
  }
  LOCALSGD_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                            Session::Join(std::move(session_options)));
  absl::Status status = CheckExpectedSpec(options.expect, session->spec());
  std::vector<at::Tensor> tensors;
  if (status.ok()) {
    absl::StatusOr<std::vector<at::Tensor>> made = tensors_for(session->spec());
    status = made.status();
    if (made.ok()) tensors = *std::move(made);
  }
  if (status.ok()) status = session->FormNodeGroup();
  if (status.ok()) status = session->Start(tensors).status();
  if (absl::IsCancelled(status) && !stop() && session->RunEnded()) {
    // The others ended the run while this rank started: nothing is left to train.
    return std::unique_ptr<Replica>(
        new Replica(std::move(session), std::move(tensors), options.wrap, stop, /*began=*/false));
  }
  if (!status.ok()) {
    if (absl::IsCancelled(status)) {
      session->Leave(options.stopped_reason, options.stopped).IgnoreError();
    } else {
      session->Leave(absl::StrCat("failed: ", status.ToString()), Departure::kFailed).IgnoreError();
    }
    return status;
  }
  return std::unique_ptr<Replica>(
      new Replica(std::move(session), std::move(tensors), options.wrap, stop, /*began=*/true));
}

Replica::~Replica() {
  if (absl::Status s = Finish(); !s.ok()) LogWarning(absl::StrCat("finishing: ", s.ToString()));
}

absl::Status Replica::Step() {
  MutexLock lock(&mu_);
  if (done_) return absl::FailedPreconditionError("Step after Finish or Leave");
  if (!began_) {
    return absl::OutOfRangeError(
        absl::StrCat("run ", session_->run_id(), " ended before this rank began training"));
  }
  return training_->Step();
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
  // A report without samples (the final evaluation's) leaves the rate as it is.
  if (const double seconds = absl::ToDoubleSeconds(now - window_start_);
      samples > 0 && seconds >= 1.0) {
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
  if (!began_) return session_->Leave("the run ended before this rank began");
  training_->Finish().IgnoreError();  // a last sync that failed is logged there
  const bool stopped = training_->halted();
  return session_->Finish(steps(), loss_, samples_per_second_, test_accuracy_,
                          stopped ? "the run was stopped" : "finished",
                          stopped ? Session::Ending::kStopped : Session::Ending::kFinished, wait);
}

absl::Status Replica::Leave(const std::string& reason, Departure departure) {
  MutexLock lock(&mu_);
  if (done_) return absl::OkStatus();
  done_ = true;
  g_replica_open = false;
  training_->Abandon();
  if (departure == Departure::kPreempted) {  // expected back: its progress so far is reported
    return session_->Finish(steps(), loss_, samples_per_second_, test_accuracy_, reason,
                            Session::Ending::kPreempted);
  }
  return session_->Leave(reason, departure);
}

absl::StatusOr<Session::CommittedModel> Replica::FinalModel() {
  MutexLock lock(&mu_);
  if (!session_->spec().enabled() || (began_ && !training_->stopped_early())) {
    return Session::CommittedModel{session_->round(), session_->global_step()};
  }
  return session_->FetchCommittedModel(tensors_);
}

}  // namespace localsgd
