#include "worker/training_steps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace localsgd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Adds 1 to every value at each sync and records its step; `outcome` scripts what a sync at a
// step returns (and where it moves the step).
class ScriptedAverager : public ParameterAverager {
 public:
  absl::Status Average(const std::vector<at::Tensor>& tensors, int, int64_t* step) override {
    steps.push_back(*step);
    if (auto it = move_to.find(*step); it != move_to.end()) *step = it->second;
    if (auto it = outcome.find(steps.back()); it != outcome.end()) return it->second;
    for (const at::Tensor& t : tensors) t.add_(1);
    return absl::OkStatus();
  }
  absl::Status Health() const override { return health; }

  std::vector<int64_t> steps;
  std::map<int64_t, absl::Status> outcome;
  std::map<int64_t, int64_t> move_to;
  absl::Status health;
};

struct Fixture {
  explicit Fixture(int64_t k = 4) {
    options.schedule = RoundSchedule::Make(k).value();
    options.on_step = [this](int64_t step, int64_t unsynced) {
      reported.emplace_back(step, unsynced);
    };
  }
  TrainingSteps Make() { return TrainingSteps(&averager, {weights}, options); }

  ScriptedAverager averager;
  at::Tensor weights = torch::zeros({3});
  TrainingSteps::Options options;
  std::vector<std::pair<int64_t, int64_t>> reported;
};

TEST(TrainingStepsTest, SyncsEveryLocalSgdStepsAndReportsEachStep) {
  Fixture f;
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(steps.Step().ok());
  EXPECT_THAT(f.averager.steps, ElementsAre(4, 8));
  EXPECT_EQ(steps.rounds_completed(), 2);
  EXPECT_EQ(f.reported.back(), std::make_pair(int64_t{9}, int64_t{1}));
  EXPECT_EQ(f.reported.size(), 9u);
  // The last sync: step 9 took steps since the round of step 8.
  ASSERT_TRUE(steps.Finish().ok());
  EXPECT_THAT(f.averager.steps, ElementsAre(4, 8, 9));
  EXPECT_FLOAT_EQ(f.weights[0].item<float>(), 3);
  EXPECT_FALSE(steps.stopped_early());
}

TEST(TrainingStepsTest, APassingFailureIsTrainedThrough) {
  Fixture f;
  f.averager.outcome[4] = absl::UnavailableError("the coordinator is restarting");
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(steps.Step().ok());
  EXPECT_EQ(steps.steps(), 5);
  EXPECT_EQ(f.reported.back().second, 5);  // not synced since the start
}

// Past max_unsynced_steps a copy waits for a round; a stop (a signal) ends that wait.
TEST(TrainingStepsTest, AStopEndsTheWaitWithinTheUnsyncedBound) {
  Fixture f;
  f.options.max_unsynced_steps = 8;
  std::atomic<bool> stop{false};
  f.options.stop = [&] { return stop.load(); };
  for (int64_t step : {4, 8}) f.averager.outcome[step] = absl::AbortedError("quorum lost");
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(steps.Step().ok());  // round 4 failed: 7 steps alone
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  const absl::Status waited = steps.Step();  // step 8: 8 alone, past the bound: it waits
  stopper.join();
  EXPECT_TRUE(waited.ok()) << waited;  // the round's failure is logged; the caller sees the stop
  EXPECT_EQ(steps.steps(), 8);
}

TEST(TrainingStepsTest, FollowsTheRunsStep) {
  Fixture f;
  f.averager.move_to[4] = 12;  // the run was ahead: this copy takes its model and step
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(steps.Step().ok());
  EXPECT_EQ(steps.steps(), 12);
  ASSERT_TRUE(steps.Step().ok());
  EXPECT_EQ(steps.steps(), 13);
}

TEST(TrainingStepsTest, TheRunEndingWithThisCopyHoldsItsModel) {
  Fixture f;
  f.averager.outcome[4] = absl::OutOfRangeError("the run ended");
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(steps.Step().ok());
  EXPECT_TRUE(absl::IsOutOfRange(steps.Step()));
  EXPECT_TRUE(steps.ended());
  EXPECT_FALSE(steps.halted());
  EXPECT_FALSE(steps.stopped_early());
  EXPECT_TRUE(absl::IsOutOfRange(steps.Step()));  // and stays ended
}

TEST(TrainingStepsTest, AHaltedRunEndsTheStepsWithoutALastSync) {
  Fixture f;
  bool stopped = false;
  f.options.halted = [&] {
    return stopped ? absl::OutOfRangeError("run r ended (RUN_STATE_STOPPED): operator")
                   : absl::OkStatus();
  };
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(steps.Step().ok());
  stopped = true;
  absl::Status status = steps.Step();
  // The halt is asked at most every 100 ms: steps go on until then.
  while (status.ok()) {
    absl::SleepFor(absl::Milliseconds(20));
    status = steps.Step();
  }
  EXPECT_TRUE(absl::IsOutOfRange(status));
  EXPECT_THAT(status.message(), HasSubstr("RUN_STATE_STOPPED"));
  EXPECT_TRUE(steps.halted());
  EXPECT_TRUE(steps.stopped_early());
  const std::vector<int64_t> synced = f.averager.steps;
  ASSERT_TRUE(steps.Finish().ok());
  EXPECT_EQ(f.averager.steps, synced);  // no last sync
}

TEST(TrainingStepsTest, AnAbandonedCopyDoesNoLastSync) {
  Fixture f;
  TrainingSteps steps = f.Make();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(steps.Step().ok());
  steps.Abandon();
  ASSERT_TRUE(steps.Finish().ok());
  EXPECT_THAT(f.averager.steps, ElementsAre(4));
  EXPECT_TRUE(steps.stopped_early());
}

TEST(TrainingStepsTest, TheLastStepSyncsEveryFragmentAndABrokenNodeIsAnError) {
  Fixture f;
  TrainingSteps steps = f.Make();
  steps.set_last_step(6);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(steps.Step().ok());
  EXPECT_THAT(f.averager.steps, ElementsAre(4, 6));  // the run's last round at its last step
  ASSERT_TRUE(steps.Finish().ok());
  EXPECT_THAT(f.averager.steps, ElementsAre(4, 6));  // nothing left to sync
  Fixture broken;
  broken.averager.health = absl::InternalError("rank 1 of the node died");
  TrainingSteps failing = broken.Make();
  EXPECT_THAT(failing.Step().message(), HasSubstr("rank 1"));
  EXPECT_THAT(failing.Finish().message(), HasSubstr("rank 1"));
}

}  // namespace
}  // namespace localsgd
