#ifndef LOCALSGD_WORKER_TRAINER_H_
#define LOCALSGD_WORKER_TRAINER_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "common/round_schedule.h"
#include "proto/localsgd/v1/run_spec.pb.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/parameter_averager.h"

namespace localsgd {

struct TrainProgress {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double samples_per_second = 0;
  bool synced = false;         // this step ended with a sync round
  double sync_seconds = 0;     // how long that sync took
  absl::Status sync_status;    // and how it went
  double elapsed_seconds = 0;  // training time so far (periodic evaluations excluded)
  bool evaluated = false;      // eval_every_rounds asked for an evaluation after this step
  double test_accuracy = 0;
  double test_loss = 0;
  int64_t unsynced_steps = 0;  // LocalSGD::unsynced_steps after this step
};

struct TrainResult {
  int64_t steps = 0;
  double loss = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_second = 0;  // over the whole training, syncs included, evaluations not
  bool stopped = false;           // ended early because stop() said so
  // The run ended (on the coordinator) before this worker's last step: the worker stopped
  // there holding the run's final model.
  bool run_ended = false;
};

struct TrainOptions {
  v1::RunSpec spec;        // with defaults filled in (NormalizeRunSpec)
  RoundSchedule schedule;  // the spec's (Session::schedule)
  torch::Device device = torch::kCPU;
  int global_rank = 0;
  int world_size = 1;
  // Steps already taken by the run (a worker that rejoins a run in progress starts there; the
  // learning-rate schedule and the total count from 0).
  int64_t first_step = 0;
  std::function<bool()> stop = [] { return false; };
  std::function<void(const TrainProgress&)> on_progress = [](const TrainProgress&) {};
  // The node waits for a round at `step`, having trained `unsynced_steps` alone
  // (UnsyncedBound).
  std::function<void(int64_t step, int64_t unsynced_steps)> on_wait = [](int64_t, int64_t) {};
};

// Trains `model` on this rank's shard of `data.train` as the spec says (optimizer, lr
// schedule, loss, batch size, gradient accumulation, total steps or epochs), with LocalSGD
// over `averager` every local_sgd_steps optimizer steps (none when the spec disables it) and
// the last sync at the end, then evaluates on `data.test`. LibTorch errors become a Status.
absl::StatusOr<TrainResult> Train(Model& model, const DataSplits& data, ParameterAverager* averager,
                                  const TrainOptions& options);

// Accuracy and mean loss of `model` on `data`.
struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};
Evaluation Evaluate(Model& model, const Dataset& data, const torch::Device& device,
                    v1::LossKind loss);

// The learning rate at optimizer step `step` (0-based) of `total` under the spec's schedule.
double LearningRate(const v1::RunSpec& spec, int64_t step, int64_t total);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_TRAINER_H_
