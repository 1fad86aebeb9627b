#include "coordinator/ctl_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::HasSubstr;

v1::CoordinatorStatus Sample() {
  v1::CoordinatorStatus status;
  v1::RunInfo* run = status.mutable_run();
  run->set_run_id("run-1");
  run->set_state(v1::RUN_STATE_RUNNING);
  run->set_round(3);
  run->set_global_step(24);
  run->mutable_spec()->set_name("fmnist");
  run->mutable_spec()->mutable_model()->set_builtin("cnn");
  run->mutable_spec()->set_total_steps(1000);
  run->mutable_spec()->set_local_sgd_steps(8);
  run->mutable_spec()->set_codec(v1::CODEC_INT8);
  run->mutable_spec()->set_enabled(true);
  for (int i = 0; i < 2; ++i) {
    v1::MemberStatus* m = status.add_members();
    m->set_worker_id("node-a/" + std::to_string(i));
    m->set_hostname("host-a");
    m->set_step(24);
    m->set_loss(i == 0 ? 0.5 : 0.25);
    m->set_samples_per_second(1000);
    m->set_heartbeat_age_seconds(0.4);
  }
  status.set_uptime_seconds(12);
  v1::RoundRecord* round = status.add_recent_rounds();
  round->set_round(3);
  round->set_outcome(v1::ROUND_OUTCOME_COMMITTED);
  round->add_members("node-a/0");
  round->set_duration_seconds(0.5);
  round->set_bytes_received(2'000'000);
  round->set_bytes_sent(2'000'000);
  round->set_codec(v1::CODEC_INT8);
  round->set_compression_ratio(3.94);
  round->set_exchange(v1::EXCHANGE_SHARDED);
  for (const char* owner : {"node-a/0", "node-b/0"}) {
    v1::ShardRecord* shard = round->add_shards();
    shard->set_owner_id(owner);
    shard->set_mean_bytes(250'000);
  }
  v1::MemberShare* share = round->add_shares();
  share->set_member_id("node-a/0");
  share->set_workers(1);
  share->set_steps(3);
  share->set_weight(3);
  v1::DroppedMember* dropped = round->add_dropped();
  dropped->set_member_id("node-b/0");
  dropped->set_reason("missed the round deadline");
  v1::RunProgress* progress = status.mutable_progress();
  progress->set_global_step(24);
  progress->set_total_steps(1000);
  progress->set_percent(2.4);
  progress->set_elapsed_seconds(65);
  progress->set_eta_seconds(2644);
  v1::Event* event = status.add_events();
  event->set_severity(v1::EVENT_SEVERITY_ERROR);
  event->set_text("worker node-c/0 left: failed: dataset.path: cannot open /x");
  return status;
}

TEST(CtlFormatTest, RunLine) {
  EXPECT_EQ(FormatRunLine(v1::RunInfo()), "no run (IDLE)");
  EXPECT_EQ(FormatRunLine(Sample().run()), "run-1 (fmnist) RUNNING round 3 step 24/1000");
  v1::RunInfo epochs = Sample().run();
  epochs.mutable_spec()->set_epochs(3);
  EXPECT_EQ(FormatRunLine(epochs), "run-1 (fmnist) RUNNING round 3 step 24 (3 epochs)");
}

TEST(CtlFormatTest, StatusTable) {
  std::string table = FormatStatusTable(Sample());
  EXPECT_THAT(table, HasSubstr("coordinator up 12s, 2 members"));
  EXPECT_THAT(table, HasSubstr("model cnn"));
  EXPECT_THAT(table, HasSubstr("codec INT8"));
  EXPECT_THAT(table, HasSubstr("local_sgd_steps 8"));
  EXPECT_THAT(table, HasSubstr("WORKER"));
  EXPECT_THAT(table, HasSubstr("node-a/1"));
  EXPECT_THAT(table, HasSubstr("0.2500"));
  EXPECT_THAT(table, HasSubstr("last round: round 3 COMMITTED, 1 member, 0.500 s"));
  EXPECT_THAT(table, HasSubstr("2.00 MB in, 2.00 MB out, INT8 x3.94"));
  EXPECT_THAT(table, HasSubstr("SHARDED over 2 owners (node-a/0 0.25 MB, node-b/0 0.25 MB)"));
  v1::CoordinatorStatus one_owner = Sample();
  one_owner.mutable_recent_rounds(0)->mutable_shards()->RemoveLast();
  EXPECT_THAT(FormatStatusTable(one_owner), HasSubstr("SHARDED over 1 owner (node-a/0 0.25 MB)"));
  v1::CoordinatorStatus ring = Sample();
  ring.mutable_recent_rounds(0)->set_ring(true);
  EXPECT_THAT(FormatStatusTable(ring), HasSubstr("SHARDED ring over 2 owners"));
  EXPECT_THAT(table, HasSubstr("dropped node-b/0 (missed the round deadline)"));
  EXPECT_THAT(table, HasSubstr("; steps (weight) node-a/0 3 (3); dropped"));
  EXPECT_THAT(FormatStatusTable(v1::CoordinatorStatus()), HasSubstr("no members"));
  v1::CoordinatorStatus saved = Sample();
  saved.mutable_run()->set_model_path("/runs/model.pt");
  EXPECT_THAT(FormatStatusTable(saved), HasSubstr("trained model: /runs/model.pt"));
  v1::CheckpointInfo* checkpoint = saved.mutable_run()->mutable_checkpoint();
  checkpoint->set_round(7);
  checkpoint->set_global_step(56);
  checkpoint->set_path("/ckpt/node-a/checkpoint.bin");
  checkpoint->set_worker_id("node-a/0");
  EXPECT_THAT(FormatStatusTable(saved),
              HasSubstr("checkpoint: round 7 (global step 56) in /ckpt/node-a/checkpoint.bin on "
                        "node-a/0"));
}

TEST(CtlFormatTest, ProgressResultAndEvents) {
  EXPECT_EQ(FormatProgress(Sample()), "2.4% (24/1000), elapsed 1m05s, ETA 44m04s");
  std::string table = FormatStatusTable(Sample());
  EXPECT_THAT(table, HasSubstr("progress: 2.4% (24/1000), elapsed 1m05s, ETA 44m04s"));
  EXPECT_THAT(table, HasSubstr("ERROR worker node-c/0 left: failed: dataset.path: cannot open /x"));
  v1::CoordinatorStatus done = Sample();
  done.mutable_run()->set_state(v1::RUN_STATE_COMPLETED);
  done.mutable_run()->set_final_loss(0.3117);
  done.mutable_run()->set_final_test_accuracy(0.873);
  done.mutable_run()->add_member_results()->set_worker_id("node-a/0");
  done.mutable_progress()->set_eta_seconds(-1);
  EXPECT_THAT(FormatStatusTable(done),
              HasSubstr("result: final loss 0.3117, test accuracy 0.8730 (1 workers)"));
  EXPECT_EQ(FormatProgress(done), "2.4% (24/1000), elapsed 1m05s");
}

TEST(CtlFormatTest, RunsTable) {
  EXPECT_EQ(FormatRunsTable(v1::ListRunsResponse()), "no runs\n");
  v1::ListRunsResponse runs;
  v1::RunInfo* run = runs.add_runs();
  *run = Sample().run();
  run->set_state(v1::RUN_STATE_FAILED);
  run->set_reason("every worker failed before training");
  const std::string table = FormatRunsTable(runs);
  EXPECT_THAT(table, HasSubstr("RUN"));
  EXPECT_THAT(table, HasSubstr("run-1"));
  EXPECT_THAT(table, HasSubstr("FAILED"));
  EXPECT_THAT(table, HasSubstr("24/1000"));
  EXPECT_THAT(table, HasSubstr("every worker failed before training"));
}

TEST(CtlFormatTest, WatchLineAggregates) {
  std::string line = FormatWatchLine(Sample());
  EXPECT_THAT(line, HasSubstr("RUNNING round 3 step 24/1000 members 2"));
  EXPECT_THAT(line, HasSubstr("loss 0.3750"));
  EXPECT_THAT(line, HasSubstr("samples/s 2000.0"));
  EXPECT_THAT(line, HasSubstr("| 2.4% (24/1000), elapsed 1m05s, ETA 44m04s |"));
  EXPECT_THAT(line, HasSubstr("| last round 0.500 s 4.00 MB"));
}

}  // namespace
}  // namespace localsgd
