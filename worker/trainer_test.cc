#include "worker/trainer.h"

#include <torch/types.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/run_spec.h"
#include "gtest/gtest.h"
#include "worker/flat_model.h"

namespace localsgd {
namespace {

// Records the step of every sync; changes nothing.
class CountingAverager : public ParameterAverager {
 public:
  absl::Status Average(const std::vector<at::Tensor>&, int, int64_t* step) override {
    steps.push_back(*step);
    return absl::OkStatus();
  }
  std::vector<int64_t> steps;
};

v1::RunSpec Spec(int accumulation) {
  v1::RunSpec spec;
  spec.mutable_model()->set_builtin("mlp");
  spec.mutable_dataset()->set_synthetic_samples(256);
  spec.set_batch_size(16);
  spec.set_gradient_accumulation_steps(accumulation);
  spec.set_total_steps(12);
  spec.set_local_sgd_steps(4);
  spec.mutable_optimizer()->set_lr(0.05);
  absl::StatusOr<v1::RunSpec> normalized = NormalizeRunSpec(spec);
  EXPECT_TRUE(normalized.ok()) << normalized.status();
  return *normalized;
}

struct Outcome {
  TrainResult result;
  std::vector<int64_t> progress_steps;
  std::vector<int64_t> synced_steps;
  std::vector<int64_t> evaluated_steps;
};

// The steps as the replica makes them, over `averager`, from `first_step`.
std::unique_ptr<TrainingSteps> StepsOf(const v1::RunSpec& spec, Model& model,
                                       CountingAverager* averager, int64_t first_step = 0) {
  TrainingSteps::Options options;
  options.schedule =
      RoundSchedule::Make(spec.local_sgd_steps(), spec.overlap_steps(), spec.fragments()).value();
  options.enabled = spec.enabled();
  options.first_step = first_step;
  return std::make_unique<TrainingSteps>(averager, ModelTensors(model, spec.average_buffers()),
                                         std::move(options));
}

Outcome RunTrain(TrainOptions options, CountingAverager* averager, int64_t first_step = 0) {
  auto model = MakeModel(options.spec.model(), options.spec.seed());
  EXPECT_TRUE(model.ok());
  auto data = LoadData(options.spec.dataset(), options.spec.seed());
  EXPECT_TRUE(data.ok());
  Outcome outcome;
  options.on_progress = [&](const TrainProgress& p) {
    EXPECT_EQ(p.total_steps, options.spec.duration_case() == v1::RunSpec::kTotalSteps
                                 ? options.spec.total_steps()
                                 : p.total_steps);
    outcome.progress_steps.push_back(p.step);
    if (p.synced) outcome.synced_steps.push_back(p.step);
    if (p.evaluated) {
      outcome.evaluated_steps.push_back(p.step);
      EXPECT_GT(p.test_accuracy, 0);
      EXPECT_TRUE(std::isfinite(p.test_loss));
    }
  };
  auto steps = StepsOf(options.spec, **model, averager, first_step);
  absl::StatusOr<TrainResult> result = Train(**model, *data, *steps, options);
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) outcome.result = *result;
  return outcome;
}

TEST(TrainerTest, TrainsItsStepsAndSyncsEveryLocalSgdSteps) {
  CountingAverager averager;
  TrainOptions options;
  options.spec = Spec(2);
  Outcome outcome = RunTrain(options, &averager);
  EXPECT_EQ(outcome.result.steps, 12);
  EXPECT_FALSE(outcome.result.stopped);
  EXPECT_EQ(outcome.progress_steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(outcome.synced_steps, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_GT(outcome.result.test_accuracy, 0);
  EXPECT_TRUE(std::isfinite(outcome.result.loss));
}

// Overlapped rounds: launched at 4 and 8, merged 3 steps later (the round of step 8 at the last
// step, 10, where it must be merged before the run ends), then the last sync at 10.
TEST(TrainerTest, OverlappedRoundsEndAtTheirMergeAndTheRunEndsOnALastSync) {
  CountingAverager averager;  // the default Launch runs Average at once
  TrainOptions options;
  options.spec = Spec(1);
  options.spec.set_total_steps(10);
  options.spec.set_overlap_steps(3);
  Outcome outcome = RunTrain(options, &averager);
  EXPECT_EQ(outcome.result.steps, 10);
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8, 10}));
  EXPECT_EQ(outcome.synced_steps, (std::vector<int64_t>{7, 10}));
}

TEST(TrainerTest, EvaluatesEveryEvalEveryRoundsRounds) {
  CountingAverager averager;
  TrainOptions options;
  options.spec = Spec(1);
  options.spec.set_total_steps(24);
  options.spec.set_eval_every_rounds(2);  // rounds end at steps 4, 8, ..., 24
  Outcome outcome = RunTrain(options, &averager);
  EXPECT_EQ(outcome.evaluated_steps, (std::vector<int64_t>{8, 16, 24}));
  // Without eval_every_rounds, only the final evaluation (in the result).
  CountingAverager quiet;
  options.spec.set_eval_every_rounds(0);
  EXPECT_TRUE(RunTrain(options, &quiet).evaluated_steps.empty());
}

TEST(TrainerTest, AnEpochIsTheShardOverBatchTimesAccumulation) {
  // 256 samples over 2 ranks: 128 per shard; 16 x 2 samples per optimizer step: 4 steps per
  // epoch, 8 for two. Without accumulation: 8 per epoch, 16 for two.
  for (int accumulation : {2, 1}) {
    CountingAverager averager;
    TrainOptions options;
    options.spec = Spec(accumulation);
    options.spec.set_epochs(2);
    options.world_size = 2;
    options.global_rank = 1;
    Outcome outcome = RunTrain(options, &averager);
    EXPECT_EQ(outcome.result.steps, accumulation == 2 ? 8 : 16) << accumulation;
    EXPECT_EQ(averager.steps.back(), outcome.result.steps);
  }
}

TEST(TrainerTest, AStopEndsTrainingWithoutALastSync) {
  CountingAverager averager;
  TrainOptions options;
  options.spec = Spec(1);
  int steps = 0;
  options.stop = [&] { return steps >= 6; };
  auto model = MakeModel(options.spec.model(), 0);
  ASSERT_TRUE(model.ok());
  auto data = LoadData(options.spec.dataset(), 0);
  ASSERT_TRUE(data.ok());
  options.on_progress = [&](const TrainProgress& p) { steps = static_cast<int>(p.step); };
  auto training = StepsOf(options.spec, **model, &averager);
  absl::StatusOr<TrainResult> result = Train(**model, *data, *training, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->stopped);
  EXPECT_EQ(result->steps, 6);
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4}));
}

TEST(TrainerTest, AWorkerThatRejoinsGoesOnFromTheRunsStep) {
  CountingAverager averager;
  TrainOptions options;
  options.spec = Spec(1);
  Outcome outcome = RunTrain(options, &averager, /*first_step=*/8);
  EXPECT_EQ(outcome.result.steps, 12);
  EXPECT_EQ(outcome.progress_steps, (std::vector<int64_t>{9, 10, 11, 12}));
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{12}));
}

// A model whose forward throws what the TorchScript interpreter throws (std::runtime_error) at
// its n-th call.
class ThrowingModel : public Model {
 public:
  ThrowingModel(std::unique_ptr<Model> inner, int fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}
  torch::Tensor Forward(const torch::Tensor& input) override {
    if (++calls_ == fail_at_) throw std::runtime_error("mat1 and mat2 shapes cannot be multiplied");
    return inner_->Forward(input);
  }
  std::vector<torch::Tensor> Parameters() override { return inner_->Parameters(); }
  std::vector<torch::Tensor> Buffers() override { return inner_->Buffers(); }
  void Train(bool on) override { inner_->Train(on); }
  void To(const torch::Device& device) override { inner_->To(device); }
  absl::Status Save(const std::string& path, const SaveInfo& info) override {
    return inner_->Save(path, info);
  }

 private:
  std::unique_ptr<Model> inner_;
  int fail_at_;
  int calls_ = 0;
};

TEST(TrainerTest, AnExceptionFromTheModelIsAnErrorWithItsMessage) {
  CountingAverager averager;
  TrainOptions options;
  options.spec = Spec(1);
  auto model = MakeModel(options.spec.model(), 0);
  ASSERT_TRUE(model.ok());
  ThrowingModel throwing(std::move(*model), 3);
  auto data = LoadData(options.spec.dataset(), 0);
  ASSERT_TRUE(data.ok());
  options.on_progress = [](const TrainProgress&) {};
  auto training = StepsOf(options.spec, throwing, &averager);
  absl::StatusOr<TrainResult> result = Train(throwing, *data, *training, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            "training failed: mat1 and mat2 shapes cannot be multiplied");
}

}  // namespace
}  // namespace localsgd
