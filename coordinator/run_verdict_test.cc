#include "coordinator/run_verdict.h"

#include <limits>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

Member Reporting(double loss, bool finished = false) {
  Member member;
  member.loss = loss;
  member.finished = finished;
  return member;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(RunVerdictTest, ARunGoesOnWhileOneWorkerTrainsOnAFiniteLoss) {
  EXPECT_EQ(JudgeRun({Reporting(kNaN), Reporting(0.5)}, 1).kind, RunVerdict::Kind::kGoesOn);
  EXPECT_EQ(JudgeRun({Reporting(0.5, true), Reporting(0.4)}, 1).kind, RunVerdict::Kind::kGoesOn);
  EXPECT_EQ(JudgeRun({}, 0).kind, RunVerdict::Kind::kGoesOn);
}

TEST(RunVerdictTest, EveryWorkerOnANonFiniteLossIsDivergence) {
  const RunVerdict verdict = JudgeRun({Reporting(kNaN), Reporting(kInf), Reporting(-kInf)}, 3);
  EXPECT_EQ(verdict.kind, RunVerdict::Kind::kDiverged);
  EXPECT_NE(verdict.reason.find("diverged"), std::string::npos);
}

TEST(RunVerdictTest, EveryWorkerFinishedCompletesTheRunOnceThereAreEnough) {
  const RunVerdict verdict = JudgeRun({Reporting(0.3, true), Reporting(0.2, true)}, 2);
  EXPECT_EQ(verdict.kind, RunVerdict::Kind::kCompleted);
  EXPECT_EQ(verdict.reason, "every worker finished training");
  // Fewer than min_workers live: the others may still come.
  EXPECT_EQ(JudgeRun({Reporting(0.3, true)}, 2).kind, RunVerdict::Kind::kGoesOn);
}

}  // namespace
}  // namespace localsgd
