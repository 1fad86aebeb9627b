#include "worker/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace localsgd {

absl::StatusOr<TrainResult> Train(Model& model, const DataSplits& data, TrainingSteps& steps,
                                  const TrainOptions& options) {
  const v1::RunSpec& spec = options.spec;
  try {
    model.Train(true);
    Dataset shard = Shard(data.train, options.global_rank, options.world_size,
                          spec.dataset().shuffle(), spec.seed());
    if (shard.size() == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", options.global_rank, " of ", options.world_size, " has no training data"));
    }
    const int64_t batch = spec.batch_size();
    const int accumulation = spec.gradient_accumulation_steps();
    const int64_t steps_per_epoch =
        std::max<int64_t>(1, (shard.size() + batch * accumulation - 1) / (batch * accumulation));
    const int64_t total = spec.duration_case() == v1::RunSpec::kEpochs
                              ? static_cast<int64_t>(std::ceil(spec.epochs() * steps_per_epoch))
                              : spec.total_steps();
    steps.set_last_step(total);
    auto optimizer = MakeOptimizer(spec.optimizer(), model.Parameters());
    torch::manual_seed(spec.seed() * 1000003 + options.global_rank);
    torch::Tensor order = torch::randperm(shard.size(), torch::kInt64);
    int64_t cursor = 0;
    auto next_batch = [&]() {
      if (cursor + batch > shard.size()) {
        order = torch::randperm(shard.size(), torch::kInt64);
        cursor = 0;
      }
      torch::Tensor idx = order.slice(0, cursor, std::min(shard.size(), cursor + batch));
      cursor += batch;
      return std::make_pair(shard.inputs.index_select(0, idx).to(options.device),
                            shard.targets.index_select(0, idx).to(options.device));
    };

    TrainResult result;
    const absl::Time train_start = absl::Now();
    absl::Duration eval_time;  // periodic evaluations: instrumentation, not training
    int64_t total_samples = 0;
    int64_t evaluated_round = -1;  // the last round evaluated after
    for (int64_t step = steps.steps(); step < total; step = steps.steps()) {
      if (options.stop()) {
        result.stopped = true;
        steps.Abandon();
        break;
      }
      for (auto& group : optimizer->param_groups()) {
        group.options().set_lr(LearningRate(spec, step, total));
      }
      TrainProgress progress;
      for (int m = 0; m < accumulation; ++m) {
        auto [x, y] = next_batch();
        torch::Tensor loss = Loss(model.Forward(x), y, spec.loss()) / accumulation;
        loss.backward();
        progress.loss += loss.item<double>();
        progress.samples += x.size(0);
      }
      total_samples += progress.samples;
      optimizer->step();
      // Released rather than zeroed (PyTorch's set_to_none): rounds run without them.
      for (const torch::Tensor& p : model.Parameters()) p.mutable_grad().reset();
      const int64_t completed = steps.rounds_completed();
      const absl::Time sync_start = absl::Now();
      const absl::Status status = steps.Step();
      if (!status.ok() && !absl::IsOutOfRange(status)) return status;  // the node broke
      progress.step = result.steps = steps.steps();
      progress.total_steps = total;
      result.loss = progress.loss;
      progress.synced = steps.rounds_completed() != completed || !status.ok();
      progress.sync_seconds = absl::ToDoubleSeconds(absl::Now() - sync_start);
      // Rounds count whole models (with fragments, every fragment once): the evaluation comes
      // at the first round that ends in its window.
      const int64_t round = progress.step / spec.local_sgd_steps();
      if (status.ok() && progress.synced && spec.eval_every_rounds() > 0 && round > 0 &&
          round % spec.eval_every_rounds() == 0 && round != evaluated_round) {
        evaluated_round = round;
        const absl::Time eval_start = absl::Now();
        const Evaluation eval = Evaluate(model, data.test, options.device, spec.loss());
        eval_time += absl::Now() - eval_start;
        progress.evaluated = true;
        progress.test_accuracy = eval.accuracy;
        progress.test_loss = eval.loss;
      }
      progress.elapsed_seconds = absl::ToDoubleSeconds(absl::Now() - train_start - eval_time);
      options.on_progress(progress);
      if (!status.ok()) {  // the run ended: halted (stopped early), or with its final model
        result.stopped = steps.halted();
        result.run_ended = !steps.halted();
        break;
      }
    }
    LOCALSGD_RETURN_IF_ERROR(steps.Finish());
    const Evaluation eval = Evaluate(model, data.test, options.device, spec.loss());
    result.test_accuracy = eval.accuracy;
    result.test_loss = eval.loss;
    // Over the whole training, syncs included (what LocalSGD costs shows here), periodic
    // evaluations excluded.
    const double seconds = absl::ToDoubleSeconds(absl::Now() - train_start - eval_time);
    result.samples_per_second = seconds > 0 ? static_cast<double>(total_samples) / seconds : 0;
    result.samples = total_samples;
    return result;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // the TorchScript interpreter's errors, std::bad_alloc
    // The interpreter's message is its TorchScript traceback, then the error on the last line:
    // the traceback goes to this worker's log, the error into the status the coordinator sees.
    const absl::string_view what = absl::StripTrailingAsciiWhitespace(e.what());
    absl::string_view last = what.substr(what.find_last_of('\n') + 1);
    absl::ConsumePrefix(&last, "RuntimeError: ");
    if (last.size() != what.size()) LogError(absl::StrCat("training failed:\n", what));
    return absl::InternalError(absl::StrCat("training failed: ", last));
  }
}

}  // namespace localsgd
