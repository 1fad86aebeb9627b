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
#include "coordinator/run_manager.h"

namespace localsgd {
namespace {

// A member whose last heartbeat is older than this is shown as late.
constexpr double kLateSeconds = 10;

std::string Esc(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Fixed(double value, int digits) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.*f", digits, value);
}

// "45 s", "3 min 05 s", "2 h 07 min".
std::string Span(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return absl::StrCat(s, " s");
  if (s < 3600) return absl::StrFormat("%d min %02d s", s / 60, s % 60);
  return absl::StrFormat("%d h %02d min", s / 3600, s / 60 % 60);
}

std::string Bytes(double bytes) {
  if (bytes >= 1e9) return absl::StrCat(Fixed(bytes / 1e9, 2), " GB");
  if (bytes >= 1e6) return absl::StrCat(Fixed(bytes / 1e6, 2), " MB");
  if (bytes >= 1e3) return absl::StrCat(Fixed(bytes / 1e3, 1), " kB");
  return absl::StrCat(Fixed(bytes, 0), " B");
}

// ---- charts: inline SVG ---------------------------------------------------------------------

constexpr double kWidth = 440;
constexpr double kHeight = 170;
constexpr double kLeft = 52;
constexpr double kRight = 10;
constexpr double kTop = 10;
constexpr double kBottom = 24;

struct Scale {
  double x0, x1, y0, y1;
  double X(double x) const {
    return kLeft + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (kWidth - kLeft - kRight);
  }
  double Y(double y) const {
    return kHeight - kBottom - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (kHeight - kTop - kBottom);
  }
};

struct Line {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (global step, value), finite only
};

std::string ChartFrame(const std::string& id, const std::string& title, const Scale& scale,
                       int digits, size_t points, const std::string& inner,
                       const std::string& legend, const std::string& empty) {
  std::string svg = absl::StrFormat(
      "<figure class=\"chart\"><figcaption>%s</figcaption><svg id=\"%s\" data-points=\"%d\" "
      "viewBox=\"0 0 %g %g\" role=\"img\" aria-label=\"%s\">",
      Esc(title), id, points, kWidth, kHeight, Esc(title));
  absl::StrAppendFormat(&svg,
                        "<line class=\"axis\" x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>"
                        "<line class=\"axis\" x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>",
                        kLeft, kTop, kLeft, kHeight - kBottom, kLeft, kHeight - kBottom,
                        kWidth - kRight, kHeight - kBottom);
  if (points > 0) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%s</text>"
                          "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%s</text>"
                          "<text x=\"%g\" y=\"%g\">%s</text>"
                          "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%s</text>",
                          kLeft - 4, kTop + 8, Fixed(scale.y1, digits), kLeft - 4,
                          kHeight - kBottom, Fixed(scale.y0, digits), kLeft, kHeight - 6,
                          Fixed(scale.x0, 0), kWidth - kRight, kHeight - 6, Fixed(scale.x1, 0));
  } else {
    absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>",
                          kWidth / 2, kHeight / 2, empty);
  }
  return absl::StrCat(svg, inner, "</svg>", legend, "</figure>");
}

std::string LineChart(const std::string& id, const std::string& title,
                      const std::vector<Line>& lines, int digits, bool from_zero,
                      const std::string& empty) {
  size_t points = 0;
  Scale scale{0, 0, 0, 0};
  bool first = true;
  for (const Line& line : lines) {
    for (const auto& [x, y] : line.points) {
      if (first) scale = Scale{x, x, y, y};
      first = false;
      scale.x0 = std::min(scale.x0, x);
      scale.x1 = std::max(scale.x1, x);
      scale.y0 = std::min(scale.y0, y);
      scale.y1 = std::max(scale.y1, y);
    }
    points = std::max(points, line.points.size());
  }
  if (from_zero) scale.y0 = std::min(scale.y0, 0.0);
  std::string inner;
  std::string legend = "<div class=\"legend\">";
  for (const Line& line : lines) {
    if (line.points.empty()) continue;
    std::vector<std::string> coords;
    for (const auto& [x, y] : line.points) {
      coords.push_back(absl::StrFormat("%.1f,%.1f", scale.X(x), scale.Y(y)));
    }
    absl::StrAppendFormat(
        &inner, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>",
        line.color, absl::StrJoin(coords, " "));
    if (line.points.size() == 1) {
      absl::StrAppendFormat(&inner, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>",
                            scale.X(line.points[0].first), scale.Y(line.points[0].second),
                            line.color);
    }
    absl::StrAppendFormat(&legend, "<span style=\"color:%s\">&#9632;</span> %s ", line.color,
                          Esc(line.name));
  }
  legend += "</div>";
  return ChartFrame(id, title, scale, digits, points, inner, legend, empty);
}

// Stacked bars, one per round: `parts` (name, color, value per round).
std::string BarChart(const std::string& id, const std::string& title,
                     const std::vector<double>& steps,
                     const std::vector<std::pair<std::string, std::string>>& parts,
                     const std::vector<std::vector<double>>& values, int digits, bool as_bytes) {
  const size_t n = steps.size();
  Scale scale{n > 0 ? steps.front() : 0, n > 0 ? steps.back() : 0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    double total = 0;
    for (const std::vector<double>& part : values) total += part[i];
    scale.y1 = std::max(scale.y1, total);
  }
  const double bar = std::max(1.0, (kWidth - kLeft - kRight) / std::max<size_t>(n, 1) - 1);
  std::string inner;
  for (size_t i = 0; i < n; ++i) {
    const double x =
        kLeft +
        (kWidth - kLeft - kRight) * (static_cast<double>(i) + 0.5) / static_cast<double>(n) -
        bar / 2;
    double below = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const double v = values[p][i];
      if (v <= 0) continue;
      absl::StrAppendFormat(&inner,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                            "fill=\"%s\"><title>step %.0f: %s %s</title></rect>",
                            x, scale.Y(below + v), bar, scale.Y(below) - scale.Y(below + v),
                            parts[p].second, steps[i], Esc(parts[p].first),
                            as_bytes ? Bytes(v) : Fixed(v, 3));
      below += v;
    }
  }
  std::string legend = "<div class=\"legend\">";
  for (const auto& [name, color] : parts) {
    absl::StrAppendFormat(&legend, "<span style=\"color:%s\">&#9632;</span> %s ", color, Esc(name));
  }
  legend += "</div>";
  return ChartFrame(id, title, scale, digits, n, inner, legend, "no rounds yet");
}

std::string Charts(const v1::RunSeries& series) {
  Line mean{"mean", "#1f77b4", {}};
  Line low{"min", "#9ecae1", {}};
  Line high{"max", "#9ecae1", {}};
  Line accuracy{"test accuracy (mean over workers)", "#2ca02c", {}};
  std::vector<double> steps;
  std::vector<std::vector<double>> time(2);
  std::vector<std::vector<double>> bytes(2);
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
    time[0].push_back(p.duration_seconds() - wait);
    time[1].push_back(wait);
    bytes[0].push_back(static_cast<double>(p.bytes_received()));
    bytes[1].push_back(static_cast<double>(p.bytes_sent()));
  }
  return absl::StrCat(
      "<section class=\"charts\">",
      LineChart("chart-loss", "Training loss over global step", {high, low, mean}, 3, false,
                "no rounds yet"),
      LineChart("chart-accuracy", "Test accuracy over global step", {accuracy}, 3, true,
                "no evaluation yet (RunSpec.eval_every_rounds)"),
      BarChart("chart-round-time", "Round time (s): transfer and waiting for the slowest member",
               steps, {{"transfer", "#ff7f0e"}, {"waiting for the slowest", "#d62728"}}, time, 2,
               false),
      BarChart("chart-bytes", "Bytes per round at the coordinator", steps,
               {{"received", "#9467bd"}, {"sent", "#8c564b"}}, bytes, 0, true),
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
  return out + "</section>";
}

std::string Members(const v1::CoordinatorStatus& status) {
  std::string out =
      "<section><h2>Members</h2><table id=\"members\"><thead><tr><th>worker</th><th>host</th>"
      "<th>step</th><th>loss</th><th>samples/s</th><th>test acc.</th><th>heartbeat age</th>"
      "<th>state</th></tr></thead><tbody>";
  std::set<std::string> live;
  for (const v1::MemberStatus& m : status.members()) {
    live.insert(m.worker_id());
    const bool late = m.heartbeat_age_seconds() > kLateSeconds;
    const std::string state = m.finished() ? "finished" : late ? "late" : "live";
    absl::StrAppendFormat(
        &out,
        "<tr class=\"%s\" data-worker=\"%s\"><td>%s%s</td><td>%s</td><td>%d</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td>%s s</td><td>%s</td></tr>",
        state, Esc(m.worker_id()), Esc(m.worker_id()), m.node_leader() ? " &#9733;" : "",
        Esc(m.hostname()), m.step(), Fixed(m.loss(), 4), Fixed(m.samples_per_second(), 1),
        m.test_accuracy() > 0 ? Fixed(m.test_accuracy(), 4) : "-",
        Fixed(m.heartbeat_age_seconds(), 1), state);
  }
  // Workers of the run that are gone, with why.
  for (const v1::MemberResult& r : status.run().member_results()) {
    if (live.count(r.worker_id()) > 0) continue;
    absl::StrAppendFormat(
        &out,
        "<tr class=\"gone\" data-worker=\"%s\"><td>%s</td><td></td><td>%d</td><td>%s</td>"
        "<td></td><td>%s</td><td></td><td>gone: %s</td></tr>",
        Esc(r.worker_id()), Esc(r.worker_id()), r.step(), Fixed(r.loss(), 4),
        r.test_accuracy() > 0 ? Fixed(r.test_accuracy(), 4) : "-",
        Esc(r.left_reason().empty() ? "lease expired" : r.left_reason()));
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
      "<th>duration (s)</th><th>slowest wait (s)</th><th>in</th><th>out</th><th>codec</th>"
      "<th>ratio</th><th>exchange</th><th>fragment</th></tr></thead><tbody>";
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
    const std::string outcome = EnumName(r.outcome());
    absl::StrAppendFormat(
        &out,
        "<tr class=\"%s\"><td>%d</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d (%s)</td></tr>",
        outcome, r.round(), outcome, r.global_step(), r.members_size(),
        r.reason().empty() ? absl::StrJoin(left, "; ") : Esc(r.reason()),
        Fixed(r.duration_seconds(), 3), Fixed(r.slowest_wait_seconds(), 3),
        Bytes(static_cast<double>(r.bytes_received())), Bytes(static_cast<double>(r.bytes_sent())),
        EnumName(r.codec()), Fixed(r.compression_ratio(), 2),
        absl::StrCat(EnumName(r.exchange()), r.ring() ? " (ring)" : ""), r.fragment(),
        Bytes(static_cast<double>(r.values()) * 4));
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
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:1em}
figure{margin:0}figcaption{font-size:.9em;color:#444}svg{width:100%;height:auto;
background:#fcfcfc;border:1px solid #eee}svg text{font-size:10px;fill:#555}
.axis{stroke:#999}.legend{font-size:.8em;color:#444}
tr.late td{background:#fff4d6}tr.gone td{color:#999}tr.ABORTED td{background:#fff0f0}
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
      Header(status), Charts(data.series), Members(status), Events(status), Rounds(status),
      PastRuns(data.runs),
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
