#include "coordinator/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/html_text.h"

namespace localsgd {
namespace {

constexpr double kWidth = 460;
constexpr double kHeight = 200;
constexpr double kLeft = 66;
constexpr double kRight = 20;
constexpr double kTop = 12;
constexpr double kBottom = 38;

// An axis over [lo, hi] with ticks `step` apart (1, 2 or 5 times a power of ten).
struct Axis {
  double lo = 0, hi = 1, step = 1;
};

// The smallest of 1, 2, 5 times a power of ten that is at least `raw`.
double NiceStep(double raw) {
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  }
  return 10 * magnitude;
}

// The nice step below `step` (5 -> 2, 2 -> 1, 1 -> 0.5).
double SmallerStep(double step) { return NiceStep(step * 0.39); }

std::vector<double> Ticks(const Axis& axis) {
  std::vector<double> ticks;
  for (double t = std::ceil(axis.lo / axis.step - 1e-9) * axis.step;
       t <= axis.hi + axis.step * 1e-6; t += axis.step) {
    ticks.push_back(t + 0.0);  // never -0
  }
  return ticks;
}

// A value axis: from lo to hi, both ends on ticks, about four intervals.
Axis ValueAxis(double lo, double hi) {
  if (!(hi > lo)) {  // one value: a range around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double step = NiceStep((hi - lo) / 4);
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

// A global-step axis: exactly [lo, hi] (widened to 2 steps at least), with at least three whole
// ticks inside.
Axis StepAxis(double lo, double hi) {
  if (hi - lo < 2) {
    lo -= 1;
    hi += 1;
  }
  Axis axis{lo, hi, std::max(1.0, NiceStep((hi - lo) / 4))};
  while (axis.step > 1 && Ticks(axis).size() < 3) axis.step = std::max(1.0, SmallerStep(axis.step));
  return axis;
}

// A tick label with as many decimals as the step needs.
std::string TickLabel(double value, double step) {
  const int digits = std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  return Fixed(std::abs(value) < step * 1e-6 ? 0 : value, digits);
}

struct Scale {
  Axis x, y;
  double X(double v) const {
    return kLeft + (v - x.lo) / (x.hi - x.lo) * (kWidth - kLeft - kRight);
  }
  double Y(double v) const {
    return kHeight - kBottom - (v - y.lo) / (y.hi - y.lo) * (kHeight - kTop - kBottom);
  }
};

// The chart's frame: ticks, grid lines and labels on both axes, the axis titles, then `inner`
// (the data, drawn on `scale`), or `empty` when there is nothing to draw. `caption` is HTML.
std::string ChartFrame(const std::string& id, const std::string& caption, const Scale& scale,
                       const ChartAxes& axes, size_t points, const std::string& inner,
                       const std::string& legend, const std::string& empty) {
  const std::vector<double> x_ticks = points > 0 ? Ticks(scale.x) : std::vector<double>();
  const std::vector<double> y_ticks = points > 0 ? Ticks(scale.y) : std::vector<double>();
  std::string svg = absl::StrFormat(
      "<figure class=\"chart\"><figcaption>%s</figcaption><svg id=\"%s\" data-points=\"%d\" "
      "data-x-ticks=\"%d\" data-y-ticks=\"%d\" viewBox=\"0 0 %g %g\" role=\"img\">",
      caption, id, points, x_ticks.size(), y_ticks.size(), kWidth, kHeight);
  for (double t : y_ticks) {
    absl::StrAppendFormat(&svg,
                          "<line class=\"grid\" x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\"/>"
                          "<text class=\"tick\" x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
                          kLeft, scale.Y(t), kWidth - kRight, scale.Y(t), kLeft - 4,
                          scale.Y(t) + 3.5, axes.bytes ? Bytes(t) : TickLabel(t, scale.y.step));
  }
  for (double t : x_ticks) {
    absl::StrAppendFormat(
        &svg,
        "<line class=\"axis\" x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\"/>"
        "<text class=\"tick\" x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%s</text>",
        scale.X(t), kHeight - kBottom, scale.X(t), kHeight - kBottom + 4, scale.X(t),
        kHeight - kBottom + 15, TickLabel(t, scale.x.step));
  }
  absl::StrAppendFormat(
      &svg,
      "<line class=\"axis\" x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>"
      "<line class=\"axis\" x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\"/>"
      "<text class=\"x-title\" x=\"%g\" y=\"%g\" text-anchor=\"middle\">global step</text>"
      "<text class=\"y-title\" transform=\"translate(12 %g) rotate(-90)\" "
      "text-anchor=\"middle\">%s</text>",
      kLeft, kTop, kLeft, kHeight - kBottom, kLeft, kHeight - kBottom, kWidth - kRight,
      kHeight - kBottom, (kLeft + kWidth - kRight) / 2, kHeight - 4, (kTop + kHeight - kBottom) / 2,
      Esc(axes.y_title));
  if (points == 0) {
    absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>",
                          kWidth / 2, kHeight / 2, empty);
  }
  return absl::StrCat(svg, inner, "</svg>", legend, "</figure>");
}

std::string LegendEntry(const std::string& name, const std::string& color) {
  return absl::StrFormat("<span class=\"entry\"><span style=\"color:%s\">&#9632;</span> %s</span> ",
                         color, Esc(name));
}

}  // namespace

std::string LineChart(const std::string& id, const std::string& caption,
                      const std::vector<ChartLine>& lines, const ChartAxes& axes, bool from_zero,
                      const std::string& empty) {
  size_t points = 0;  // of the longest line
  bool first = true;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  for (const ChartLine& line : lines) {
    for (const auto& [x, y] : line.points) {
      x0 = first ? x : std::min(x0, x);
      x1 = first ? x : std::max(x1, x);
      y0 = first ? y : std::min(y0, y);
      y1 = first ? y : std::max(y1, y);
      first = false;
    }
    points = std::max(points, line.points.size());
  }
  if (from_zero) y0 = std::min(y0, 0.0);
  const Scale scale{StepAxis(x0, x1), ValueAxis(y0, y1)};
  std::string inner;
  std::string legend = "<div class=\"legend\">";
  for (const ChartLine& line : lines) {
    if (line.points.empty()) continue;
    std::vector<std::string> coords;
    for (const auto& [x, y] : line.points) {
      coords.push_back(absl::StrFormat("%.1f,%.1f", scale.X(x), scale.Y(y)));
    }
    absl::StrAppendFormat(
        &inner, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>",
        line.color, absl::StrJoin(coords, " "));
    if (line.points.size() == 1) {
      absl::StrAppendFormat(&inner,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\">"
                            "<title>%s: %s at step %.0f</title></circle>",
                            scale.X(line.points[0].first), scale.Y(line.points[0].second),
                            line.color, Esc(line.name), Fixed(line.points[0].second, 4),
                            line.points[0].first);
    }
    legend += LegendEntry(line.name, line.color);
  }
  legend += "</div>";
  return ChartFrame(id, Esc(caption), scale, axes, points, inner, legend, empty);
}

std::string BarChart(const std::string& id, const std::string& caption,
                     const std::vector<double>& steps, std::vector<BarPart> parts,
                     const ChartAxes& axes) {
  const size_t n = steps.size();
  parts.erase(std::remove_if(parts.begin(), parts.end(),
                             [](const BarPart& part) {
                               return std::all_of(part.values.begin(), part.values.end(),
                                                  [](double v) { return v <= 0; });
                             }),
              parts.end());
  std::vector<double> totals(n, 0);
  for (size_t i = 0; i < n; ++i) {
    for (const BarPart& part : parts) totals[i] += part.values[i];
  }
  std::vector<double> sorted = totals;
  std::sort(sorted.begin(), sorted.end());
  double top = sorted.empty() ? 0 : sorted.back();
  if (n >= 10) {
    const double p90 = sorted[(n - 1) * 9 / 10];
    if (p90 > 0 && top > 3 * p90) top = 2 * p90;
  }
  // Bars centred on their steps, as wide as the rounds' mean spacing allows.
  double gap = n > 1 ? (steps.back() - steps.front()) / static_cast<double>(n - 1) : 1;
  if (!(gap > 0)) gap = 1;
  const double first = n > 0 ? steps.front() : 0;
  const double last = n > 0 ? steps.back() : 0;
  const Scale scale{StepAxis(first - gap / 2, last + gap / 2), ValueAxis(0, top > 0 ? top : 1)};
  const double bar = std::max(1.0, 0.8 * (scale.X(gap) - scale.X(0)));
  std::string inner;
  int cut = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = scale.X(steps[i]) - bar / 2;
    if (totals[i] > scale.y.hi) ++cut;
    double below = 0;
    for (const BarPart& part : parts) {
      const double v = part.values[i];
      if (v <= 0 || below >= scale.y.hi) continue;
      const double upto = std::min(below + v, scale.y.hi);
      absl::StrAppendFormat(&inner,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                            "fill=\"%s\"><title>step %.0f: %s %s</title></rect>",
                            x, scale.Y(upto), bar, scale.Y(below) - scale.Y(upto), part.color,
                            steps[i], Esc(part.name),
                            axes.bytes ? Bytes(v) : absl::StrCat(Fixed(v, 3), " s"));
      below += v;
    }
  }
  std::string legend = "<div class=\"legend\">";
  for (const BarPart& part : parts) legend += LegendEntry(part.name, part.color);
  if (cut > 0) {
    absl::StrAppendFormat(&legend, "<span class=\"entry cut\">%d longer %s cut at the top</span>",
                          cut, cut == 1 ? "bar" : "bars");
  }
  legend += "</div>";
  return ChartFrame(id, caption, scale, axes, n, inner, legend, "no rounds yet");
}

}  // namespace localsgd
