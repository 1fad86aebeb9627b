#include "worker/unsynced_bound.h"

#include <torch/torch.h>

#include <deque>
#include <vector>

#include "exchange/sync_stream.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

// The schedule of K steps (overlap tau, P fragments), checked.
RoundSchedule Schedule(int k, int tau = 0, int p = 1) {
  return RoundSchedule::Make(k, tau, p).value();
}

// Answers each Average with the next scripted outcome (OK once the script is used up).
class ScriptedAverager : public ParameterAverager {
 public:
  absl::Status Average(const std::vector<at::Tensor>&, int fragment, int64_t* step) override {
    steps.push_back(*step);
    fragments.push_back(fragment);
    if (outcomes.empty()) return absl::OkStatus();
    absl::Status next = outcomes.front();
    outcomes.pop_front();
    return next;
  }
  std::deque<absl::Status> outcomes;
  std::vector<int64_t> steps;
  std::vector<int> fragments;
};

UnsyncedBound Bound(int64_t steps) {
  UnsyncedBound bound;
  bound.max_unsynced_steps = steps;
  bound.retry_every = absl::Milliseconds(1);
  return bound;
}

// Steps once and applies the bound, as the trainer does.
absl::Status Step(LocalSGD& local_sgd, ScriptedAverager& averager, const UnsyncedBound& bound) {
  const int64_t completed = local_sgd.rounds_completed();
  absl::Status status = local_sgd.Step();
  return WaitWithinBound(local_sgd, &averager, bound, completed, std::move(status));
}

const absl::Status kDown = absl::UnavailableError("coordinator down");

TEST(UnsyncedBoundTest, PastTheBoundTheNodeWaitsForARound) {
  ScriptedAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({2})}, Schedule(2));
  averager.outcomes = {kDown, kDown, kDown, kDown};
  const UnsyncedBound bound = Bound(4);
  for (int i = 0; i < 3; ++i) Step(local_sgd, averager, bound).IgnoreError();
  EXPECT_EQ(local_sgd.unsynced_steps(), 3);            // the round at 2 failed: training went on
  EXPECT_TRUE(Step(local_sgd, averager, bound).ok());  // 4 failed, then 4 again: 2 more fail
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 4, 4, 4}));
  EXPECT_EQ(local_sgd.unsynced_steps(), 0);
  EXPECT_EQ(local_sgd.steps(), 4);
}

// A leader cut off long enough to lose its lease joins again with a new credential; a sync
// made meanwhile with the old one is refused naming member_credential. That passes with the
// join: the wait goes on (the chaos soak saw a node train 20 steps alone under a bound of 16).
TEST(UnsyncedBoundTest, ASyncWithTheCredentialARejoinReplacedIsTriedAgain) {
  ScriptedAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({2})}, Schedule(2));
  averager.outcomes = {kDown, kDown,
                       absl::PermissionDeniedError("member_credential: not the one the latest "
                                                   "Join gave \"node-1/0\" (generation 16)")};
  const UnsyncedBound bound = Bound(4);
  for (int i = 0; i < 3; ++i) Step(local_sgd, averager, bound).IgnoreError();
  EXPECT_TRUE(Step(local_sgd, averager, bound).ok());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 4, 4}));
  EXPECT_EQ(local_sgd.unsynced_steps(), 0);
}

TEST(UnsyncedBoundTest, ARoundCommittedWithoutTheNodeEndsTheWait) {
  ScriptedAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({2})}, Schedule(2));
  v1::StaleRound stale;
  stale.set_committed_round(9);
  averager.outcomes = {kDown, kDown, StaleRoundError(stale, "round 9 committed")};
  const UnsyncedBound bound = Bound(4);
  for (int i = 0; i < 3; ++i) Step(local_sgd, averager, bound).IgnoreError();
  EXPECT_TRUE(StaleRoundOf(Step(local_sgd, averager, bound)).has_value());
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 4}));
  EXPECT_EQ(local_sgd.unsynced_steps(), 0);  // it took the run's model
}

TEST(UnsyncedBoundTest, WithinTheBoundOrWithoutOneTrainingGoesOn) {
  for (int64_t max : {0, 5}) {
    ScriptedAverager averager;
    LocalSGD local_sgd(&averager, {torch::zeros({2})}, Schedule(2));
    averager.outcomes = {kDown, kDown};
    for (int i = 0; i < 4; ++i) Step(local_sgd, averager, Bound(max)).IgnoreError();
    EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4})) << max;
    EXPECT_EQ(local_sgd.unsynced_steps(), 4) << max;
  }
}

TEST(UnsyncedBoundTest, AnErrorNoRetryMendsOrAStopEndsTheWait) {
  ScriptedAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({2})}, Schedule(2));
  averager.outcomes = {kDown, absl::InvalidArgumentError("vector_length: 2, the run's 3")};
  for (int i = 0; i < 4; ++i) Step(local_sgd, averager, Bound(2)).IgnoreError();
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 2, 4}));  // waited at 2, not at 4

  ScriptedAverager stopped;
  LocalSGD other(&stopped, {torch::zeros({2})}, Schedule(2));
  stopped.outcomes = {kDown, kDown, kDown};
  UnsyncedBound bound = Bound(2);
  bound.stop = [] { return true; };
  for (int i = 0; i < 2; ++i) Step(other, stopped, bound).IgnoreError();
  EXPECT_EQ(stopped.steps, (std::vector<int64_t>{2}));
}

// Waiting, a round of another fragment open is joined with that fragment.
TEST(UnsyncedBoundTest, AWaitingCopyJoinsAnOpenRoundOfAnotherFragment) {
  ScriptedAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({4})}, Schedule(4, 0, 2));
  v1::RoundFragment open;
  open.set_round(4);
  open.set_fragment(1);
  averager.outcomes = {kDown, kDown, WithRoundFragment(absl::FailedPreconditionError("f"), open)};
  for (int i = 0; i < 4; ++i) Step(local_sgd, averager, Bound(4)).IgnoreError();
  // Fragment 1 at 2 and fragment 0 at 4 failed; waiting at 4: fragment 0 is refused for the
  // open round's 1, which this copy joins then.
  EXPECT_EQ(averager.steps, (std::vector<int64_t>{2, 4, 4, 4}));
  EXPECT_EQ(averager.fragments, (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(local_sgd.unsynced_steps(), 0);
}

TEST(UnsyncedBoundTest, AResumedCopyCountsFromItsFirstStep) {
  ScriptedAverager averager;
  LocalSGD local_sgd(&averager, {torch::zeros({2})}, Schedule(2), true, /*first_step=*/100);
  EXPECT_EQ(local_sgd.unsynced_steps(), 0);
  local_sgd.Step().IgnoreError();
  EXPECT_EQ(local_sgd.unsynced_steps(), 1);
}

}  // namespace
}  // namespace localsgd
