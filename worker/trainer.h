#ifndef LOCALSGD_WORKER_TRAINER_H_
#define LOCALSGD_WORKER_TRAINER_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "proto/localsgd/v1/run_spec.pb.h"
#include "worker/dataset.h"
#include "worker/model.h"
#include "worker/objective.h"
#include "worker/training_steps.h"

namespace localsgd {

struct TrainProgress {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  int64_t samples = 0;         // trained on in this step
  bool synced = false;         // this step ended a round (a sync, a merge, or the run's end)
  double sync_seconds = 0;     // how long that took
  double elapsed_seconds = 0;  // training time so far (periodic evaluations excluded)
  bool evaluated = false;      // eval_every_rounds asked for an evaluation after this step
  double test_accuracy = 0;
  double test_loss = 0;
};

struct TrainResult {
  int64_t steps = 0;
  double loss = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double samples_per_second = 0;  // over the whole training, syncs included, evaluations not
  int64_t samples = 0;            // trained on by this rank (paced runs: fewer than steps say)
  // Ended early: stop() said so, or the run was stopped or failed (this copy holds its own
  // weights).
  bool stopped = false;
  // The run ended (on the coordinator) before this worker's last step: the worker stopped
  // there holding the run's final model.
  bool run_ended = false;
};

struct TrainOptions {
  v1::RunSpec spec;  // with defaults filled in (NormalizeRunSpec)
  torch::Device device = torch::kCPU;
  int global_rank = 0;
  int world_size = 1;
  // Stop before the next step, without the last sync (a signal).
  std::function<bool()> stop = [] { return false; };
  std::function<void(const TrainProgress&)> on_progress = [](const TrainProgress&) {};
};

// The worker program's training loop: trains `model` (on options.device) on this rank's shard of
// `data.train` as the spec says (optimizer, lr schedule, loss, batch size, gradient accumulation,
// total steps or epochs) from `steps.steps()` on, calling `steps.Step()` after each optimizer step
// (rounds, the last round, the run's end) and `steps.Finish()` at the end, then evaluates on
// `data.test`. LibTorch errors become a Status.
absl::StatusOr<TrainResult> Train(Model& model, const DataSplits& data, TrainingSteps& steps,
                                  const TrainOptions& options);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_TRAINER_H_
