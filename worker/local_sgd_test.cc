#include "worker/local_sgd.h"

#include <torch/torch.h>

#include <vector>

#include "exchange/sync_stream.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

// The schedule of K steps (overlap tau, P fragments), checked.
RoundSchedule Schedule(int k, int tau = 0, int p = 1) {
  return RoundSchedule::Make(k, tau, p).value();
}

// Records the steps it was called at and sets every tensor to a marker value.
class FakeAverager : public ParameterAverager {
 public:
  absl::Status Average(const std::vector<at::Tensor>& tensors, int fragment,
                       int64_t* step) override {
    steps.push_back(*step);
    fragments.push_back(fragment);
    torch::NoGradGuard no_grad;
    for (const at::Tensor& t : tensors) t.fill_(static_cast<double>(*step) * scale);
    if (move_to >= 0) *step = move_to;
    trained.push_back(trained_steps);
    return status;
  }
  void SetTrainedSteps(int64_t steps) override { trained_steps = steps; }
  int64_t trained_steps = 0;
  std::vector<int64_t> trained;  // SetTrainedSteps's, by Average call
  std::vector<int64_t> steps;
  std::vector<int> fragments;
  int64_t move_to = -1;
  double scale = 1;
  absl::Status status;
};

TEST(LocalSgdTest, SyncsExactlyAtMultiplesOfK) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(4));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(w[0].item<float>(), 8.0f);  // tensors are averaged in place
  ASSERT_TRUE(local_sgd.Finish().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8, 10}));  // the final sync
  ASSERT_TRUE(local_sgd.Finish().ok());
  EXPECT_EQ(averager.steps.size(), 3u);  // idempotent
  EXPECT_EQ(local_sgd.syncs(), 3);
}

// A paced run's node that trains 3 steps a round (K = 8): after 3 optimizer steps it moves to
// the run's next round step and syncs there, weighed by the 3 steps; at the last step (not a
// round step) it stops there.
RoundPace PacedAt(int k, int tau, int p, int fixed, double seconds = 1) {
  v1::RunSpec spec;
  spec.set_local_sgd_steps(k);
  spec.set_overlap_steps(tau);
  spec.set_fragments(p);
  spec.set_round_seconds(seconds);
  return RoundPace::Of(spec, fixed).value();
}

// Not fixed, the round's time ends a window: one step when it is shorter than a step, every
// round's step when it is longer than the run.
TEST(LocalSgdTest, APacedCopysWindowIsTheRoundsTime) {
  for (int tau : {0, 2}) {
    FakeAverager averager;
    torch::Tensor w = torch::zeros({3});
    LocalSGD short_rounds(&averager, {w}, Schedule(8, tau), true, 0, PacedAt(8, tau, 1, 0, 1e-9));
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(short_rounds.Step().ok());
    EXPECT_EQ(short_rounds.steps(), 24) << tau;
    ASSERT_TRUE(short_rounds.Finish().ok());
    EXPECT_EQ(averager.trained, (std::vector<int64_t>{1, 1, 1})) << tau;
  }
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD long_rounds(&averager, {w}, Schedule(8), true, 0, PacedAt(8, 0, 1, 0, 3600));
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(long_rounds.Step().ok());
  EXPECT_EQ(long_rounds.steps(), 7);
  ASSERT_TRUE(long_rounds.Step().ok());
  EXPECT_EQ(averager.trained, (std::vector<int64_t>{8}));
}

TEST(LocalSgdTest, APacedCopyMovesToTheNextRoundStepAfterItsSteps) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(8), true, 0, PacedAt(8, 0, 1, 3));
  local_sgd.set_last_step(20);
  ASSERT_TRUE(local_sgd.Step().ok());
  ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(local_sgd.steps(), 2);
  ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(local_sgd.steps(), 8);
  EXPECT_EQ(local_sgd.paced_skip(), 5);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(local_sgd.steps(), 16);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(local_sgd.steps(), 20);  // held at the last step
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(averager.trained, (std::vector<int64_t>{3, 3}));
  ASSERT_TRUE(local_sgd.Finish().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{8, 16, 20}));
  EXPECT_EQ(averager.trained, (std::vector<int64_t>{3, 3, 3}));
}

// With fragments (K = 8, P = 2: a round every 4 steps), a fragment's delta covers every step
// since that fragment last synced: two rounds' worth; a round that failed leaves its steps to
// the fragment's next.
TEST(LocalSgdTest, APacedFragmentsDeltaCoversTheStepsSinceItLastSynced) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(8, 0, 2), true, 0, PacedAt(8, 0, 2, 2));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // step 4: fragment 1
  averager.status = absl::AbortedError("round aborted");
  for (int i = 0; i < 2; ++i) local_sgd.Step().IgnoreError();  // step 8: fragment 0, fails
  averager.status = absl::OkStatus();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // step 12: fragment 1
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // step 16: fragment 0
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8, 12, 16}));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 0, 1, 0}));
  EXPECT_EQ(averager.trained, (std::vector<int64_t>{2, 4, 4, 8}));
}

// K = 8, P = 4: a round every 2 steps, fragment f at the steps 2 f + 8 m; at the end every
// fragment not synced at the last step syncs once more.
TEST(LocalSgdTest, FragmentsSyncOneAtATimeOnTheirScheduleAndAllAtTheEnd) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(8, 0, 4));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 6, 8, 10}));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 2, 3, 0, 1}));
  ASSERT_TRUE(local_sgd.Finish().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 6, 8, 10, 10, 10, 10}));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 2, 3, 0, 1, 2, 3, 0}));  // from step 10's
}

// Issue 50, finding 3: a round refused because the open round carries another fragment moves
// the copy into the open round's phase, so that its next rounds carry the others' fragments.
TEST(LocalSgdTest, ARoundOfAnotherFragmentThanTheOpenOnesMovesIntoItsPhase) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(8, 0, 4));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // fragment 1 at step 2
  v1::RoundFragment open;
  open.set_round(7);
  open.set_fragment(3);
  averager.status = WithRoundFragment(absl::FailedPreconditionError("fragment: 2"), open);
  EXPECT_TRUE(absl::IsFailedPrecondition(local_sgd.Step()));  // step 4, fragment 2: refused
  EXPECT_EQ(local_sgd.steps(), 6);                            // where fragment 3 syncs
  averager.status = absl::OkStatus();
  ASSERT_TRUE(local_sgd.Step().ok());
  ASSERT_TRUE(local_sgd.Step().ok());  // step 8: fragment 0, as the others' next round
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 8}));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 2, 0}));
}

// No round's outcome takes a copy past the run's last step: it would train past the run and
// skip the run's last round (every fragment synced at the last step).
TEST(LocalSgdTest, NoRoundOutcomeTakesTheCopyPastTheLastStep) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(4, 0, 2));  // fragment 1 at 2, 6, ...
  local_sgd.set_last_step(9);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  v1::RoundFragment open;
  open.set_round(3);
  open.set_fragment(1);
  averager.status = WithRoundFragment(absl::FailedPreconditionError("fragment: 0"), open);
  EXPECT_TRUE(absl::IsFailedPrecondition(local_sgd.Step()));  // step 4, fragment 0: refused
  EXPECT_EQ(local_sgd.steps(), 6);                            // into the phase
  local_sgd.Step().IgnoreError();
  EXPECT_TRUE(absl::IsFailedPrecondition(local_sgd.Step()));  // step 8, fragment 0: refused
  EXPECT_EQ(local_sgd.steps(), 9);                            // 10 would pass the last step

  FakeAverager ahead;
  ahead.move_to = 8;  // the run's step, which the copy follows
  LocalSGD follower(&ahead, {w}, Schedule(4));
  follower.set_last_step(6);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(follower.Step().ok());
  EXPECT_EQ(follower.steps(), 6);
}

// Launches overlapped rounds and, at their merge, takes the run's step `adopt` (a stale
// round: the node adopted the run's committed model and its step).
class AdoptingAverager : public ParameterAverager {
 public:
  absl::Status Average(const std::vector<at::Tensor>&, int, int64_t*) override {
    return absl::OkStatus();
  }
  absl::Status Launch(const std::vector<at::Tensor>&, int fragment, int64_t* step) override {
    launches.push_back(*step);
    fragments.push_back(fragment);
    return absl::OkStatus();
  }
  absl::Status Merge(const std::vector<at::Tensor>&, int64_t* step) override {
    if (adopt >= 0) *step = adopt;
    adopt = -1;
    return absl::OkStatus();
  }
  std::vector<int64_t> launches;
  std::vector<int> fragments;
  int64_t adopt = -1;
};

// A merge that takes the run's step (a boundary: the round the run committed there) launches
// no round at that step: the next round is the run's next one, not the one it committed.
TEST(LocalSgdTest, AMergeThatTakesTheRunsStepLaunchesNoRoundThere) {
  AdoptingAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({3})}, Schedule(4, 1, 2));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // launches at 2, fragment 1
  averager.adopt = 4;  // the run committed fragment 0 at step 4 meanwhile
  ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(local_sgd.steps(), 4);
  EXPECT_FALSE(local_sgd.round_in_flight());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(averager.launches, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 1}));
}

// A last sync that finds the run ended (its final model taken) ends the fragments' syncs.
TEST(LocalSgdTest, AFragmentSyncThatFindsTheRunEndedStopsTheLastSyncs) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(4, 0, 2));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  averager.status = absl::OutOfRangeError("the run ended");
  EXPECT_TRUE(absl::IsOutOfRange(local_sgd.Finish()));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 1}));  // fragment 0 not tried
}

// The run's last syncs once more after one failed: the fragments whose last sync failed or
// was not at this step, not those that went through.
TEST(LocalSgdTest, ResyncRetriesTheFragmentsNotSyncedAtThisStep) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(4, 0, 2));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // f1 at 2, f0 at 4
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // f1 at 6
  averager.status = absl::UnavailableError("coordinator down");
  EXPECT_FALSE(local_sgd.Resync().ok());  // f0 (last synced at 4) fails
  averager.status = absl::OkStatus();
  EXPECT_TRUE(local_sgd.Resync().ok());  // f0 again, f1 is done at 6
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 0, 1, 0, 0}));
  EXPECT_TRUE(local_sgd.Resync().ok());  // nothing left
  EXPECT_EQ(averager.fragments.size(), 5u);
}

// A worker that rejoins a run at global step 40 syncs on the run's boundaries from there.
TEST(LocalSgdTest, ResumingAtAStepKeepsTheRunsBoundaries) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(8), /*enabled=*/true, /*first_step=*/40);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{48}));
  ASSERT_TRUE(local_sgd.Finish().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{48}));  // nothing new since the boundary
}

// A node that re-formed after a rank died goes on from its leader's step: the averager moves
// the step back (this rank had trained on past it), and the boundaries follow the new count.
TEST(LocalSgdTest, FollowsAStepTheAveragerSets) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({3});
  LocalSGD local_sgd(&averager, {w}, Schedule(4));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  averager.move_to = 4;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(local_sgd.Step().ok());  // syncs at 8, sent back to 4
  EXPECT_EQ(local_sgd.steps(), 4);
  averager.move_to = -1;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8, 8}));
  ASSERT_TRUE(local_sgd.Finish().ok());
  EXPECT_EQ(averager.steps.size(), 3u);  // step 8 was just synced
}

TEST(LocalSgdTest, NoFinalSyncRightAfterABoundary) {
  FakeAverager averager;
  {
    LocalSGD local_sgd(&averager, {torch::zeros({1})}, Schedule(2));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  }  // the destructor finishes: nothing new since step 4
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4}));
}

TEST(LocalSgdTest, DestructorRunsTheLastSync) {
  FakeAverager averager;
  {
    LocalSGD local_sgd(&averager, {torch::zeros({1})}, Schedule(8));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  }
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{5}));
}

TEST(LocalSgdTest, AbandonSkipsTheLastSync) {
  FakeAverager averager;
  {
    LocalSGD local_sgd(&averager, {torch::zeros({1})}, Schedule(4));
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(local_sgd.Step().ok());
    local_sgd.Abandon();
    ASSERT_TRUE(local_sgd.Finish().ok());
  }
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4}));
}

TEST(LocalSgdTest, DisabledNeverCommunicates) {
  FakeAverager averager;
  {
    LocalSGD local_sgd(&averager, {torch::zeros({1})}, Schedule(1), /*enabled=*/false);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(local_sgd.Step().ok());
    ASSERT_TRUE(local_sgd.Finish().ok());
  }
  EXPECT_TRUE(averager.steps.empty());
}

TEST(LocalSgdTest, CountsOptimizerStepsNotMicroBatches) {
  // A real training loop with 3 micro-batches of gradient accumulation per optimizer step.
  torch::manual_seed(0);
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  FakeAverager averager;
  LocalSGD local_sgd(&averager, model->parameters(), Schedule(2));
  int micro_batches = 0;
  for (int step = 0; step < 6; ++step) {
    for (int m = 0; m < 3; ++m) {
      torch::Tensor loss = model->forward(torch::randn({5, 4})).pow(2).mean() / 3;
      loss.backward();
      ++micro_batches;
    }
    optimizer.step();
    optimizer.zero_grad();
    ASSERT_TRUE(local_sgd.Step().ok());
  }
  EXPECT_EQ(micro_batches, 18);
  EXPECT_EQ(local_sgd.steps(), 6);
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 6}));
}

TEST(LocalSgdTest, AveragerErrorsReachTheCaller) {
  FakeAverager averager;
  averager.status = absl::AbortedError("round aborted");
  LocalSGD local_sgd(&averager, {torch::zeros({1})}, Schedule(1));
  EXPECT_EQ(local_sgd.Step().code(), absl::StatusCode::kAborted);
  averager.status = absl::OkStatus();
  EXPECT_TRUE(local_sgd.Step().ok());  // and training goes on
}

// Overlapped rounds: the round of step s is launched there and merged at s + tau, keeping the
// progress made meanwhile (w <- G' + (w - w_s)); Finish merges a round in flight, then syncs.
TEST(LocalSgdTest, OverlappedRoundsMergeTauStepsLater) {
  FakeAverager averager;  // the "committed model" of step s is 100 * s everywhere
  averager.scale = 100;
  torch::Tensor w = torch::zeros({2});
  LocalSGD local_sgd(&averager, {w}, Schedule(4, 2));
  auto train_step = [&] {
    torch::NoGradGuard no_grad;
    w.add_(1);
    return local_sgd.Step();
  };
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(train_step().ok());
  EXPECT_TRUE(local_sgd.round_in_flight());
  EXPECT_EQ(w[0].item<float>(), 4.0f);  // launched, not applied
  ASSERT_TRUE(train_step().ok());
  EXPECT_EQ(w[0].item<float>(), 5.0f);
  const int64_t completed = local_sgd.rounds_completed();
  ASSERT_TRUE(train_step().ok());  // step 6 = 4 + tau: merged
  EXPECT_FALSE(local_sgd.round_in_flight());
  EXPECT_EQ(local_sgd.rounds_completed(), completed + 1);
  EXPECT_EQ(w[0].item<float>(), 402.0f);                       // 400 + (6 - 4)
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(train_step().ok());  // launches at 8
  EXPECT_EQ(w[0].item<float>(), 405.0f);
  ASSERT_TRUE(local_sgd.Finish().ok());  // step 9: merge (800 + 1), then the last sync
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4, 8, 9}));
  EXPECT_EQ(w[0].item<float>(), 900.0f);
}

TEST(LocalSgdTest, ARoundThatFailsLeavesTheModelAndIsNotMerged) {
  FakeAverager averager;
  averager.scale = 100;
  averager.status = absl::AbortedError("round aborted");
  torch::Tensor w = torch::zeros({1});
  LocalSGD local_sgd(&averager, {w}, Schedule(2, 1));
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 2; ++i) {
    w.add_(1);
    ASSERT_TRUE(local_sgd.Step().ok());  // the launch itself goes through
  }
  w.add_(1);
  EXPECT_EQ(local_sgd.Step().code(), absl::StatusCode::kAborted);  // step 3: the merge
  EXPECT_EQ(w[0].item<float>(), 3.0f);                             // its own values
  w.add_(1);
  ASSERT_TRUE(local_sgd.Step().ok());  // step 4: launched again
  EXPECT_EQ(local_sgd.MergeNow().code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(local_sgd.round_in_flight());
  ASSERT_EQ(local_sgd.Finish().code(), absl::StatusCode::kOk);  // nothing since step 4
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4}));
}

TEST(LocalSgdTest, OverlapZeroIsThePlainAlgorithm) {
  FakeAverager averager;
  torch::Tensor w = torch::zeros({1});
  LocalSGD local_sgd(&averager, {w}, Schedule(4));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(local_sgd.Step().ok());
  EXPECT_FALSE(local_sgd.round_in_flight());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{4}));
  EXPECT_EQ(w[0].item<float>(), 4.0f);
}

}  // namespace
}  // namespace localsgd
