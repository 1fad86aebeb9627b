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
#include "worker/flat_model.h"
#include "worker/last_step.h"
#include "worker/local_sgd.h"
#include "worker/unsynced_bound.h"

namespace localsgd {
namespace {

torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& targets, v1::LossKind kind) {
  if (kind == v1::LOSS_KIND_MSE) {
    torch::Tensor one_hot = torch::one_hot(targets, output.size(1)).to(output.dtype());
    return torch::mse_loss(output, one_hot);
  }
  return torch::nn::functional::cross_entropy(output, targets);
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const v1::OptimizerSpec& spec,
                                                       std::vector<torch::Tensor> params) {
  if (spec.kind() == v1::OPTIMIZER_KIND_ADAMW) {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(spec.lr())
                                                             .betas({spec.beta1(), spec.beta2()})
                                                             .eps(spec.eps())
                                                             .weight_decay(spec.weight_decay()));
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(spec.lr())
                                                         .momentum(spec.momentum())
                                                         .nesterov(spec.nesterov())
                                                         .weight_decay(spec.weight_decay()));
}

}  // namespace

double LearningRate(const v1::RunSpec& spec, int64_t step, int64_t total) {
  const double peak = spec.optimizer().lr();
  const v1::LrScheduleSpec& schedule = spec.lr_schedule();
  const int64_t warmup = schedule.warmup_steps();
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double span = std::max<int64_t>(1, total - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double floor = schedule.min_lr();
  switch (schedule.kind()) {
    case v1::LR_SCHEDULE_KIND_COSINE:
      return floor + (peak - floor) * 0.5 * (1 + std::cos(M_PI * progress));
    case v1::LR_SCHEDULE_KIND_LINEAR:
      return floor + (peak - floor) * (1 - progress);
    default:
      return peak;
  }
}

Evaluation Evaluate(Model& model, const Dataset& data, const torch::Device& device,
                    v1::LossKind loss) {
  torch::NoGradGuard no_grad;
  model.Train(false);
  int64_t correct = 0;
  double loss_sum = 0;
  const int64_t batch = 1024;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int64_t end = std::min(data.size(), begin + batch);
    torch::Tensor x = data.inputs.slice(0, begin, end).to(device);
    torch::Tensor y = data.targets.slice(0, begin, end).to(device);
    torch::Tensor out = model.Forward(x);
    correct += out.argmax(1).eq(y).sum().item<int64_t>();
    loss_sum += Loss(out, y, loss).item<double>() * static_cast<double>(end - begin);
  }
  model.Train(true);
  Evaluation e;
  if (data.size() > 0) {
    e.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
    e.loss = loss_sum / static_cast<double>(data.size());
  }
  return e;
}

absl::StatusOr<TrainResult> Train(Model& model, const DataSplits& data, ParameterAverager* averager,
                                  const TrainOptions& options) {
  const v1::RunSpec& spec = options.spec;
  try {
    model.To(options.device);
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

    // The averaged tensors in one buffer: a node of one rank syncs them without a copy.
    IntoOneBuffer(ModelTensors(model, spec.average_buffers()));
    auto optimizer = MakeOptimizer(spec.optimizer(), model.Parameters());
    LocalSGD local_sgd(averager, ModelTensors(model, spec.average_buffers()), options.schedule,
                       spec.enabled(), options.first_step);
    local_sgd.set_last_step(total);
    const UnsyncedBound bound{spec.max_unsynced_steps(), absl::Seconds(1), options.stop,
                              options.on_wait};
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
    absl::Time window_start = absl::Now();
    int64_t window_samples = 0;
    double samples_per_second = 0;
    int64_t evaluated_round = -1;  // the last round evaluated after
    for (int64_t step = options.first_step; step < total; ++step) {
      if (options.stop()) {
        result.stopped = true;
        break;
      }
      for (auto& group : optimizer->param_groups()) {
        group.options().set_lr(LearningRate(spec, step, total));
      }
      double loss_sum = 0;
      for (int m = 0; m < accumulation; ++m) {
        auto [x, y] = next_batch();
        torch::Tensor loss = Loss(model.Forward(x), y, spec.loss()) / accumulation;
        loss.backward();
        loss_sum += loss.item<double>();
        window_samples += x.size(0);
        total_samples += x.size(0);
      }
      optimizer->step();
      // Released rather than zeroed (PyTorch's set_to_none): rounds run without them.
      for (const torch::Tensor& p : model.Parameters()) p.mutable_grad().reset();
      TrainProgress progress;
      progress.step = step + 1;
      progress.total_steps = total;
      progress.loss = loss_sum;
      const bool launches = spec.enabled() && options.schedule.RoundAt(step + 1);
      const int64_t completed = local_sgd.rounds_completed();
      absl::Time sync_start = absl::Now();
      progress.sync_status = local_sgd.Step();
      if (local_sgd.steps() == total) {  // the last step, or a round's outcome held it there
        progress.sync_status =
            SyncLastStep(local_sgd, averager, completed, std::move(progress.sync_status));
      } else {
        progress.sync_status =
            WaitWithinBound(local_sgd, averager, bound, completed, std::move(progress.sync_status));
      }
      // This step ended a round (a sync, or the merge of an overlapped round).
      const bool boundary = local_sgd.rounds_completed() != completed;
      if ((boundary || launches) && averager != nullptr) {
        LOCALSGD_RETURN_IF_ERROR(averager->Health());
      }
      if (local_sgd.steps() != step + 1) {
        // The run's global step, which the node follows (after an outage, or when the node
        // re-formed after one of its ranks died and goes on from its leader's step).
        LogInfo(absl::StrCat("going on from the run's step ", local_sgd.steps(),
                             " (this rank was at step ", step + 1, ")"));
        step = local_sgd.steps() - 1;
        progress.step = step + 1;
      }
      progress.unsynced_steps = local_sgd.unsynced_steps();
      if (absl::IsOutOfRange(progress.sync_status)) {
        // The run ended without this node's last steps: it holds the run's final model now,
        // and trains no further on its own.
        LogInfo(absl::StrCat("stopping at step ", step + 1, ": ", progress.sync_status.message()));
        result.steps = step + 1;
        result.loss = loss_sum;
        result.run_ended = true;
        progress.synced = true;
        options.on_progress(progress);
        break;
      }
      if (boundary) {
        progress.synced = true;
        progress.sync_seconds = absl::ToDoubleSeconds(absl::Now() - sync_start);
        // The round of step s ends at s + overlap_steps < s + local_sgd_steps / fragments; with
        // fragments, rounds count whole models (every fragment once), and the evaluation comes
        // at the first fragment round that ends in its window.
        const int64_t round = (step + 1) / options.schedule.local_sgd_steps();
        if (spec.eval_every_rounds() > 0 && round > 0 && round % spec.eval_every_rounds() == 0 &&
            round != evaluated_round) {
          evaluated_round = round;
          const absl::Time eval_start = absl::Now();
          Evaluation eval = Evaluate(model, data.test, options.device, spec.loss());
          eval_time += absl::Now() - eval_start;
          progress.evaluated = true;
          progress.test_accuracy = eval.accuracy;
          progress.test_loss = eval.loss;
        }
      }
      const double elapsed = absl::ToDoubleSeconds(absl::Now() - window_start);
      if (elapsed >= 1.0) {
        samples_per_second = static_cast<double>(window_samples) / elapsed;
        window_start = absl::Now();
        window_samples = 0;
      }
      progress.samples_per_second = samples_per_second;
      progress.elapsed_seconds = absl::ToDoubleSeconds(absl::Now() - train_start - eval_time);
      result.steps = step + 1;
      result.loss = loss_sum;
      options.on_progress(progress);
    }
    // Stopped early (SIGTERM): leave without a last sync the others are not ready for.
    if (result.stopped) local_sgd.Abandon();
    absl::Status last = local_sgd.Finish();
    if (averager != nullptr) {
      LOCALSGD_RETURN_IF_ERROR(averager->Health());
    }
    if (!last.ok()) {
      TrainProgress progress;
      progress.step = result.steps;
      progress.total_steps = total;
      progress.loss = result.loss;
      progress.synced = true;
      progress.sync_status = last;
      options.on_progress(progress);
    }
    Evaluation eval = Evaluate(model, data.test, options.device, spec.loss());
    result.test_accuracy = eval.accuracy;
    result.test_loss = eval.loss;
    // Over the whole training, syncs included (what LocalSGD costs shows here), periodic
    // evaluations excluded.
    const double seconds = absl::ToDoubleSeconds(absl::Now() - train_start - eval_time);
    result.samples_per_second = seconds > 0 ? static_cast<double>(total_samples) / seconds : 0;
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
