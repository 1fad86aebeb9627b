#include "worker/worker_app.h"

#include <google/protobuf/text_format.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "worker/dataset.h"
#include "worker/flat_model.h"
#include "worker/model.h"
#include "worker/replica.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  g_stop.store(true);
}

// Errors are printed once, as a log line on stderr.
int Fail(const absl::Status& status) {
  localsgd::LogError(status.ToString());
  return 1;
}

// Saves `model` (holding the global model `at`) to `path` with the spec and `result`'s metrics
// beside it, and tells the coordinator where.
absl::Status Save(localsgd::Model& model, const std::string& path, localsgd::Replica& replica,
                  const localsgd::Session::CommittedModel& at,
                  const localsgd::TrainResult& result) {
  const localsgd::v1::RunSpec& spec = replica.spec();
  localsgd::Model::SaveInfo info;
  info.run_id = replica.run_id();
  info.round = at.round;
  info.global_step = at.global_step;
  // Raw inputs go into the saved model (its normalisation inside).
  const localsgd::InputNormalization normalization = localsgd::NormalizationOf(spec.dataset());
  info.input_divisor = normalization.divisor;
  info.input_mean = normalization.mean;
  info.input_std = normalization.std;
  google::protobuf::TextFormat::PrintToString(spec, &info.extra_files["spec.textproto"]);
  info.extra_files["metrics.txt"] =
      absl::StrFormat("steps: %d\ntrain_loss: %.6f\ntest_accuracy: %.6f\ntest_loss: %.6f\n",
                      result.steps, result.loss, result.test_accuracy, result.test_loss);
  LOCALSGD_RETURN_IF_ERROR(model.Save(path, info));
  std::printf("%s saved the trained model (run %s, round %lld, global step %lld) to %s\n",
              replica.worker_id().c_str(), info.run_id.c_str(), static_cast<long long>(info.round),
              static_cast<long long>(info.global_step), path.c_str());
  std::fflush(stdout);
  replica.session().coordinator().ReportModelPath(path);
  return absl::OkStatus();
}

}  // namespace

int localsgd::RunWorker(int argc, char** argv, const AveragerWrapper& wrap) {
  TuneProcess();
  absl::StatusOr<WorkerFlags> flags = ParseWorkerFlags(argc, argv);
  if (!flags.ok()) {  // a usage error: exit 2
    LogError(std::string(flags.status().message()));
    return 2;
  }
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  // A worker stopped by SIGTERM or SIGINT exits 128 + the signal's number after leaving, so
  // that a job runner (srun, a Kubernetes Job, a shell) does not count it as a success.
  const auto signal_exit = [] { return 128 + g_signal.load(); };

  // The model and data are made from the run's spec once this rank has joined.
  std::unique_ptr<Model> model;
  DataSplits data;
  Replica::Options options;
  options.session = flags->session;
  options.session->stop = [] { return g_stop.load(); };
  options.stopped = Replica::Departure::kPreempted;
  options.stopped_reason = "stopped by signal";
  options.wrap = wrap;
  absl::StatusOr<std::unique_ptr<Replica>> connected = Replica::Connect(
      [&](const v1::RunSpec& spec) -> absl::StatusOr<std::vector<at::Tensor>> {
        LOCALSGD_ASSIGN_OR_RETURN(model, MakeModel(spec.model(), spec.seed()));
        model->To(flags->session.device);
        LOCALSGD_ASSIGN_OR_RETURN(data, LoadData(spec.dataset(), spec.seed()));
        // The averaged tensors in one buffer: a node of one rank syncs them without a copy.
        IntoOneBuffer(ModelTensors(*model, spec.average_buffers()));
        return ModelTensors(*model, spec.average_buffers());
      },
      std::move(options));
  if (!connected.ok()) {
    if (!g_stop.load()) return Fail(connected.status());
    LogInfo("stopped by signal before training");
    return signal_exit();
  }
  Replica& replica = **connected;
  const v1::RunSpec& spec = replica.spec();
  const std::string worker_id = replica.worker_id();
  const auto leave_and_fail = [&](const absl::Status& status) {
    replica.Leave(absl::StrCat("failed: ", status.ToString()), Replica::Departure::kFailed)
        .IgnoreError();
    return Fail(status);
  };
  // Node 0's leader (now: a rank takes the lead when its leader dies) saves the run's model;
  // local rank 0 where the run does not sync or ended before the node began.
  const auto saves = [&] {
    return !flags->save_model.empty() && flags->first_node &&
           (spec.enabled() && replica.began() ? replica.session().leads_node()
                                              : replica.local_rank() == 0);
  };
  // The run's final model, fetched where this rank does not hold it, evaluated there.
  const auto save_final = [&](TrainResult result) -> absl::Status {
    LOCALSGD_ASSIGN_OR_RETURN(const Session::CommittedModel at, replica.FinalModel());
    if (!replica.began() || result.stopped) {
      try {
        const Evaluation e = Evaluate(*model, data.test, flags->session.device, spec.loss());
        result.test_accuracy = e.accuracy;
        result.test_loss = e.loss;
      } catch (const std::exception& e) {
        return absl::InternalError(absl::StrCat("evaluating the run's model: ", e.what()));
      }
    }
    return Save(*model, flags->save_model, replica, at, result);
  };
  if (!replica.began()) {  // the other nodes ended the run while this worker was starting
    const v1::RunState state = replica.session().coordinator().run().state();
    std::printf("%s: run %s ended (%s) before this worker began training\n", worker_id.c_str(),
                replica.run_id().c_str(), v1::RunState_Name(state).c_str());
    // The first node (restarted, or late) still saves a completed run's final global model.
    if (saves() && state == v1::RUN_STATE_COMPLETED) {
      if (absl::Status s = save_final(TrainResult()); !s.ok()) return leave_and_fail(s);
    }
    replica.Finish().IgnoreError();
    return 0;
  }
  LogInfo(absl::StrCat(worker_id, " trains on ", flags->session.device.str()));

  TrainOptions train;
  train.spec = spec;
  train.device = flags->session.device;
  train.global_rank = replica.rank();
  train.world_size = replica.world_size();
  train.stop = [] { return g_stop.load(); };
  double last_round = 0;
  train.on_progress = [&](const TrainProgress& p) {
    replica.session().coordinator().ReportTotalSteps(p.total_steps);
    replica.Report(p.loss, p.evaluated ? p.test_accuracy : -1, p.samples).IgnoreError();
    if (p.evaluated) {
      std::printf("%s step %lld: test accuracy %.4f, test loss %.4f after %.1f s of training\n",
                  worker_id.c_str(), static_cast<long long>(p.step), p.test_accuracy, p.test_loss,
                  p.elapsed_seconds);
    }
    if (p.synced) last_round = p.sync_seconds;
    if (p.step % flags->log_every == 0 || p.step == p.total_steps) {
      std::printf("%s step %lld/%lld loss %.4f samples/s %.1f last round %.3f s\n",
                  worker_id.c_str(), static_cast<long long>(p.step),
                  static_cast<long long>(p.total_steps), p.loss, replica.samples_per_second(),
                  last_round);
      std::fflush(stdout);
    }
  };
  absl::StatusOr<TrainResult> result = Train(*model, data, replica.training(), train);
  if (!result.ok()) return leave_and_fail(result.status());
  std::printf(
      "%s done: %lld steps, loss %.4f, test accuracy %.4f, test loss %.4f, samples/s %.1f, "
      "samples %lld%s\n",
      worker_id.c_str(), static_cast<long long>(result->steps), result->loss, result->test_accuracy,
      result->test_loss, result->samples_per_second, static_cast<long long>(result->samples),
      result->stopped     ? " (stopped early)"
      : result->run_ended ? " (the run ended first; this is its final model)"
                          : "");
  std::fflush(stdout);
  replica.Report(result->loss, result->test_accuracy).IgnoreError();  // the final report's
  if (saves()) {
    if (absl::Status s = save_final(*result); !s.ok()) return leave_and_fail(s);
  }
  if (result->stopped && g_stop.load()) {
    replica.Leave("stopped by signal", Replica::Departure::kPreempted).IgnoreError();
    return signal_exit();
  }
  replica.Finish().IgnoreError();
  return 0;
}
