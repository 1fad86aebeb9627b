#include "coordinator/status_page.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

PageData Sample() {
  PageData data;
  v1::RunInfo* run = data.status.mutable_run();
  run->set_run_id("run-1");
  run->set_state(v1::RUN_STATE_RUNNING);
  run->set_round(7);
  run->set_global_step(56);
  run->set_total_steps(200);
  run->mutable_spec()->set_name("<script>alert(1)</script>");
  run->mutable_spec()->mutable_model()->set_builtin("mlp");
  run->mutable_spec()->set_codec(v1::CODEC_INT8);
  run->mutable_spec()->set_exchange(v1::EXCHANGE_SHARDED);
  v1::RunProgress* progress = data.status.mutable_progress();
  progress->set_global_step(56);
  progress->set_total_steps(200);
  progress->set_percent(28);
  progress->set_elapsed_seconds(70);
  progress->set_eta_seconds(180);
  v1::MemberStatus* member = data.status.add_members();
  member->set_worker_id("node-0/0");
  member->set_step(60);
  member->set_heartbeat_age_seconds(30);  // late
  member->set_test_accuracy(0.8123);
  member->set_unsynced_steps(12);
  v1::Event* event = data.status.add_events();
  event->set_severity(v1::EVENT_SEVERITY_ERROR);
  event->set_kind("worker_failed");
  event->set_text("worker node-1/0 left: failed: dataset.path: cannot open /nope");
  for (int r = 1; r <= 3; ++r) {
    v1::SeriesPoint* point = data.series.add_points();
    point->set_round(r);
    point->set_global_step(8 * r);
    point->set_loss_mean(1.0 / r);
    point->set_loss_min(0.9 / r);
    point->set_loss_max(1.1 / r);
    point->set_duration_seconds(0.5);
    point->set_slowest_wait_seconds(0.2);
    point->set_bytes_received(1000);
  }
  v1::RoundRecord* round = data.status.add_recent_rounds();
  round->set_round(6);
  round->set_outcome(v1::ROUND_OUTCOME_COMMITTED);
  round->set_exchange(v1::EXCHANGE_SHARDED);
  round->set_ring(true);
  v1::DroppedMember* suspended = round->add_suspended();
  suspended->set_member_id("node-3/0");
  suspended->set_reason("suspended from rounds for another 20s");
  for (const auto& [id, steps] : {std::pair<const char*, int>{"node-0/0", 8}, {"node-1/0", 2}}) {
    v1::MemberShare* share = round->add_shares();
    share->set_member_id(id);
    share->set_workers(2);
    share->set_steps(steps);
    share->set_weight(2 * steps);
  }
  data.runs.push_back(*run);
  return data;
}

TEST(StatusPageTest, ShowsProgressNumbersChartsMembersAndFailures) {
  const std::string page = StatusPage(Sample());
  EXPECT_THAT(page, HasSubstr("<span id=\"run-state\" class=\"state RUNNING\">RUNNING</span>"));
  EXPECT_THAT(page, HasSubstr("<b id=\"round\">7</b>"));
  EXPECT_THAT(page, HasSubstr("<b id=\"global-step\">56</b>"));
  EXPECT_THAT(page, HasSubstr("<b id=\"members-count\">1</b>"));
  EXPECT_THAT(page, HasSubstr("<b id=\"accuracy\">0.8123</b>"));
  EXPECT_THAT(page, HasSubstr("<td class=\"unsynced\">12</td>"));  // steps trained alone
  EXPECT_THAT(page, HasSubstr("data-percent=\"28.0\""));
  EXPECT_THAT(page, HasSubstr("<span id=\"eta\">3 min 00 s</span>"));
  EXPECT_THAT(page, HasSubstr("<span id=\"elapsed\">1 min 10 s</span>"));
  EXPECT_THAT(page, HasSubstr("codec INT8"));
  EXPECT_THAT(page, HasSubstr("exchange SHARDED"));
  EXPECT_THAT(page, HasSubstr("<td>SHARDED (ring)</td>"));  // the round's schedule
  EXPECT_THAT(page, HasSubstr("node-3/0 (suspended): suspended from rounds for another 20s"));
  EXPECT_THAT(page, HasSubstr("<td>node-0/0 8 (16), node-1/0 2 (4)</td>"));  // paced shares
  EXPECT_THAT(page, HasSubstr("id=\"chart-loss\" data-points=\"3\""));
  EXPECT_THAT(page, HasSubstr("id=\"chart-round-time\" data-points=\"3\""));
  EXPECT_THAT(page, HasSubstr("id=\"chart-accuracy\" data-points=\"0\""));
  EXPECT_THAT(page, HasSubstr("<tr class=\"late\" data-worker=\"node-0/0\">"));
  EXPECT_THAT(page, HasSubstr("<li class=\"error\" data-kind=\"worker_failed\">"));
  EXPECT_THAT(page, HasSubstr("cannot open /nope"));
  // Self-contained and escaped.
  EXPECT_THAT(page, Not(HasSubstr("http://")));
  EXPECT_THAT(page, Not(HasSubstr("https://")));
  EXPECT_THAT(page, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(page, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
  // The body alone is what the script swaps in.
  EXPECT_THAT(StatusPageBody(Sample()), Not(HasSubstr("<html")));
}

TEST(StatusPageTest, ChartsHaveAxisTitlesTicksAndTheWaitingShare) {
  const std::string page = StatusPage(Sample());
  // Loss from 0.3 to 1.1, steps 8 to 24: ticks 0.2 apart from 0.2 to 1.2, and steps 10, 15, 20.
  EXPECT_THAT(page, HasSubstr("id=\"chart-loss\" data-points=\"3\" data-x-ticks=\"3\" "
                              "data-y-ticks=\"6\""));
  EXPECT_THAT(page, HasSubstr("text-anchor=\"end\">0.6</text>"));
  EXPECT_THAT(page, HasSubstr("text-anchor=\"middle\">15</text>"));
  EXPECT_THAT(page, HasSubstr("<text class=\"x-title\""));
  EXPECT_THAT(page, HasSubstr("rotate(-90)\" text-anchor=\"middle\">loss</text>"));
  EXPECT_THAT(page, HasSubstr("rotate(-90)\" text-anchor=\"middle\">seconds</text>"));
  // 0.2 s of every 0.5 s round.
  EXPECT_THAT(page, HasSubstr("<b id=\"waiting-share\">40.0%</b>"));
  // Byte ticks read as bytes.
  EXPECT_THAT(page, HasSubstr(">500 B</text>"));
}

TEST(StatusPageTest, ALongFirstRoundDoesNotFlattenTheOthers) {
  PageData data = Sample();
  data.series.clear_points();
  for (int r = 1; r <= 20; ++r) {
    v1::SeriesPoint* point = data.series.add_points();
    point->set_global_step(8 * r);
    point->set_duration_seconds(r == 1 ? 5.0 : 0.1);
    point->set_slowest_wait_seconds(r == 1 ? 0 : 0.05);
  }
  const std::string page = StatusPage(data);
  // The axis stops at 0.2 s (twice the 90th percentile), not 5 s; the long bar is cut.
  EXPECT_THAT(page, HasSubstr("text-anchor=\"end\">0.20</text>"));
  EXPECT_THAT(page, Not(HasSubstr("text-anchor=\"end\">5.0</text>")));
  EXPECT_THAT(page, HasSubstr("1 longer bar cut at the top"));
  EXPECT_THAT(page, HasSubstr("step 8: transfer and averaging 5.000 s"));
}

TEST(StatusPageTest, BytesChartShowsWhatTheModeMoves) {
  PageData star = Sample();
  for (v1::SeriesPoint& point : *star.series.mutable_points()) point.set_bytes_sent(2000);
  std::string page = StatusPage(star);
  EXPECT_THAT(page, HasSubstr("coordinator received</span>"));
  EXPECT_THAT(page, HasSubstr("coordinator sent</span>"));
  EXPECT_THAT(page, Not(HasSubstr("range owners")));
  // Sharded: the coordinator sends nothing; the data plane carries the round.
  PageData sharded = Sample();
  for (v1::SeriesPoint& point : *sharded.series.mutable_points()) {
    point.set_owner_bytes_received(40000);
    point.set_owner_bytes_sent(40000);
  }
  page = StatusPage(sharded);
  EXPECT_THAT(page, HasSubstr("range owners received (data plane)</span>"));
  EXPECT_THAT(page, HasSubstr("range owners sent (data plane)</span>"));
  EXPECT_THAT(page, Not(HasSubstr("coordinator sent")));
  EXPECT_THAT(page, Not(HasSubstr(": coordinator sent 0 B")));
}

TEST(StatusPageTest, AfterTheEndShowsTheFinalEvaluationAndTheMembersLastFigures) {
  PageData data = Sample();
  v1::RunInfo* run = data.status.mutable_run();
  run->set_state(v1::RUN_STATE_COMPLETED);
  run->set_final_test_accuracy(0.8699);
  data.status.clear_members();
  v1::MemberResult* result = run->add_member_results();
  result->set_worker_id("node-0/0");
  result->set_hostname("gpu-host-7");
  result->set_step(200);
  result->set_samples_per_second(1234.5);
  result->set_test_accuracy(0.8699);
  result->set_left_reason("finished");
  run->mutable_checkpoint()->set_round(7);
  run->mutable_checkpoint()->set_global_step(56);
  run->mutable_checkpoint()->set_path("/ckpt/<node-0>/checkpoint.bin");
  run->mutable_checkpoint()->set_worker_id("node-0/0");
  const std::string page = StatusPage(data);
  EXPECT_THAT(page, HasSubstr("checkpoint of round 7 (global step 56) in <code "
                              "id=\"checkpoint-path\">/ckpt/&lt;node-0&gt;/checkpoint.bin</code> "
                              "on node-0/0"));
  EXPECT_THAT(page, HasSubstr("id=\"chart-accuracy\" data-points=\"1\""));
  EXPECT_THAT(page, HasSubstr("<title>final model: 0.8699 at step 56</title>"));
  EXPECT_THAT(page, HasSubstr("<tr class=\"left\" data-worker=\"node-0/0\"><td>node-0/0</td>"
                              "<td>gpu-host-7</td><td>200</td>"));
  EXPECT_THAT(page, HasSubstr("<td>1234.5</td>"));
  EXPECT_THAT(page, HasSubstr("<td>left: finished</td>"));
}

TEST(StatusPageTest, AnEmptyCoordinatorRenders) {
  const std::string page = StatusPage(PageData{});
  EXPECT_THAT(page, HasSubstr("(none)"));
  EXPECT_THAT(page, HasSubstr("no rounds yet"));
  EXPECT_THAT(page, HasSubstr("no evaluation yet"));
  EXPECT_THAT(page, HasSubstr("no runs yet"));
}

}  // namespace
}  // namespace localsgd
