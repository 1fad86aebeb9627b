#include "coordinator/status_page.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/enum_name.h"
#include "common/proto_time.h"
#include "common/run_spec.h"
#include "coordinator/html_text.h"
#include "coordinator/run_manager.h"
#include "coordinator/svg_chart.h"

namespace localsgd {
namespace {

// A member whose last heartbeat is older than this is shown as late.
constexpr double kLateSeconds = 10;

std::string Charts(const v1::RunSeries& series, const v1::RunInfo& run) {
  ChartLine mean{"mean", "#1f77b4", {}};
  ChartLine low{"min", "#9ecae1", {}};
  ChartLine high{"max", "#9ecae1", {}};
  ChartLine accuracy{"during training (mean over workers)", "#2ca02c", {}};
  ChartLine final_accuracy{"final model", "#d62728", {}};
  std::vector<double> steps;
  BarPart waiting{"waiting for the slowest member", "#d62728", {}};
  BarPart rest{"transfer and averaging", "#fdae6b", {}};
  BarPart received{"coordinator received", "#9467bd", {}};
  BarPart sent{"coordinator sent", "#8c564b", {}};
  BarPart owners_received{"range owners received (data plane)", "#17becf", {}};
  BarPart owners_sent{"range owners sent (data plane)", "#bcbd22", {}};
  double wait_total = 0, duration_total = 0;
  for (const v1::SeriesPoint& p : series.points()) {
    const double step = static_cast<double>(p.global_step());
    if (p.loss_mean() != 0 || p.loss_max() != 0) {
      mean.points.emplace_back(step, p.loss_mean());
      low.points.emplace_back(step, p.loss_min());
      high.points.emplace_back(step, p.loss_max());
    }
    if (p.test_accuracy() > 0) accuracy.points.emplace_back(step, p.test_accuracy());
    steps.push_back(step);
    const double wait = std::min(p.slowest_wait_seconds(), p.duration_seconds());
    waiting.values.push_back(wait);
    rest.values.push_back(p.duration_seconds() - wait);
    wait_total += wait;
    duration_total += p.duration_seconds();
    received.values.push_back(static_cast<double>(p.bytes_received()));
    sent.values.push_back(static_cast<double>(p.bytes_sent()));
    owners_received.values.push_back(static_cast<double>(p.owner_bytes_received()));
    owners_sent.values.push_back(static_cast<double>(p.owner_bytes_sent()));
  }
  // The run's final evaluation (the final global model, or the workers' last), once it ended.
  if (run.final_test_accuracy() > 0 && !series.points().empty()) {
    final_accuracy.points.emplace_back(static_cast<double>(run.global_step()),
                                       run.final_test_accuracy());
  }
  const std::string share =
      duration_total > 0 ? absl::StrCat(Fixed(100 * wait_total / duration_total, 1), "%") : "-";
  return absl::StrCat(
      "<section class=\"charts\">",
      LineChart("chart-loss", "Training loss", {high, low, mean}, {"loss"}, false, "no rounds yet"),
      LineChart("chart-accuracy", "Test accuracy", {accuracy, final_accuracy}, {"accuracy"}, true,
                "no evaluation yet (RunSpec.eval_every_rounds)"),
      BarChart(
          "chart-round-time",
          absl::StrCat("Round time: waiting for the slowest member is <b id=\"waiting-share\">",
                       share, "</b> of it"),
          steps, {waiting, rest}, {"seconds"}),
      BarChart("chart-bytes", "Bytes per round, at the coordinator and between node leaders", steps,
               {received, sent, owners_received, owners_sent}, {"bytes", true}),
      "</section>");
}

// ---- sections --------------------------------------------------------------------------------

std::string SpecSummary(const v1::RunSpec& spec) {
  std::vector<std::string> parts;
  parts.push_back(absl::StrCat("model ", Esc(ModelName(spec.model()))));
  parts.push_back(absl::StrCat(
      "data ", EnumName(spec.dataset().kind()),
      spec.dataset().path().empty() ? "" : absl::StrCat(" ", Esc(spec.dataset().path()))));
  parts.push_back(absl::StrCat("local_sgd_steps ", spec.local_sgd_steps()));
  parts.push_back(absl::StrCat("exchange ", EnumName(spec.exchange())));
  parts.push_back(absl::StrCat("codec ", EnumName(spec.codec())));
  parts.push_back(absl::StrCat("min_workers ", spec.min_workers()));
  parts.push_back(
      absl::StrCat("batch ", spec.batch_size(), " x ", spec.gradient_accumulation_steps()));
  parts.push_back(absl::StrCat("lr ", spec.optimizer().lr()));
  if (!spec.enabled()) parts.push_back("averaging off");
  return absl::StrJoin(parts, " &middot; ");
}

std::string Header(const v1::CoordinatorStatus& status) {
  const v1::RunInfo& run = status.run();
  const std::string state = EnumName(run.state());
  const v1::RunProgress& progress = status.progress();
  double accuracy = run.final_test_accuracy();
  if (accuracy == 0) {
    int n = 0;
    for (const v1::MemberStatus& m : status.members()) {
      if (m.test_accuracy() > 0) {
        accuracy += m.test_accuracy();
        ++n;
      }
    }
    if (n > 0) accuracy /= n;
  }
  std::string out = absl::StrFormat(
      "<section class=\"run\"><h2>Run <span id=\"run-id\">%s</span> <span id=\"run-state\" "
      "class=\"state %s\">%s</span></h2>",
      run.run_id().empty() ? "(none)" : Esc(run.run_id()), state, state);
  if (!run.spec().name().empty() && run.spec().name() != run.run_id()) {
    absl::StrAppend(&out, "<div class=\"name\">", Esc(run.spec().name()), "</div>");
  }
  if (!run.run_id().empty()) {
    absl::StrAppend(&out, "<div class=\"spec\">", SpecSummary(run.spec()), "</div>");
  }
  if (!run.reason().empty()) {
    absl::StrAppend(&out, "<div id=\"run-reason\" class=\"reason ", state, "\">", Esc(run.reason()),
                    "</div>");
  }
  const double percent = progress.percent();
  absl::StrAppendFormat(
      &out,
      "<div class=\"progress\"><div id=\"progress-bar\" class=\"bar\" style=\"width:%.1f%%\" "
      "data-percent=\"%.1f\"></div></div><div class=\"progress-text\">step <span "
      "id=\"progress-step\">%d</span> / <span id=\"progress-total\">%s</span> (%s%%) &middot; "
      "elapsed <span id=\"elapsed\">%s</span> &middot; ETA <span id=\"eta\">%s</span></div>",
      percent, percent, progress.global_step(),
      progress.total_steps() > 0 ? absl::StrCat(progress.total_steps()) : "?", Fixed(percent, 1),
      Span(progress.elapsed_seconds()),
      progress.eta_seconds() >= 0 ? Span(progress.eta_seconds()) : "-");
  absl::StrAppendFormat(&out,
                        "<div class=\"numbers\"><div><b id=\"round\">%d</b>rounds</div>"
                        "<div><b id=\"global-step\">%d</b>global step</div>"
                        "<div><b id=\"members-count\">%d</b>members</div>"
                        "<div><b id=\"accuracy\">%s</b>test accuracy</div>"
                        "<div><b id=\"final-loss\">%s</b>%s</div></div>",
                        run.round(), run.global_step(), status.members_size(),
                        accuracy > 0 ? Fixed(accuracy, 4) : "-",
                        run.has_final_loss() ? Fixed(run.final_loss(), 4) : "-",
                        run.member_results_size() > 0 ? "final loss" : "final loss (at the end)");
  if (!run.model_path().empty()) {
    absl::StrAppend(&out, "<div class=\"model\">model saved to <code id=\"model-path\">",
                    Esc(run.model_path()), "</code></div>");
  }
  if (run.has_checkpoint()) {
    absl::StrAppendFormat(&out,
                          "<div class=\"model\">checkpoint of round %d (global step %d) in "
                          "<code id=\"checkpoint-path\">%s</code> on %s</div>",
                          run.checkpoint().round(), run.checkpoint().global_step(),
                          Esc(run.checkpoint().path()), Esc(run.checkpoint().worker_id()));
  }
  return out + "</section>";
}

std::string Members(const v1::CoordinatorStatus& status) {
  std::string out =
      "<section><h2>Members</h2><table id=\"members\"><thead><tr><th>worker</th><th>host</th>"
      "<th>step</th><th>loss</th><th>samples/s</th><th>test acc.</th>"
      "<th title=\"steps trained since the last round its node took\">unsynced</th>"
      "<th>heartbeat age</th><th>state</th></tr></thead><tbody>";
  std::set<std::string> live;
  for (const v1::MemberStatus& m : status.members()) {
    live.insert(m.worker_id());
    const bool late = m.heartbeat_age_seconds() > kLateSeconds;
    const std::string state = m.finished() ? "finished" : late ? "late" : "live";
    absl::StrAppendFormat(
        &out,
        "<tr class=\"%s\" data-worker=\"%s\"><td>%s%s</td><td>%s</td><td>%d</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td class=\"unsynced\">%d</td><td>%s s</td><td>%s</td></tr>",
        state, Esc(m.worker_id()), Esc(m.worker_id()), m.node_leader() ? " &#9733;" : "",
        Esc(m.hostname()), m.step(), Fixed(m.loss(), 4), Fixed(m.samples_per_second(), 1),
        m.test_accuracy() > 0 ? Fixed(m.test_accuracy(), 4) : "-", m.unsynced_steps(),
        Fixed(m.heartbeat_age_seconds(), 1), state);
  }
  // Workers of the run that left, with their last figures and why.
  for (const v1::MemberResult& r : status.run().member_results()) {
    if (live.count(r.worker_id()) > 0) continue;
    const std::string reason = r.left_reason().empty() ? "lease expired" : r.left_reason();
    absl::StrAppendFormat(
        &out,
        "<tr class=\"%s\" data-worker=\"%s\"><td>%s</td><td>%s</td><td>%d</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td></td><td></td><td>left: %s</td></tr>",
        reason == "finished" ? "left" : "gone", Esc(r.worker_id()), Esc(r.worker_id()),
        Esc(r.hostname()), r.step(), Fixed(r.loss(), 4),
        r.samples_per_second() > 0 ? Fixed(r.samples_per_second(), 1) : "-",
        r.test_accuracy() > 0 ? Fixed(r.test_accuracy(), 4) : "-", Esc(reason));
  }
  return out + "</tbody></table><p class=\"note\">&#9733; node leader</p></section>";
}

std::string Events(const v1::CoordinatorStatus& status) {
  std::string out = "<section><h2>Events</h2><ol id=\"events\" class=\"events\">";
  for (int i = status.events_size() - 1; i >= 0 && i >= status.events_size() - 50; --i) {
    const v1::Event& e = status.events(i);
    const std::string severity = absl::AsciiStrToLower(EnumName(e.severity()));
    absl::StrAppendFormat(
        &out, "<li class=\"%s\" data-kind=\"%s\"><time>%s</time> %s</li>", severity, Esc(e.kind()),
        absl::FormatTime("%H:%M:%S", FromProtoTime(e.time()), absl::UTCTimeZone()), Esc(e.text()));
  }
  if (status.events_size() == 0) out += "<li>none yet</li>";
  return out + "</ol></section>";
}

std::string Rounds(const v1::CoordinatorStatus& status) {
  std::string out =
      "<section><h2>Recent rounds</h2><table id=\"rounds\"><thead><tr><th>round</th>"
      "<th>outcome</th><th>global step</th><th>members</th><th>dropped, excluded or suspended</th>"
      "<th>duration (s)</th><th>slowest wait (s)</th><th>coordinator in</th>"
      "<th>coordinator out</th><th>codec</th><th>ratio</th><th>exchange</th><th>fragment</th>"
      "<th>steps (weight) by member</th></tr></thead><tbody>";
  for (int i = status.recent_rounds_size() - 1; i >= 0 && i >= status.recent_rounds_size() - 15;
       --i) {
    const v1::RoundRecord& r = status.recent_rounds(i);
    std::vector<std::string> left;
    for (const v1::DroppedMember& d : r.dropped()) {
      left.push_back(absl::StrCat(Esc(d.member_id()), ": ", Esc(d.reason())));
    }
    for (const v1::DroppedMember& d : r.excluded()) {
      left.push_back(absl::StrCat(Esc(d.member_id()), " (excluded): ", Esc(d.reason())));
    }
    for (const v1::DroppedMember& d : r.suspended()) {
      left.push_back(absl::StrCat(Esc(d.member_id()), " (suspended): ", Esc(d.reason())));
    }
    std::vector<std::string> shares;
    for (const v1::MemberShare& share : r.shares()) {
      shares.push_back(
          absl::StrFormat("%s %d (%g)", Esc(share.member_id()), share.steps(), share.weight()));
    }
    const std::string outcome = EnumName(r.outcome());
    absl::StrAppendFormat(
        &out,
        "<tr class=\"%s\"><td>%d</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d (%s)</td>"
        "<td>%s</td></tr>",
        outcome, r.round(), outcome, r.global_step(), r.members_size(),
        r.reason().empty() ? absl::StrJoin(left, "; ") : Esc(r.reason()),
        Fixed(r.duration_seconds(), 3), Fixed(r.slowest_wait_seconds(), 3),
        Bytes(static_cast<double>(r.bytes_received())), Bytes(static_cast<double>(r.bytes_sent())),
        EnumName(r.codec()), Fixed(r.compression_ratio(), 2),
        absl::StrCat(EnumName(r.exchange()), r.ring() ? " (ring)" : ""), r.fragment(),
        Bytes(static_cast<double>(r.values()) * 4), absl::StrJoin(shares, ", "));
  }
  return out + "</tbody></table></section>";
}

std::string PastRuns(const std::vector<v1::RunInfo>& runs) {
  std::string out =
      "<section><h2>Runs</h2><table id=\"runs\"><thead><tr><th>run</th><th>name</th>"
      "<th>state</th><th>why</th><th>global step</th><th>rounds</th><th>final loss</th>"
      "<th>test acc.</th><th>model</th></tr></thead><tbody>";
  for (const v1::RunInfo& run : runs) {
    const std::string state = EnumName(run.state());
    absl::StrAppendFormat(
        &out,
        "<tr data-run=\"%s\"><td>%s</td><td>%s</td><td class=\"state %s\">%s</td><td>%s</td>"
        "<td>%d / %s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td></tr>",
        Esc(run.run_id()), Esc(run.run_id()), Esc(run.spec().name()), state, state,
        Esc(run.reason()), run.global_step(),
        run.total_steps() > 0 ? absl::StrCat(run.total_steps()) : "?", run.round(),
        run.has_final_loss() ? Fixed(run.final_loss(), 4) : "-",
        run.final_test_accuracy() > 0 ? Fixed(run.final_test_accuracy(), 4) : "-",
        Esc(run.model_path()));
  }
  if (runs.empty()) out += "<tr><td colspan=\"9\">no runs yet</td></tr>";
  return out + "</tbody></table></section>";
}

constexpr char kStyle[] = R"css(
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;
font-size:.9em}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.state{font-weight:bold;padding:1px 6px;border-radius:4px;background:#eee}
.RUNNING{color:#080}.FAILED{color:#c00}.COMPLETED{color:#06c}.STOPPED{color:#a60}
.reason.FAILED{color:#c00;font-weight:bold}.spec,.name,.model{color:#555;margin:.2em 0}
.progress{background:#eee;height:14px;border-radius:7px;overflow:hidden;margin:.6em 0 .2em}
.bar{background:#4a90d9;height:100%}
.numbers{display:flex;gap:2em;margin:.8em 0}.numbers div{display:flex;flex-direction:column}
.numbers b{font-size:1.6em}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:1em}
figure{margin:0}figcaption{font-size:.9em;color:#444}svg{width:100%;height:auto;
background:#fcfcfc;border:1px solid #eee}svg text{font-size:11px;fill:#444}
.axis{stroke:#999}.grid{stroke:#e4e4e4}.x-title,.y-title{font-size:11px;fill:#222}
.legend{font-size:.8em;color:#444}.legend .entry{white-space:nowrap;margin-right:.6em}
tr.late td{background:#fff4d6}tr.gone td{color:#999}tr.left td{color:#555}
tr.ABORTED td{background:#fff0f0}#runs td,#rounds td,#members td{white-space:nowrap}
#runs td:nth-child(4),#rounds td:nth-child(5){white-space:normal;min-width:12em}
section{overflow-x:auto}
.events{list-style:none;padding:0;max-height:22em;overflow:auto;font-size:.9em}
.events li{padding:2px 4px;border-bottom:1px solid #f0f0f0}
.events .error{background:#fde8e8;color:#a00;font-weight:bold}.events .warning{color:#a60}
.events time{color:#888;font-family:monospace}.note{font-size:.8em;color:#777}
#stale{color:#c00}
)css";

constexpr char kScript[] = R"js(
async function refresh() {
  try {
    const r = await fetch('/ui/body', {cache: 'no-store'});
    if (!r.ok) throw new Error('HTTP ' + r.status);
    document.getElementById('page').innerHTML = await r.text();
    document.getElementById('stale').textContent = '';
  } catch (e) {
    document.getElementById('stale').textContent =
        'coordinator unreachable (' + e.message + '); showing the last data';
  }
}
setInterval(refresh, 1000);
)js";

}  // namespace

std::string StatusPageBody(const PageData& data) {
  const v1::CoordinatorStatus& status = data.status;
  return absl::StrCat(
      Header(status), Charts(data.series, status.run()), Members(status), Events(status),
      Rounds(status), PastRuns(data.runs),
      absl::StrFormat("<p class=\"note\">coordinator up %s &middot; status version <span "
                      "id=\"version\">%d</span> &middot; <a href=\"/status\">/status</a> (JSON) "
                      "&middot; <a href=\"/runs\">/runs</a> &middot; <a href=\"/runs/%s/series\">"
                      "series</a> &middot; <a href=\"/metrics\">/metrics</a> &middot; <a "
                      "href=\"/healthz\">/healthz</a></p>",
                      Span(status.uptime_seconds()), status.version(), Esc(status.run().run_id())));
}

std::string StatusPage(const PageData& data) {
  return absl::StrCat(
      "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
      "content=\"width=device-width,initial-scale=1\"><title>localsgd coordinator</title><style>",
      kStyle,
      "</style></head><body><h1>localsgd coordinator</h1><div id=\"stale\"></div>"
      "<div id=\"page\">",
      StatusPageBody(data), "</div><script>", kScript, "</script></body></html>\n");
}

}  // namespace localsgd
