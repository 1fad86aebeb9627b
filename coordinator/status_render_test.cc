#include "coordinator/status_render.h"

#include <google/protobuf/util/json_util.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::HasSubstr;

v1::CoordinatorStatus Sample() {
  v1::CoordinatorStatus status;
  status.mutable_run()->set_run_id("run-1");
  status.mutable_run()->set_state(v1::RUN_STATE_RUNNING);
  status.mutable_run()->mutable_spec()->set_name("fmnist \"quoted\"");
  status.mutable_run()->set_global_step(64);
  status.mutable_run()->set_round(8);
  v1::MemberStatus* member = status.add_members();
  member->set_worker_id("node-a/0");
  member->mutable_identity()->set_node_name("node-a");
  member->set_step(64);
  member->set_loss(0.5);
  member->set_samples_per_second(1234.5);
  member->set_heartbeat_age_seconds(0.75);
  status.set_heartbeats_total(17);
  status.set_bytes_received_total(1 << 20);
  status.set_rounds_committed_total(8);
  status.mutable_run()->set_total_steps(200);
  (*status.mutable_members_dropped_total())["deadline"] = 2;
  for (double bound : {0.25, 0.5, 1.0}) status.add_round_duration_bucket_bounds(bound);
  for (int count : {0, 1, 1}) status.add_round_duration_bucket_counts(count);
  status.set_round_duration_seconds_sum(0.25);
  v1::RoundRecord* round = status.add_recent_rounds();
  round->set_round(8);
  round->set_outcome(v1::ROUND_OUTCOME_COMMITTED);
  round->add_members("node-a/0");
  round->set_duration_seconds(0.25);
  round->set_bytes_received(4000);
  round->set_compression_ratio(3.9);
  round->set_exchange(v1::EXCHANGE_SHARDED);
  v1::ShardRecord* shard = round->add_shards();
  shard->set_owner_id("node-a/0");
  shard->set_end(1000);
  shard->set_mean_bytes(4000);
  v1::MemberShare* share = round->add_shares();
  share->set_member_id("node-a/0");
  share->set_workers(2);
  share->set_steps(5);
  share->set_weight(10);
  return status;
}

TEST(StatusRenderTest, JsonRoundTripsAndUsesFieldNames) {
  std::string json = StatusToJson(Sample());
  EXPECT_THAT(json, HasSubstr("\"global_step\": \"64\""));
  EXPECT_THAT(json, HasSubstr("\"state\": \"RUN_STATE_RUNNING\""));
  EXPECT_THAT(json, HasSubstr("\"heartbeat_age_seconds\": 0.75"));
  EXPECT_THAT(json, HasSubstr("\"leases_expired_total\""));  // zero fields are printed too
  v1::CoordinatorStatus parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), Sample().SerializeAsString());
}

TEST(StatusRenderTest, PrometheusTextFormat) {
  std::string text = StatusToPrometheus(Sample());
  EXPECT_THAT(text, HasSubstr("# TYPE localsgd_run_state gauge"));
  EXPECT_THAT(text, HasSubstr("localsgd_run_state{state=\"RUNNING\"} 1"));
  EXPECT_THAT(text, HasSubstr("localsgd_run_state{state=\"IDLE\"} 0"));
  EXPECT_THAT(text, HasSubstr("localsgd_members 1"));
  EXPECT_THAT(text, HasSubstr("localsgd_round 8"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "localsgd_member_samples_per_second{node=\"node-a\",worker_id=\"node-a/0\"} 1234.5"));
  EXPECT_THAT(text, HasSubstr("# TYPE localsgd_heartbeats_total counter"));
  EXPECT_THAT(text, HasSubstr("localsgd_heartbeats_total 17"));
  EXPECT_THAT(text, HasSubstr("localsgd_received_bytes_total 1048576"));
  EXPECT_THAT(text, HasSubstr("localsgd_rounds_total{outcome=\"committed\"} 8"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_duration_seconds 0.25"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_received_bytes 4000"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_compression_ratio 3.9"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_exchange{exchange=\"SHARDED\"} 1"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_member_steps{member=\"node-a/0\"} 5"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_member_weight{member=\"node-a/0\"} 10"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_shard_mean_bytes{owner_id=\"node-a/0\"} 4000"));
  EXPECT_THAT(text, HasSubstr("localsgd_last_round_shard_values{owner_id=\"node-a/0\"} 1000"));
  EXPECT_THAT(text, HasSubstr("localsgd_round_duration_seconds_bucket{le=\"0.5\"} 1"));
  EXPECT_THAT(text, HasSubstr("localsgd_round_duration_seconds_bucket{le=\"+Inf\"} 1"));
  EXPECT_THAT(text, HasSubstr("localsgd_round_duration_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("localsgd_round_duration_seconds_sum 0.25"));
  EXPECT_THAT(text, HasSubstr("localsgd_round_members_dropped_total{reason=\"deadline\"} 2"));
  EXPECT_THAT(text, HasSubstr("localsgd_round_members_dropped_total{reason=\"error\"} 0"));
  EXPECT_THAT(text, HasSubstr("localsgd_run_total_steps 200"));
  EXPECT_THAT(text, HasSubstr("localsgd_member_test_accuracy{"));
  EXPECT_THAT(text, HasSubstr("localsgd_member_unsynced_steps{"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("process_open_fds")));
  ProcessStats process;
  process.open_fds = 12;
  process.cpu_seconds = 1.5;
  const std::string with_process = StatusToPrometheus(Sample(), &process);
  EXPECT_THAT(with_process, HasSubstr("process_open_fds 12"));
  EXPECT_THAT(with_process, HasSubstr("process_cpu_seconds_total 1.5"));
  // Label values are escaped.
  EXPECT_THAT(text, HasSubstr("name=\"fmnist \\\"quoted\\\"\""));
}

}  // namespace
}  // namespace localsgd
