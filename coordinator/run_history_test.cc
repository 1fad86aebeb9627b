#include "coordinator/run_history.h"

#include <string>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

v1::RunInfo MakeRun(const std::string& id, v1::RunState state) {
  v1::RunInfo run;
  run.set_run_id(id);
  run.set_state(state);
  return run;
}

TEST(RunHistoryTest, NewestFirstAndARunIsUpdatedWhereItStands) {
  RunHistory history(RunHistory::Options{});
  history.Upsert(MakeRun("a", v1::RUN_STATE_RUNNING));
  history.Upsert(MakeRun("b", v1::RUN_STATE_RUNNING));
  v1::RunInfo done = MakeRun("a", v1::RUN_STATE_COMPLETED);
  done.set_final_test_accuracy(0.85);
  history.Upsert(done);
  ASSERT_EQ(history.runs().size(), 2u);
  EXPECT_EQ(history.runs()[0].run_id(), "b");
  EXPECT_EQ(history.runs()[1].run_id(), "a");
  EXPECT_EQ(history.runs()[1].state(), v1::RUN_STATE_COMPLETED);
  EXPECT_DOUBLE_EQ(history.Find("a")->final_test_accuracy(), 0.85);
  EXPECT_EQ(history.Find("c"), nullptr);
}

TEST(RunHistoryTest, RunsAndSeriesAreBoundedAndBelongToTheirRun) {
  RunHistory history(RunHistory::Options{.max_runs = 3, .max_series = 2, .max_points = 4});
  for (const char* id : {"r1", "r2", "r3", "r4"}) {
    history.Upsert(MakeRun(id, v1::RUN_STATE_RUNNING));
    history.StartSeries(id);
    for (int round = 1; round <= 10; ++round) {
      v1::SeriesPoint point;
      point.set_round(round);
      history.AddPoint(id, point);
    }
  }
  history.AddPoint("unknown", v1::SeriesPoint());  // ignored
  history.Upsert(MakeRun("restored", v1::RUN_STATE_COMPLETED));
  EXPECT_EQ(history.Series("restored"), nullptr);  // no series until StartSeries
  history.StartSeries("restored");
  EXPECT_NE(history.Series("restored"), nullptr);
  ASSERT_EQ(history.runs().size(), 3u);
  EXPECT_EQ(history.Find("r1"), nullptr);
  EXPECT_EQ(history.Find("r2"), nullptr);
  EXPECT_EQ(history.Series("r3"), nullptr);  // kept as a record, its series dropped
  ASSERT_NE(history.Series("r4"), nullptr);
  EXPECT_EQ(history.Series("r4")->added(), 10);
  EXPECT_LE(history.Series("r4")->Points().size(), 5u);
  EXPECT_EQ(history.Series("r4")->Points().back().round(), 10);
  EXPECT_EQ(history.Series("unknown"), nullptr);
}

}  // namespace
}  // namespace localsgd
