#include "coordinator/status_render.h"

#include <google/protobuf/util/json_util.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/enum_name.h"
#include "coordinator/run_manager.h"

namespace localsgd {

std::string ProtoToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    return "{\"error\": \"not printable as JSON\"}\n";
  }
  return json;
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string StatusToJson(const v1::CoordinatorStatus& status) { return ProtoToJson(status); }

namespace {

// A registry that the metric groups below fill.
class Metrics {
 public:
  prometheus::Family<prometheus::Gauge>& gauge(const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  }
  void counter(const std::string& name, const std::string& help, double value) {
    prometheus::BuildCounter().Name(name).Help(help).Register(registry_).Add({}).Increment(value);
  }
  prometheus::Family<prometheus::Counter>& counters(const std::string& name,
                                                    const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry_);
  }
  std::vector<prometheus::MetricFamily> Collect() const { return registry_.Collect(); }

 private:
  prometheus::Registry registry_;
};

// The run: its state, step, round, progress and result.
void AddRunMetrics(const v1::CoordinatorStatus& status, Metrics& m) {
  const v1::RunInfo& run = status.run();
  auto& state = m.gauge("localsgd_run_state", "1 for the run's current state, 0 for the others.");
  for (int s = v1::RUN_STATE_IDLE; s <= v1::RUN_STATE_FAILED; ++s) {
    state.Add({{"state", EnumName(static_cast<v1::RunState>(s))}}).Set(run.state() == s ? 1 : 0);
  }
  m.gauge("localsgd_run_info", "Always 1; labels name the current run.")
      .Add({{"run_id", run.run_id()}, {"name", run.spec().name()}})
      .Set(1);
  m.gauge("localsgd_global_step", "Optimizer steps agreed by the last committed round.")
      .Add({})
      .Set(static_cast<double>(run.global_step()));
  m.gauge("localsgd_round", "Committed sync rounds of the current run.")
      .Add({})
      .Set(static_cast<double>(run.round()));
  m.gauge("localsgd_members", "Live workers (leases not expired).")
      .Add({})
      .Set(status.members_size());
  m.gauge("localsgd_uptime_seconds", "Seconds since the coordinator started.")
      .Add({})
      .Set(status.uptime_seconds());
  m.gauge("localsgd_run_total_steps",
          "Steps the current run trains in all (0 while an epoch run's total is not known).")
      .Add({})
      .Set(static_cast<double>(run.total_steps()));
  m.gauge("localsgd_run_progress_ratio", "The current run's global step over its total steps.")
      .Add({})
      .Set(status.progress().percent() / 100);
  m.gauge("localsgd_run_elapsed_seconds", "Seconds the current run has trained (to its end).")
      .Add({})
      .Set(status.progress().elapsed_seconds());
  if (status.progress().eta_seconds() >= 0) {
    m.gauge("localsgd_run_eta_seconds", "Seconds left to the current run's end at its rate so far.")
        .Add({})
        .Set(status.progress().eta_seconds());
  }
  if (run.final_test_accuracy() > 0) {
    m.gauge("localsgd_run_final_test_accuracy",
            "Mean test accuracy the current run's workers reported at its end.")
        .Add({})
        .Set(run.final_test_accuracy());
  }
  if (status.has_last_commit_time()) {
    m.gauge("localsgd_last_commit_timestamp_seconds", "When the latest sync round committed.")
        .Add({})
        .Set(static_cast<double>(status.last_commit_time().seconds()) +
             status.last_commit_time().nanos() * 1e-9);
  }
}

// Each live worker's progress, from its heartbeats.
void AddMemberMetrics(const v1::CoordinatorStatus& status, Metrics& m) {
  auto& step = m.gauge("localsgd_member_step", "A worker's optimizer step, from its heartbeat.");
  auto& loss = m.gauge("localsgd_member_loss", "A worker's latest training loss.");
  auto& rate = m.gauge("localsgd_member_samples_per_second", "A worker's training throughput.");
  auto& age =
      m.gauge("localsgd_member_heartbeat_age_seconds", "Seconds since a worker's last heartbeat.");
  auto& accuracy = m.gauge("localsgd_member_test_accuracy",
                           "A worker's test accuracy at its latest evaluation (0 before any).");
  auto& unsynced = m.gauge("localsgd_member_unsynced_steps",
                           "Optimizer steps a worker trained since the last round its node took.");
  for (const v1::MemberStatus& member : status.members()) {
    prometheus::Labels labels = {{"worker_id", member.worker_id()},
                                 {"node", member.identity().node_name()}};
    step.Add(labels).Set(static_cast<double>(member.step()));
    loss.Add(labels).Set(member.loss());
    rate.Add(labels).Set(member.samples_per_second());
    age.Add(labels).Set(member.heartbeat_age_seconds());
    accuracy.Add(labels).Set(member.test_accuracy());
    unsynced.Add(labels).Set(static_cast<double>(member.unsynced_steps()));
  }
}

// What the coordinator counted since it started.
void AddCounters(const v1::CoordinatorStatus& status, Metrics& m) {
  m.counter("localsgd_heartbeats_total", "Heartbeats accepted.",
            static_cast<double>(status.heartbeats_total()));
  m.counter("localsgd_joins_total", "Joins accepted (rejoins included).",
            static_cast<double>(status.joins_total()));
  m.counter("localsgd_leases_expired_total", "Workers removed because their lease expired.",
            static_cast<double>(status.leases_expired_total()));
  m.counter("localsgd_received_bytes_total", "Parameter bytes received from members.",
            static_cast<double>(status.bytes_received_total()));
  m.counter("localsgd_sent_bytes_total", "Parameter bytes sent to members.",
            static_cast<double>(status.bytes_sent_total()));
  auto& rounds =
      m.counters("localsgd_rounds_total",
                 "Sync rounds by outcome (aborted: quorum lost, owner lost, run ended).");
  rounds.Add({{"outcome", "committed"}})
      .Increment(static_cast<double>(status.rounds_committed_total()));
  rounds.Add({{"outcome", "aborted"}})
      .Increment(static_cast<double>(status.rounds_aborted_total()));
  auto& dropped = m.counters(
      "localsgd_round_members_dropped_total",
      "Members dropped from sync rounds, by why: deadline (too slow), left (lease expired, left, "
      "stream ended), refused (bad request), error.");
  for (const char* reason : {"deadline", "left", "refused", "error"}) {
    auto it = status.members_dropped_total().find(reason);
    dropped.Add({{"reason", reason}})
        .Increment(it == status.members_dropped_total().end() ? 0.0
                                                              : static_cast<double>(it->second));
  }
}

// The latest round's record.
void AddLastRoundMetrics(const v1::CoordinatorStatus& status, Metrics& m) {
  if (status.recent_rounds_size() == 0) return;
  const v1::RoundRecord& last = status.recent_rounds(status.recent_rounds_size() - 1);
  m.gauge("localsgd_last_round_duration_seconds", "Duration of the latest sync round.")
      .Add({})
      .Set(last.duration_seconds());
  m.gauge("localsgd_last_round_slowest_wait_seconds",
          "Latest round: time between the first and the last member delivering its delta.")
      .Add({})
      .Set(last.slowest_wait_seconds());
  m.gauge("localsgd_last_round_members", "Members whose deltas are in the latest round.")
      .Add({})
      .Set(last.members_size());
  m.gauge("localsgd_last_round_dropped", "Members dropped from the latest round.")
      .Add({})
      .Set(last.dropped_size());
  m.gauge("localsgd_last_round_excluded",
          "Members whose deltas screening left out of the latest round (norm outliers).")
      .Add({})
      .Set(last.excluded_size());
  m.gauge("localsgd_last_round_received_bytes", "Delta bytes received in the latest round.")
      .Add({})
      .Set(static_cast<double>(last.bytes_received()));
  m.gauge("localsgd_last_round_sent_bytes", "Update bytes sent in the latest round.")
      .Add({})
      .Set(static_cast<double>(last.bytes_sent()));
  m.gauge("localsgd_last_round_fragment",
          "The fragment the latest round carried (RunSpec.fragments; 0 without fragments).")
      .Add({})
      .Set(last.fragment());
  m.gauge("localsgd_last_round_values", "Values the latest round carried (its fragment's).")
      .Add({})
      .Set(static_cast<double>(last.values()));
  auto& steps = m.gauge("localsgd_last_round_member_steps",
                        "The latest round, when it committed: optimizer steps per worker each "
                        "member's delta covers (paced runs: its own; else local_sgd_steps).");
  auto& weight = m.gauge("localsgd_last_round_member_weight",
                         "The latest round, when it committed: each member's weight in the mean "
                         "(its workers, times its steps in paced runs).");
  for (const v1::MemberShare& share : last.shares()) {
    steps.Add({{"member", share.member_id()}}).Set(static_cast<double>(share.steps()));
    weight.Add({{"member", share.member_id()}}).Set(share.weight());
  }
  m.gauge("localsgd_last_round_compression_ratio", "fp32 bytes over encoded bytes.")
      .Add({})
      .Set(last.compression_ratio());
  m.gauge("localsgd_last_round_exchange",
          "How the latest round's deltas travelled (1 for its exchange mode).")
      .Add({{"exchange", EnumName(last.exchange())}})
      .Set(1);
  auto& shard_bytes =
      m.gauge("localsgd_last_round_shard_mean_bytes",
              "Latest sharded round: encoded bytes of each owner's averaged range.");
  auto& shard_values =
      m.gauge("localsgd_last_round_shard_values",
              "Latest sharded round: values of the flat vector each owner averaged.");
  for (const v1::ShardRecord& shard : last.shards()) {
    const prometheus::Labels labels = {{"owner_id", shard.owner_id()}};
    shard_bytes.Add(labels).Set(static_cast<double>(shard.mean_bytes()));
    shard_values.Add(labels).Set(static_cast<double>(shard.end() - shard.begin()));
  }
}

// The coordinator process (Prometheus's standard process metrics).
void AddProcessMetrics(const ProcessStats& process, Metrics& m) {
  m.gauge("process_resident_memory_bytes", "Resident memory size in bytes.")
      .Add({})
      .Set(process.resident_bytes);
  m.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.")
      .Add({})
      .Set(process.virtual_bytes);
  m.gauge("process_open_fds", "Number of open file descriptors.")
      .Add({})
      .Set(static_cast<double>(process.open_fds));
  m.gauge("process_max_fds", "Maximum number of open file descriptors.")
      .Add({})
      .Set(static_cast<double>(process.max_fds));
  m.gauge("process_start_time_seconds", "Start time of the process since the Unix epoch.")
      .Add({})
      .Set(process.start_time_seconds);
  m.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
            process.cpu_seconds);
}

// The round duration histogram, from the coordinator's cumulative bucket counts.
prometheus::MetricFamily RoundDurationHistogram(const v1::CoordinatorStatus& status) {
  prometheus::MetricFamily histogram;
  histogram.name = "localsgd_round_duration_seconds";
  histogram.help = "Sync round durations, from opening to commit or abort.";
  histogram.type = prometheus::MetricType::Histogram;
  prometheus::ClientMetric metric;
  const int buckets = std::min(status.round_duration_bucket_bounds_size(),
                               status.round_duration_bucket_counts_size());
  for (int b = 0; b < buckets; ++b) {
    metric.histogram.bucket.push_back(prometheus::ClientMetric::Bucket{
        static_cast<uint64_t>(status.round_duration_bucket_counts(b)),
        status.round_duration_bucket_bounds(b)});
  }
  metric.histogram.sample_count =
      buckets > 0 ? static_cast<uint64_t>(status.round_duration_bucket_counts(buckets - 1)) : 0;
  metric.histogram.sample_sum = status.round_duration_seconds_sum();
  if (buckets == 0 || !std::isinf(status.round_duration_bucket_bounds(buckets - 1))) {
    metric.histogram.bucket.push_back(prometheus::ClientMetric::Bucket{
        metric.histogram.sample_count, std::numeric_limits<double>::infinity()});
  }
  histogram.metric.push_back(std::move(metric));
  return histogram;
}

}  // namespace

std::string StatusToPrometheus(const v1::CoordinatorStatus& status, const ProcessStats* process) {
  Metrics metrics;
  AddRunMetrics(status, metrics);
  AddMemberMetrics(status, metrics);
  AddCounters(status, metrics);
  AddLastRoundMetrics(status, metrics);
  if (process != nullptr) AddProcessMetrics(*process, metrics);
  std::vector<prometheus::MetricFamily> families = metrics.Collect();
  families.push_back(RoundDurationHistogram(status));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace localsgd
