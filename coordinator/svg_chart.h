#ifndef LOCALSGD_COORDINATOR_SVG_CHART_H_
#define LOCALSGD_COORDINATOR_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace localsgd {

// The status page's charts, as inline SVG over global steps (no script, no library): lines and
// stacked bars, each in a frame with nice ticks, grid lines, axis titles and a legend.

// One line of a line chart.
struct ChartLine {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (global step, value), finite only
};

// What a chart shows on its axes: the y axis's title and how its ticks read.
struct ChartAxes {
  std::string y_title;
  bool bytes = false;  // y ticks as "12 kB"
};

// One part of a stacked bar chart: its value in each round.
struct BarPart {
  std::string name;
  std::string color;
  std::vector<double> values;
};

// A line chart of `lines` (`from_zero`: the y axis starts at 0), or `empty` in its frame when
// there is no point. `caption` is HTML.
std::string LineChart(const std::string& id, const std::string& caption,
                      const std::vector<ChartLine>& lines, const ChartAxes& axes, bool from_zero,
                      const std::string& empty);
// Stacked bars, one per round at its global step; parts that are zero in every round are left
// out. A few rounds far longer than the rest (the first, say) would flatten the others: from 10
// rounds on, the axis stops at twice the 90th percentile when the longest is over three times
// that, and longer bars are cut there (their titles keep the value; the legend says how many).
std::string BarChart(const std::string& id, const std::string& caption,
                     const std::vector<double>& steps, std::vector<BarPart> parts,
                     const ChartAxes& axes);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_SVG_CHART_H_
