#include "coordinator/ctl_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/enum_name.h"
#include "common/proto_time.h"
#include "common/run_spec.h"
#include "coordinator/run_manager.h"

namespace localsgd {
namespace {

// "24/1000" for a run of total steps, "24/4690 (3 epochs)" for a run of epochs ("24 (3
// epochs)" while no worker has reported its total).
std::string StepOfTotal(const v1::RunInfo& run) {
  const int64_t total = run.total_steps() > 0 ? run.total_steps() : run.spec().total_steps();
  std::string out = absl::StrCat(run.global_step());
  if (total > 0) absl::StrAppend(&out, "/", total);
  if (run.spec().duration_case() == v1::RunSpec::kEpochs) {
    absl::StrAppend(&out, " (", run.spec().epochs(), " epochs)");
  }
  return out;
}

// "45s", "3m05s", "2h07m".
std::string Span(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
}

}  // namespace

std::string FormatRunLine(const v1::RunInfo& run) {
  if (run.run_id().empty()) return "no run (IDLE)";
  std::string line = run.run_id();
  if (!run.spec().name().empty() && run.spec().name() != run.run_id()) {
    absl::StrAppend(&line, " (", run.spec().name(), ")");
  }
  absl::StrAppend(&line, " ", EnumName(run.state()), " round ", run.round(), " step ",
                  StepOfTotal(run));
  if (!run.reason().empty()) absl::StrAppend(&line, " — ", run.reason());
  return line;
}

std::string FormatProgress(const v1::CoordinatorStatus& status) {
  const v1::RunProgress& progress = status.progress();
  std::string out = progress.total_steps() > 0
                        ? absl::StrFormat("%.1f%% (%d/%d)", progress.percent(),
                                          progress.global_step(), progress.total_steps())
                        : absl::StrFormat("step %d of an unknown total", progress.global_step());
  absl::StrAppend(&out, ", elapsed ", Span(progress.elapsed_seconds()));
  if (progress.eta_seconds() >= 0) absl::StrAppend(&out, ", ETA ", Span(progress.eta_seconds()));
  return out;
}

std::string FormatStatusTable(const v1::CoordinatorStatus& status) {
  std::string out = absl::StrFormat("coordinator up %.0fs, %d members\n", status.uptime_seconds(),
                                    status.members_size());
  absl::StrAppend(&out, "run: ", FormatRunLine(status.run()), "\n");
  const v1::RunInfo& run = status.run();
  if (!run.run_id().empty()) absl::StrAppend(&out, "progress: ", FormatProgress(status), "\n");
  if (run.member_results_size() > 0) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  "result: final loss %s, test accuracy %s (%d workers)\n",
                  run.has_final_loss() ? absl::StrFormat("%.4f", run.final_loss()) : "none",
                  run.final_test_accuracy() > 0 ? absl::StrFormat("%.4f", run.final_test_accuracy())
                                                : "not evaluated",
                  run.member_results_size()));
  }
  const v1::RunSpec& spec = status.run().spec();
  if (!status.run().run_id().empty()) {
    std::string model = ModelName(spec.model());
    absl::StrAppend(&out, "spec: model ", model, ", dataset ", EnumName(spec.dataset().kind()),
                    ", local_sgd_steps ", spec.local_sgd_steps(), ", gradient_accumulation_steps ",
                    spec.gradient_accumulation_steps(), ", codec ", EnumName(spec.codec()),
                    ", min_workers ", spec.min_workers(),
                    spec.enabled() ? "" : ", averaging disabled", "\n");
  }
  if (!status.run().model_path().empty()) {
    absl::StrAppend(&out, "trained model: ", status.run().model_path(), "\n");
  }
  if (status.run().has_checkpoint()) {
    const v1::CheckpointInfo& checkpoint = status.run().checkpoint();
    absl::StrAppend(&out, "checkpoint: round ", checkpoint.round(), " (global step ",
                    checkpoint.global_step(), ") in ", checkpoint.path(), " on ",
                    checkpoint.worker_id(), "\n");
  }
  if (status.recent_rounds_size() > 0) {
    absl::StrAppend(&out, "last round: ",
                    FormatRound(status.recent_rounds(status.recent_rounds_size() - 1)), "\n");
  }
  // The latest events, failures first to the eye.
  const int events = status.events_size();
  for (int i = std::max(0, events - 5); i < events; ++i) {
    const v1::Event& e = status.events(i);
    absl::StrAppend(&out, i == std::max(0, events - 5) ? "events:\n" : "", "  ",
                    absl::FormatTime("%H:%M:%S", FromProtoTime(e.time()), absl::UTCTimeZone()),
                    e.severity() == v1::EVENT_SEVERITY_ERROR     ? " ERROR "
                    : e.severity() == v1::EVENT_SEVERITY_WARNING ? " WARN  "
                                                                 : " ",
                    e.text(), "\n");
  }
  if (status.members_size() == 0) {
    absl::StrAppend(&out, "no members\n");
    return out;
  }
  absl::StrAppend(&out, absl::StrFormat("%-24s %-20s %10s %10s %12s %8s\n", "WORKER", "HOST",
                                        "STEP", "LOSS", "SAMPLES/S", "AGE"));
  for (const v1::MemberStatus& m : status.members()) {
    absl::StrAppend(&out, absl::StrFormat("%-24s %-20s %10d %10.4f %12.1f %7.1fs\n", m.worker_id(),
                                          m.hostname(), m.step(), m.loss(), m.samples_per_second(),
                                          m.heartbeat_age_seconds()));
  }
  return out;
}

std::string FormatRound(const v1::RoundRecord& round) {
  std::string line = absl::StrFormat(
      "round %d %s, %d member%s, %.3f s (slowest wait %.3f s), %.2f MB in, %.2f MB out, %s x%.2f",
      round.round(), EnumName(round.outcome()), round.members_size(),
      round.members_size() == 1 ? "" : "s", round.duration_seconds(), round.slowest_wait_seconds(),
      round.bytes_received() / 1e6, round.bytes_sent() / 1e6, EnumName(round.codec()),
      round.compression_ratio());
  if (round.fragment() > 0 || round.values() > 0) {
    absl::StrAppend(&line, ", fragment ", round.fragment(), " (", round.values(), " values)");
  }
  if (round.exchange() == v1::EXCHANGE_SHARDED) {
    absl::StrAppend(&line, round.ring() ? ", SHARDED ring over " : ", SHARDED over ",
                    round.shards_size(), round.shards_size() == 1 ? " owner (" : " owners (");
    for (int i = 0; i < round.shards_size(); ++i) {
      const v1::ShardRecord& shard = round.shards(i);
      absl::StrAppend(&line, i > 0 ? ", " : "",
                      absl::StrFormat("%s %.2f MB", shard.owner_id(), shard.mean_bytes() / 1e6));
    }
    absl::StrAppend(&line, ")");
  } else if (round.exchange() == v1::EXCHANGE_STAR) {
    absl::StrAppend(&line, ", STAR");
  }
  for (int i = 0; i < round.shares_size(); ++i) {
    const v1::MemberShare& share = round.shares(i);
    absl::StrAppend(&line, i == 0 ? "; steps (weight) " : ", ", share.member_id(), " ",
                    share.steps(), " (", share.weight(), ")");
  }
  for (const v1::DroppedMember& dropped : round.dropped()) {
    absl::StrAppend(&line, "; dropped ", dropped.member_id(), " (", dropped.reason(), ")");
  }
  for (const v1::DroppedMember& excluded : round.excluded()) {
    absl::StrAppend(&line, "; excluded ", excluded.member_id(), " (", excluded.reason(), ")");
  }
  if (!round.reason().empty()) absl::StrAppend(&line, "; ", round.reason());
  return line;
}

std::string FormatWatchLine(const v1::CoordinatorStatus& status) {
  double loss_sum = 0;
  double samples_per_second = 0;
  for (const v1::MemberStatus& m : status.members()) {
    loss_sum += m.loss();
    samples_per_second += m.samples_per_second();
  }
  std::string time =
      absl::FormatTime("%H:%M:%S", FromProtoTime(status.time()), absl::UTCTimeZone());
  std::string line =
      absl::StrCat(time, " ", FormatRunLine(status.run()), " members ", status.members_size());
  if (!status.run().run_id().empty()) absl::StrAppend(&line, " | ", FormatProgress(status), " |");
  if (status.members_size() > 0) {
    absl::StrAppend(&line, absl::StrFormat(" loss %.4f samples/s %.1f",
                                           loss_sum / status.members_size(), samples_per_second));
  }
  if (status.recent_rounds_size() > 0) {
    const v1::RoundRecord& last = status.recent_rounds(status.recent_rounds_size() - 1);
    absl::StrAppend(&line, absl::StrFormat(" | last round %.3f s %.2f MB", last.duration_seconds(),
                                           (last.bytes_received() + last.bytes_sent()) / 1e6));
  }
  return line;
}

std::string FormatRunsTable(const v1::ListRunsResponse& runs) {
  if (runs.runs_size() == 0) return "no runs\n";
  std::string out = absl::StrFormat("%-26s %-20s %-10s %14s %7s %10s %9s  %s\n", "RUN", "NAME",
                                    "STATE", "STEP", "ROUNDS", "FINAL LOSS", "TEST ACC", "WHY");
  for (const v1::RunInfo& run : runs.runs()) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  "%-26s %-20s %-10s %14s %7d %10s %9s  %s\n", run.run_id(), run.spec().name(),
                  EnumName(run.state()), StepOfTotal(run), run.round(),
                  run.has_final_loss() ? absl::StrFormat("%.4f", run.final_loss()) : "-",
                  run.final_test_accuracy() > 0 ? absl::StrFormat("%.4f", run.final_test_accuracy())
                                                : "-",
                  run.reason()));
  }
  return out;
}

}  // namespace localsgd
