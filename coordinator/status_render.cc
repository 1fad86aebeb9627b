#include "coordinator/status_render.h"

#include <google/protobuf/util/json_util.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
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

std::string StatusToPrometheus(const v1::CoordinatorStatus& status) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  prometheus::Registry registry;
  auto gauge = [&](const std::string& name, const std::string& help) -> auto& {
    return BuildGauge().Name(name).Help(help).Register(registry);
  };
  auto counter = [&](const std::string& name, const std::string& help, double value) {
    BuildCounter().Name(name).Help(help).Register(registry).Add({}).Increment(value);
  };

  const v1::RunInfo& run = status.run();
  auto& state = gauge("localsgd_run_state", "1 for the run's current state, 0 for the others.");
  for (int s = v1::RUN_STATE_IDLE; s <= v1::RUN_STATE_FAILED; ++s) {
    state.Add({{"state", RunStateName(static_cast<v1::RunState>(s))}})
        .Set(run.state() == s ? 1 : 0);
  }
  gauge("localsgd_run_info", "Always 1; labels name the current run.")
      .Add({{"run_id", run.run_id()}, {"name", run.spec().name()}})
      .Set(1);
  gauge("localsgd_global_step", "Optimizer steps agreed by the last committed round.")
      .Add({})
      .Set(static_cast<double>(run.global_step()));
  gauge("localsgd_round", "Committed sync rounds of the current run.")
      .Add({})
      .Set(static_cast<double>(run.round()));
  gauge("localsgd_members", "Live workers (leases not expired).")
      .Add({})
      .Set(status.members_size());
  gauge("localsgd_uptime_seconds", "Seconds since the coordinator started.")
      .Add({})
      .Set(status.uptime_seconds());

  auto& step = gauge("localsgd_member_step", "A worker's optimizer step, from its heartbeat.");
  auto& loss = gauge("localsgd_member_loss", "A worker's latest training loss.");
  auto& rate = gauge("localsgd_member_samples_per_second", "A worker's training throughput.");
  auto& age = gauge("localsgd_member_heartbeat_age_seconds", "Seconds since a worker's last heartbeat.");
  for (const v1::MemberStatus& member : status.members()) {
    prometheus::Labels labels = {{"worker_id", member.worker_id()},
                                 {"node", member.identity().node_name()}};
    step.Add(labels).Set(static_cast<double>(member.step()));
    loss.Add(labels).Set(member.loss());
    rate.Add(labels).Set(member.samples_per_second());
    age.Add(labels).Set(member.heartbeat_age_seconds());
  }

  counter("localsgd_heartbeats_total", "Heartbeats accepted.",
          static_cast<double>(status.heartbeats_total()));
  counter("localsgd_joins_total", "Joins accepted (rejoins included).",
          static_cast<double>(status.joins_total()));
  counter("localsgd_leases_expired_total", "Workers removed because their lease expired.",
          static_cast<double>(status.leases_expired_total()));
  counter("localsgd_bytes_received_total", "Parameter bytes received from members.",
          static_cast<double>(status.bytes_received_total()));
  counter("localsgd_bytes_sent_total", "Parameter bytes sent to members.",
          static_cast<double>(status.bytes_sent_total()));
  counter("localsgd_rounds_committed_total", "Sync rounds committed.",
          static_cast<double>(status.rounds_committed_total()));
  counter("localsgd_rounds_aborted_total", "Sync rounds aborted (quorum lost, run ended).",
          static_cast<double>(status.rounds_aborted_total()));
  if (status.recent_rounds_size() > 0) {
    const v1::RoundRecord& last = status.recent_rounds(status.recent_rounds_size() - 1);
    gauge("localsgd_last_round_duration_seconds", "Duration of the latest sync round.")
        .Add({})
        .Set(last.duration_seconds());
    gauge("localsgd_last_round_slowest_wait_seconds",
          "Latest round: time between the first and the last member delivering its delta.")
        .Add({})
        .Set(last.slowest_wait_seconds());
    gauge("localsgd_last_round_members", "Members whose deltas are in the latest round.")
        .Add({})
        .Set(last.members_size());
    gauge("localsgd_last_round_dropped", "Members dropped from the latest round.")
        .Add({})
        .Set(last.dropped_size());
    gauge("localsgd_last_round_excluded",
          "Members whose deltas screening left out of the latest round (norm outliers).")
        .Add({})
        .Set(last.excluded_size());
    gauge("localsgd_last_round_bytes_received", "Delta bytes received in the latest round.")
        .Add({})
        .Set(static_cast<double>(last.bytes_received()));
    gauge("localsgd_last_round_bytes_sent", "Update bytes sent in the latest round.")
        .Add({})
        .Set(static_cast<double>(last.bytes_sent()));
    gauge("localsgd_last_round_compression_ratio", "fp32 bytes over encoded bytes.")
        .Add({})
        .Set(last.compression_ratio());
    gauge("localsgd_last_round_exchange",
          "How the latest round's deltas travelled (1 for its exchange mode).")
        .Add({{"exchange",
               std::string(absl::StripPrefix(v1::Exchange_Name(last.exchange()), "EXCHANGE_"))}})
        .Set(1);
    auto& shard_bytes = gauge("localsgd_last_round_shard_mean_bytes",
                              "Latest sharded round: encoded bytes of each owner's averaged range.");
    auto& shard_values = gauge("localsgd_last_round_shard_values",
                               "Latest sharded round: values of the flat vector each owner averaged.");
    for (const v1::ShardRecord& shard : last.shards()) {
      const prometheus::Labels labels = {{"owner_id", shard.owner_id()}};
      shard_bytes.Add(labels).Set(static_cast<double>(shard.mean_bytes()));
      shard_values.Add(labels).Set(static_cast<double>(shard.end() - shard.begin()));
    }
  }
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace localsgd
