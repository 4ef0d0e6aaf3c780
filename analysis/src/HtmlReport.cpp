#include "attnscope/analysis/HtmlReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "attnscope/analysis/JsonReport.h"

namespace attnscope {
namespace analysis {
namespace {

using text::html;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// Perceptually ordered colour scale (dark blue → green → yellow) for t in [0, 1].
std::string heatColor(double t) {
  static const double stops[][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x",
                static_cast<int>(stops[i][0] + f * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + f * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + f * (stops[i + 1][2] - stops[i][2])));
  return buf;
}

const char* rankColor(int rank) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[rank % 10];
}

constexpr const char* kForwardColor = "#4c78a8";
constexpr const char* kBackwardColor = "#f58518";

// "Nice" upper bound for an axis.
double niceMax(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * p >= v) return m * p;
  }
  return 10 * p;
}

void heatmap(std::ostringstream& o, const Analysis& a) {
  const int bins =
      a.binAttentionSeconds.empty() ? 0 : static_cast<int>(a.binAttentionSeconds[0].size());
  const int rows = static_cast<int>(a.ranks.size());
  if (bins == 0 || rows == 0) {
    o << "<p>No sampled steps.</p>";
    return;
  }
  const int left = 70, top = 10, width = 820;
  const int cellH = std::clamp(360 / rows, 3, 26);
  const double cellW = static_cast<double>(width) / bins;
  const int height = top + rows * cellH + 60;
  // Colour scale from the smallest value to the 95th percentile: one preempted bin would
  // otherwise flatten every other cell into the same colour.
  std::vector<double> values;
  for (const auto& row : a.binAttentionSeconds) {
    for (double v : row) {
      if (std::isfinite(v)) values.push_back(v);
    }
  }
  std::sort(values.begin(), values.end());
  double lo = values.empty() ? 0 : values.front();
  double hi = values.empty() ? 1 : values[std::min(values.size() - 1, values.size() * 95 / 100)];
  if (!(hi > lo)) hi = lo + 1e-9;
  o << "<svg class=\"plot\" id=\"heatmap\" width=\"" << left + width + 40 << "\" height=\""
    << height
    << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"attention time per step, "
       "rank by time\">\n";
  for (int r = 0; r < rows; ++r) {
    const int y = top + r * cellH;
    if (cellH >= 9 || r % std::max(1, 10 / cellH) == 0) {
      o << "<text x=\"" << left - 6 << "\" y=\"" << y + cellH * 0.5 + 4
        << "\" text-anchor=\"end\" class=\"lbl\">rank " << a.ranks[r].rank << "</text>\n";
    }
    for (int b = 0; b < bins; ++b) {
      const double v = a.binAttentionSeconds[r][b];
      const double x = left + b * cellW;
      const double score = a.binScore[r][b];
      o << "<rect x=\"" << fmt("%.1f", x) << "\" y=\"" << y << "\" width=\""
        << fmt("%.1f", cellW + 0.3) << "\" height=\"" << cellH << "\" fill=\""
        << (std::isfinite(v) ? heatColor((v - lo) / (hi - lo)) : "#eeeeee") << "\"";
      if (std::isfinite(score) && score > a.threshold)
        o << " stroke=\"#d62728\" stroke-width=\"1.5\"";
      o << "><title>rank " << a.ranks[r].rank << ", +" << fmt("%.1f", b * a.binSeconds) << " s: "
        << (std::isfinite(v) ? text::seconds(v) + " attention per step" : "no sampled step")
        << (std::isfinite(score) ? ", score " + fmt("%.2f", score) : "") << "</title></rect>\n";
    }
  }
  const int axisY = top + rows * cellH;
  for (int t = 0; t <= 5; ++t) {
    const double x = left + width * t / 5.0;
    o << "<text x=\"" << fmt("%.1f", x) << "\" y=\"" << axisY + 16
      << "\" text-anchor=\"middle\" class=\"lbl\">+" << fmt("%.1f", bins * a.binSeconds * t / 5.0)
      << " s</text>\n";
  }
  // Legend.
  const int ly = axisY + 30;
  for (int i = 0; i < 50; ++i) {
    o << "<rect x=\"" << left + i * 4 << "\" y=\"" << ly << "\" width=\"4\" height=\"10\" fill=\""
      << heatColor(i / 49.0) << "\"/>";
  }
  o << "\n<text x=\"" << left + 206 << "\" y=\"" << ly + 9 << "\" class=\"lbl\">"
    << html(text::seconds(lo)) << " to " << html(text::seconds(hi))
    << "+ attention per step (median in the bin); red outline: score above "
    << fmt("%.2f", a.threshold) << "</text>\n</svg>\n";
}

void scoreTimeline(std::ostringstream& o, const Analysis& a) {
  const int bins = a.binScore.empty() ? 0 : static_cast<int>(a.binScore[0].size());
  if (bins == 0) return;
  const int left = 70, top = 10, width = 820, height = 220;
  double hi = std::max(2.0, a.threshold * 1.2);
  for (const auto& row : a.binScore) {
    for (double v : row) {
      if (std::isfinite(v)) hi = std::max(hi, v);
    }
  }
  hi = niceMax(hi);
  const double lo = 0;
  const auto X = [&](double bin) { return left + width * (bin + 0.5) / bins; };
  const auto Y = [&](double v) { return top + height * (1 - (v - lo) / (hi - lo)); };
  o << "<svg class=\"plot\" id=\"timeline\" width=\"" << left + width + 40 << "\" height=\""
    << top + height + 50
    << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"straggler score per rank "
       "over time\">\n";
  for (const StragglerEpisode& e : a.stragglers) {
    const double x0 = left + width * static_cast<double>(e.firstBin) / bins;
    const double x1 = left + width * static_cast<double>(e.lastBin + 1) / bins;
    o << "<rect x=\"" << fmt("%.1f", x0) << "\" y=\"" << top << "\" width=\""
      << fmt("%.1f", x1 - x0) << "\" height=\"" << height
      << "\" fill=\"#d62728\" fill-opacity=\"0.10\"><title>rank " << e.rank
      << " straggling: " << html(e.layer) << "</title></rect>\n";
    o << "<text x=\"" << fmt("%.1f", x0 + 4) << "\" y=\"" << top + 14
      << "\" class=\"lbl\" fill=\"#d62728\">rank " << e.rank << "</text>\n";
  }
  for (int t = 0; t <= 4; ++t) {
    const double v = lo + (hi - lo) * t / 4;
    o << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\"" << fmt("%.1f", Y(v))
      << "\" y2=\"" << fmt("%.1f", Y(v)) << "\" stroke=\"#dddddd\"/><text x=\"" << left - 6
      << "\" y=\"" << fmt("%.1f", Y(v) + 4) << "\" text-anchor=\"end\" class=\"lbl\">"
      << fmt("%.2f", v) << "</text>\n";
  }
  o << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\""
    << fmt("%.1f", Y(a.threshold)) << "\" y2=\"" << fmt("%.1f", Y(a.threshold))
    << "\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/>\n";
  for (size_t r = 0; r < a.binScore.size(); ++r) {
    std::string points;
    for (int b = 0; b < bins; ++b) {
      const double v = a.binScore[r][b];
      if (!std::isfinite(v)) continue;
      points += fmt("%.1f", X(b)) + "," + fmt("%.1f", Y(std::min(v, hi))) + " ";
    }
    if (points.empty()) continue;
    o << "<polyline points=\"" << points << "\" fill=\"none\" stroke=\""
      << rankColor(a.ranks[r].rank) << "\" stroke-width=\"1.8\"><title>rank " << a.ranks[r].rank
      << "</title></polyline>\n";
  }
  for (int t = 0; t <= 5; ++t) {
    o << "<text x=\"" << fmt("%.1f", left + width * t / 5.0) << "\" y=\"" << top + height + 16
      << "\" text-anchor=\"middle\" class=\"lbl\">+" << fmt("%.1f", bins * a.binSeconds * t / 5.0)
      << " s</text>\n";
  }
  double lx = left;
  for (size_t r = 0; r < a.ranks.size() && r < 16; ++r) {
    o << "<rect x=\"" << lx << "\" y=\"" << top + height + 28
      << "\" width=\"10\" height=\"10\" fill=\"" << rankColor(a.ranks[r].rank) << "\"/><text x=\""
      << lx + 14 << "\" y=\"" << top + height + 37 << "\" class=\"lbl\">rank " << a.ranks[r].rank
      << "</text>\n";
    lx += 70;
  }
  o << "<text x=\"" << lx + 10 << "\" y=\"" << top + height + 37
    << "\" class=\"lbl\">dashed: threshold " << fmt("%.2f", a.threshold) << "</text>\n</svg>\n";
}

// Grouped bars: per layer, per rank, a forward and a backward bar of value(row, rank).
template <typename Value, typename Label>
void layerBars(std::ostringstream& o, const Analysis& a, const char* id, const char* aria,
               Value value, Label label) {
  std::vector<std::string> layers;
  for (const LayerPhaseRow& l : a.layers) {
    if (std::find(layers.begin(), layers.end(), l.layer) == layers.end()) layers.push_back(l.layer);
  }
  const size_t ranks = a.ranks.size();
  if (layers.empty() || ranks == 0) return;
  const auto find = [&](const std::string& layer, Phase p) -> const LayerPhaseRow* {
    for (const LayerPhaseRow& l : a.layers) {
      if (l.layer == layer && l.phase == p) return &l;
    }
    return nullptr;
  };
  double hi = 0;
  for (const LayerPhaseRow& l : a.layers) {
    for (size_t r = 0; r < ranks; ++r) {
      const double v = value(l, r);
      if (std::isfinite(v)) hi = std::max(hi, v);
    }
  }
  hi = niceMax(hi);
  const int left = 80, top = 10, height = 200, width = 820;
  const double groupW = static_cast<double>(width) / layers.size();
  const double barW = std::max(1.0, (groupW * 0.8) / (2.0 * ranks));
  o << "<svg class=\"plot\" id=\"" << id << "\" width=\"" << left + width + 20 << "\" height=\""
    << top + height + 60 << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\""
    << aria << "\">\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = hi * t / 4;
    const double y = top + height * (1 - v / hi);
    o << "<line x1=\"" << left << "\" x2=\"" << left + width << "\" y1=\"" << fmt("%.1f", y)
      << "\" y2=\"" << fmt("%.1f", y) << "\" stroke=\"#dddddd\"/><text x=\"" << left - 6
      << "\" y=\"" << fmt("%.1f", y + 4) << "\" text-anchor=\"end\" class=\"lbl\">"
      << html(label(v)) << "</text>\n";
  }
  for (size_t g = 0; g < layers.size(); ++g) {
    const double gx = left + g * groupW + groupW * 0.1;
    for (size_t r = 0; r < ranks; ++r) {
      for (int p = 0; p < 2; ++p) {
        const LayerPhaseRow* row = find(layers[g], p == 0 ? Phase::kForward : Phase::kBackward);
        const double v = row != nullptr ? value(*row, r) : NAN;
        if (!std::isfinite(v)) continue;
        const double h = height * v / hi;
        o << "<rect x=\"" << fmt("%.1f", gx + (2 * r + p) * barW) << "\" y=\""
          << fmt("%.1f", top + height - h) << "\" width=\""
          << fmt("%.1f", std::max(0.8, barW - 0.6)) << "\" height=\"" << fmt("%.1f", h)
          << "\" fill=\"" << (p == 0 ? kForwardColor : kBackwardColor) << "\"><title>"
          << html(layers[g]) << " rank " << a.ranks[r].rank
          << (p == 0 ? " forward: " : " backward: ") << html(label(v)) << "</title></rect>\n";
      }
    }
    o << "<text x=\"" << fmt("%.1f", left + g * groupW + groupW / 2) << "\" y=\""
      << top + height + 16 << "\" text-anchor=\"middle\" class=\"lbl\">" << html(layers[g])
      << "</text>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top + height + 30
    << "\" width=\"10\" height=\"10\" fill=\"" << kForwardColor << "\"/><text x=\"" << left + 14
    << "\" y=\"" << top + height + 39 << "\" class=\"lbl\">forward</text>"
    << "<rect x=\"" << left + 90 << "\" y=\"" << top + height + 30
    << "\" width=\"10\" height=\"10\" fill=\"" << kBackwardColor << "\"/><text x=\"" << left + 104
    << "\" y=\"" << top + height + 39 << "\" class=\"lbl\">backward</text><text x=\"" << left + 200
    << "\" y=\"" << top + height + 39 << "\" class=\"lbl\">bars per layer: ranks "
    << a.ranks.front().rank << " to " << a.ranks.back().rank << " left to right</text>\n</svg>\n";
}

constexpr const char* kRecomputeColor = "#54a24b";

const char* phaseColor(Phase p) {
  switch (p) {
    case Phase::kForward:
      return kForwardColor;
    case Phase::kBackward:
      return kBackwardColor;
    default:
      return kRecomputeColor;
  }
}

// Forward: a filled dot; backward: a ring; recompute: a smaller green dot.
std::string phaseMarker(Phase p) {
  if (p == Phase::kBackward) {
    return std::string("r=\"6\" fill=\"none\" stroke=\"") + kBackwardColor +
           "\" stroke-width=\"2.2\"";
  }
  return std::string("r=\"") + (p == Phase::kForward ? "4.5" : "3.5") + "\" fill=\"" +
         phaseColor(p) + "\"";
}

// Decade-aligned log axis around [lo, hi] (both > 0).
struct LogAxis {
  double lo = 1, hi = 10;
  LogAxis(double minV, double maxV) {  // clamped to 1e-30..1e30: at most 61 decades
    minV = std::clamp(minV, 1e-30, 1e30);
    maxV = std::clamp(maxV, minV, 1e30);
    lo = std::pow(10, std::floor(std::log10(minV) - 0.3));
    hi = std::pow(10, std::ceil(std::log10(maxV) + 0.3));
    if (!(hi > lo)) hi = lo * 10;
  }
  double at(double v, double from, double length) const {  // position along an axis of `length`
    return from + length * (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  }
};

std::string decadeLabel(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string pointTooltip(const ReportRooflineCell& c) {
  const RooflinePoint& p = c.point;
  std::string t = html(c.layer) + " " + phaseName(c.phase) + " " + opKindName(c.kind) + ": ";
  if (c.flops > 0)
    t += "intensity " + fmt(p.intensity >= 10 ? "%.0f" : "%.3g", p.intensity) + " flop/B, ";
  t += text::si(p.flopsPerSecond, "FLOP/s") + ", " + text::si(p.bytesPerSecond, "B/s") + ", ";
  if (p.bound == Bound::kUnknown) return t + "ceilings unknown";
  return t + boundName(p.bound) + "-bound, " + text::percent(p.fraction) + " of roof";
}

// One log-log roofline plot of the cells of `kind`: the bandwidth slope and the compute roof, the
// ridge, and one point per (layer, phase).
void rooflinePlot(std::ostringstream& o, const RooflineAnalysis& r, OpKind kind) {
  std::vector<const ReportRooflineCell*> cells;
  double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
  for (const ReportRooflineCell& c : r.cells) {
    const RooflinePoint& p = c.point;
    if (c.kind != kind || !(p.flopsPerSecond > 0) || !(p.intensity > 0) ||
        !std::isfinite(p.flopsPerSecond) || !std::isfinite(p.intensity)) {
      continue;
    }
    cells.push_back(&c);
    xmin = std::min(xmin, c.point.intensity);
    xmax = std::max(xmax, c.point.intensity);
    ymin = std::min(ymin, c.point.flopsPerSecond);
    ymax = std::max(ymax, c.point.flopsPerSecond);
  }
  if (cells.empty()) return;
  const Ceilings& roof = r.ceilings;
  if (roof.known()) {
    xmin = std::min(xmin, roof.ridge());
    xmax = std::max(xmax, roof.ridge());
    ymax = std::max(ymax, roof.peakFlopsPerSecond);
  }
  const LogAxis xa(xmin, xmax), ya(ymin, ymax);
  const int left = 64, top = 26, pw = 380, ph = 240, width = left + pw + 16, height = top + ph + 68;
  const auto X = [&](double v) { return xa.at(v, left, pw); };
  const auto Y = [&](double v) { return ya.at(v, top + ph, -ph); };
  const char* name = opKindName(kind);
  o << "<svg class=\"roofline\" data-kind=\"" << name << "\" id=\"roofline-" << name
    << "\" width=\"" << width << "\" height=\"" << height
    << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"roofline of " << name
    << "\">\n";
  o << "<text x=\"" << left << "\" y=\"16\" class=\"ttl\">" << name << "</text>\n";
  // Grid and decade ticks.
  for (double v = xa.lo; v <= xa.hi * 1.0001; v *= 10) {
    o << "<line x1=\"" << fmt("%.1f", X(v)) << "\" x2=\"" << fmt("%.1f", X(v)) << "\" y1=\"" << top
      << "\" y2=\"" << top + ph << "\" stroke=\"#e4e4e4\"/><text x=\"" << fmt("%.1f", X(v))
      << "\" y=\"" << top + ph + 14 << "\" text-anchor=\"middle\" class=\"lbl\">" << decadeLabel(v)
      << "</text>\n";
  }
  for (double v = ya.lo; v <= ya.hi * 1.0001; v *= 10) {
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << fmt("%.1f", Y(v))
      << "\" y2=\"" << fmt("%.1f", Y(v)) << "\" stroke=\"#e4e4e4\"/><text x=\"" << left - 5
      << "\" y=\"" << fmt("%.1f", Y(v) + 4) << "\" text-anchor=\"end\" class=\"lbl\">"
      << decadeLabel(v / 1e9) << "</text>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#999999\"/>\n";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << top + ph + 30
    << "\" text-anchor=\"middle\" class=\"lbl\">arithmetic intensity (flop/byte)</text>\n";
  o << "<text x=\"14\" y=\"" << top + ph / 2
    << "\" text-anchor=\"middle\" class=\"lbl\" transform=\"rotate(-90 14 " << top + ph / 2
    << ")\">achieved GFLOP/s</text>\n";
  if (roof.known()) {
    // The bandwidth slope from where it enters the plot to the ridge, then the compute roof.
    const double ridge = roof.ridge();
    const double x0 = std::max(xa.lo, ya.lo / roof.peakBytesPerSecond);
    if (x0 < ridge) {
      o << "<line class=\"roof-bandwidth\" x1=\"" << fmt("%.1f", X(x0)) << "\" y1=\""
        << fmt("%.1f", Y(x0 * roof.peakBytesPerSecond)) << "\" x2=\"" << fmt("%.1f", X(ridge))
        << "\" y2=\"" << fmt("%.1f", Y(roof.peakFlopsPerSecond))
        << "\" stroke=\"#d62728\" stroke-width=\"2\"><title>memory roof: "
        << text::si(roof.peakBytesPerSecond, "B/s") << "</title></line>\n";
      // Its label along the slope, at the middle.
      const double mx = (X(x0) + X(ridge)) / 2,
                   my = (Y(x0 * roof.peakBytesPerSecond) + Y(roof.peakFlopsPerSecond)) / 2;
      const double angle = std::atan2(Y(roof.peakFlopsPerSecond) - Y(x0 * roof.peakBytesPerSecond),
                                      X(ridge) - X(x0)) *
                           180 / M_PI;
      o << "<text x=\"" << fmt("%.1f", mx) << "\" y=\"" << fmt("%.1f", my - 5)
        << "\" text-anchor=\"middle\" "
        << "class=\"lbl\" fill=\"#d62728\" transform=\"rotate(" << fmt("%.1f", angle) << " "
        << fmt("%.1f", mx) << " " << fmt("%.1f", my) << ")\">"
        << html(text::si(roof.peakBytesPerSecond, "B/s")) << "</text>\n";
    }
    o << "<text x=\"" << left + pw - 4 << "\" y=\"" << fmt("%.1f", Y(roof.peakFlopsPerSecond) - 5)
      << "\" text-anchor=\"end\" class=\"lbl\" fill=\"#d62728\">"
      << html(text::si(roof.peakFlopsPerSecond, "FLOP/s")) << "</text>\n";
    o << "<line class=\"roof-compute\" x1=\"" << fmt("%.1f", X(std::max(ridge, xa.lo)))
      << "\" y1=\"" << fmt("%.1f", Y(roof.peakFlopsPerSecond)) << "\" x2=\"" << left + pw
      << "\" y2=\"" << fmt("%.1f", Y(roof.peakFlopsPerSecond))
      << "\" stroke=\"#d62728\" stroke-width=\"2\"><title>compute roof: "
      << text::si(roof.peakFlopsPerSecond, "FLOP/s") << "</title></line>\n";
    o << "<line class=\"ridge\" x1=\"" << fmt("%.1f", X(ridge)) << "\" x2=\""
      << fmt("%.1f", X(ridge)) << "\" y1=\"" << fmt("%.1f", Y(roof.peakFlopsPerSecond))
      << "\" y2=\"" << top + ph << "\" stroke=\"#888888\" stroke-dasharray=\"4 3\"/><text x=\""
      << fmt("%.1f", X(ridge) + 4) << "\" y=\"" << top + ph - 6 << "\" class=\"lbl\">ridge "
      << fmt(ridge >= 10 ? "%.0f" : "%.2g", ridge) << " flop/B</text>\n";
  }
  // Backward points are rings drawn first, so a forward point at the same place stays visible.
  bool phases[kNumPhases] = {};
  for (int pass = 0; pass < 2; ++pass) {
    for (const ReportRooflineCell* c : cells) {
      const bool ring = c->phase == Phase::kBackward;
      if (ring != (pass == 0)) continue;
      phases[static_cast<int>(c->phase)] = true;
      o << "<circle class=\"roofline-point\" data-layer=\"" << html(c->layer) << "\" data-phase=\""
        << phaseName(c->phase) << "\" cx=\"" << fmt("%.1f", X(c->point.intensity)) << "\" cy=\""
        << fmt("%.1f", Y(c->point.flopsPerSecond)) << "\" " << phaseMarker(c->phase) << "><title>"
        << pointTooltip(*c) << "</title></circle>\n";
    }
  }
  // Legend: phases, then the roofs.
  const int ly = top + ph + 48;
  int lx = left;
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kRecompute}) {
    if (!phases[static_cast<int>(p)]) continue;
    o << "<circle cx=\"" << lx + 6 << "\" cy=\"" << ly - 4 << "\" " << phaseMarker(p)
      << "/><text x=\"" << lx + 15 << "\" y=\"" << ly << "\" class=\"lbl\">" << phaseName(p)
      << "</text>\n";
    lx += 84;
  }
  if (roof.known()) {
    o << "<line x1=\"" << lx << "\" x2=\"" << lx + 18 << "\" y1=\"" << ly - 4 << "\" y2=\""
      << ly - 4 << "\" stroke=\"#d62728\" stroke-width=\"2\"/><text x=\"" << lx + 22 << "\" y=\""
      << ly << "\" class=\"lbl\">roofs"
      << (roof.source.empty() ? std::string() : " (" + html(roof.source) + ")") << "</text>\n";
  } else {
    o << "<text x=\"" << lx << "\" y=\"" << ly
      << "\" class=\"lbl\">no roof (ceilings unknown)</text>\n";
  }
  o << "</svg>\n";
}

void rooflineSection(std::ostringstream& o, const Analysis& a) {
  const RooflineAnalysis& r = a.roofline;
  o << "<h2>Roofline</h2>\n";
  if (!r.present) {
    o << "<p id=\"roofline-none\">No roofline data in these traces (written before the roofline "
         "existed, or with "
         "it off).</p>\n";
    return;
  }
  const Ceilings& c = r.ceilings;
  o << "<div class=\"sub\" id=\"roofline-ceilings\">";
  if (c.known()) {
    o << "Ceilings: <b>" << html(text::si(c.peakFlopsPerSecond, "FLOP/s")) << "</b> and <b>"
      << html(text::si(c.peakBytesPerSecond, "B/s")) << "</b>, ridge " << fmt("%.3g", c.ridge())
      << " flop/B (" << html(c.source.empty() ? "source not stated" : c.source)
      << (c.detail.empty() ? "" : ": " + html(c.detail))
      << (r.ceilingRanks > 1 ? "; median of " + std::to_string(r.ceilingRanks) + " ranks" : "")
      << "). ";
  } else {
    o << "Ceilings unknown: no rank stated its peak rates, so points are not classified. ";
  }
  o << "Times are "
    << (r.timing == "device" ? "device (GPU) times"
        : r.timing == "host" ? "host (CPU) times"
                             : "of unstated origin")
    << "; rates divide by the time of the ops with a FLOP/byte formula (docs/ROOFLINE.md).";
  if (r.badRows > 0) o << " " << r.badRows << " roofline rows were out of range and left out.";
  o << "</div>\n<table id=\"roofline-hardware\"><tr><th>rank</th><th class=\"l\">node</th><th "
       "class=\"l\">CPU</th>"
       "<th>cores</th><th>torch threads</th><th class=\"l\">BLAS</th><th "
       "class=\"l\">GPU</th><th>peak FLOP/s</th>"
       "<th>peak B/s</th><th class=\"l\">ceilings from</th><th class=\"l\">timing</th><th "
       "class=\"l\">torch</th></tr>\n";
  for (const RankHardware& h : r.hardware) {
    std::string gpu = h.gpuName;
    if (!h.gpuDriver.empty()) gpu += ", driver " + h.gpuDriver;
    double gpuBytes = 0;
    if (!h.gpuMemoryBytes.empty()) gpuBytes = std::atof(h.gpuMemoryBytes.c_str());
    if (gpuBytes > 0) gpu += ", " + text::bytes(gpuBytes);
    o << "<tr><td>" << h.rank << "</td><td class=\"l\">" << html(h.node) << "</td><td class=\"l\">"
      << html(h.cpuModel) << "</td><td>" << html(h.cpuCores) << "</td><td>" << html(h.torchThreads)
      << "</td><td class=\"l\">" << html(h.blas) << "</td><td class=\"l\">"
      << html(gpu.empty() ? "none" : gpu) << "</td><td>"
      << html(text::si(h.ceilings.peakFlopsPerSecond > 0 ? h.ceilings.peakFlopsPerSecond : NAN,
                       "FLOP/s"))
      << "</td><td>"
      << html(text::si(h.ceilings.peakBytesPerSecond > 0 ? h.ceilings.peakBytesPerSecond : NAN,
                       "B/s"))
      << "</td><td class=\"l\">" << html(h.ceilings.source)
      << (h.ceilings.detail.empty() ? "" : ": ") << html(h.ceilings.detail)
      << "</td><td class=\"l\">" << html(h.timing) << "</td><td class=\"l\">"
      << html(h.torchVersion) << "</td></tr>\n";
  }
  o << "</table>\n";
  // One plot per kind that computes; kinds that only move data are in the table.
  o << "<div id=\"roofline-plots\">\n";
  for (int k = 0; k < kNumOpKinds; ++k) rooflinePlot(o, r, static_cast<OpKind>(k));
  o << "</div>\n<div class=\"sub\">Each point is one (layer, phase) of the op kind, summed over "
       "every rank and "
       "window; hover for its figures. Kinds that only move data (no flops) cannot sit on a log "
       "intensity axis: "
       "the table gives their bytes per second against the bandwidth roof.</div>\n";
  o << "<div class=\"wide\"><table id=\"roofline-table\"><tr><th class=\"l\">layer</th><th "
       "class=\"l\">phase</th><th class=\"l\">kind</th>"
       "<th>ops</th><th>time</th><th>modelled</th><th>GFLOP</th><th>GB</th><th>flop/B</"
       "th><th>GFLOP/s</th>"
       "<th>GB/s</th><th class=\"l\">bound</th><th>% of roof</th><th>roof</th><th class=\"l\">per "
       "rank, % of own roof</th></tr>\n";
  for (const ReportRooflineCell& x : r.cells) {
    const RooflinePoint& p = x.point;
    const bool rated = x.modelledSeconds > 0;
    std::string ranks;
    double lo = INFINITY, hi = -INFINITY;
    int loRank = -1, hiRank = -1, n = 0;
    for (size_t i = 0; i < x.rankFraction.size(); ++i) {
      const double f = x.rankFraction[i];
      if (!std::isfinite(f)) continue;
      ++n;
      if (f < lo) lo = f, loRank = a.ranks[i].rank;
      if (f > hi) hi = f, hiRank = a.ranks[i].rank;
    }
    if (n <= 4) {  // every rank: "r0 53%, r1 56%"
      for (size_t i = 0; i < x.rankFraction.size(); ++i) {
        if (!std::isfinite(x.rankFraction[i])) continue;
        ranks += (ranks.empty() ? "r" : ", r") + std::to_string(a.ranks[i].rank) + " " +
                 text::percent(x.rankFraction[i]);
      }
    } else {  // the extremes: "18% (r3) to 60% (r0)"
      ranks = text::percent(lo) + " (r" + std::to_string(loRank) + ") to " + text::percent(hi) +
              " (r" + std::to_string(hiRank) + ")";
    }
    std::string roofText = "-";
    if (p.bound != Bound::kUnknown) {
      roofText = x.flops > 0 ? text::si(p.attainableFlopsPerSecond, "FLOP/s")
                             : text::si(c.peakBytesPerSecond, "B/s");
    }
    o << "<tr><td class=\"l\">" << html(x.layer) << "</td><td class=\"l\">" << phaseName(x.phase)
      << "</td><td class=\"l\">" << opKindName(x.kind) << "</td><td>" << x.ops << "</td><td>"
      << html(text::seconds(x.seconds)) << "</td><td>"
      << html(text::percent(x.seconds > 0 ? x.modelledSeconds / x.seconds : NAN)) << "</td><td>"
      << fmt("%.3g", x.flops / 1e9) << "</td><td>" << fmt("%.3g", x.bytes / 1e9) << "</td><td>"
      << (x.flops > 0 && x.bytes > 0 ? fmt("%.3g", p.intensity) : "-") << "</td><td>"
      << (rated ? fmt("%.3g", p.flopsPerSecond / 1e9) : "-") << "</td><td>"
      << (rated ? fmt("%.3g", p.bytesPerSecond / 1e9) : "-") << "</td><td class=\"l\">"
      << (x.flops > 0 || p.bound == Bound::kUnknown ? boundName(p.bound) : "memory (data)")
      << "</td><td>" << (p.bound != Bound::kUnknown ? html(text::percent(p.fraction)) : "-")
      << "</td><td>" << html(roofText) << "</td><td class=\"l\">" << html(ranks) << "</td></tr>\n";
  }
  o << "</table></div>\n";
}

void recommendations(std::ostringstream& o, const Analysis& a) {
  const RooflineAnalysis& r = a.roofline;
  if (!r.present) return;
  o << "<h2>Recommendations</h2>\n<p class=\"sub\" id=\"thresholds\">Thresholds:";
  const char* sep = " ";
  for (const RecommendationThreshold& t : recommendationThresholds()) {
    o << sep << t.name << " " << fmt("%.4g", r.options.*t.field);
    sep = ", ";
  }
  o << " (attnscope-analyze --help).</p>\n";
  if (r.recommendations.empty()) {
    o << "<p id=\"recommendations-none\">None: no rule's thresholds were met (docs/ANALYSIS.md "
         "lists them).</p>\n";
    return;
  }
  std::map<std::string, int> seen;
  for (const Recommendation& x : r.recommendations) {
    const int n = ++seen[x.id];
    o << "<div class=\"recommendation\" id=\"rec-" << html(x.id)
      << (n > 1 ? "-" + std::to_string(n) : "") << "\"><b>" << html(x.title)
      << "</b> <span class=\"sub\">(" << html(x.id) << "; " << html(text::percent(x.impact))
      << " of attention time";
    if (!x.ranks.empty()) {
      o << "; rank";
      for (size_t i = 0; i < x.ranks.size(); ++i) o << (i ? ", " : " ") << x.ranks[i];
    }
    if (!x.layers.empty()) {
      o << "; ";
      for (size_t i = 0; i < x.layers.size(); ++i) o << (i ? ", " : "") << html(x.layers[i]);
    }
    o << ")</span><p>" << html(x.suggestion) << "</p><table class=\"evidence\">";
    for (const auto& [key, value] : x.evidence) {
      o << "<tr><th class=\"l\">" << html(key) << "</th><td class=\"l\">" << html(value)
        << "</td></tr>";
    }
    o << "</table></div>\n";
  }
}

}  // namespace

std::string HtmlReport::render(const Analysis& a) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<title>attnscope report: " << html(a.traceDir) << "</title>\n<style>\n"
    << "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:20px "
       "28px;color:#222;max-width:1000px}\n"
    << "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 6px;border-bottom:1px "
       "solid #ddd}\n"
    << ".sub{color:#666;font-size:13px;margin-bottom:12px}\n"
    << ".finding{border-left:6px solid #d62728;background:#fdeeee;padding:10px 14px;margin:10px "
       "0;font-size:15px}\n"
    << ".finding.ok{border-color:#2ca02c;background:#eef8ee}.finding.warn{border-color:#e69500;"
       "background:#fff6e5}\n"
    << ".finding b.big{font-size:20px}\n"
    << "table{border-collapse:collapse;font-size:13px;margin:6px 0}td,th{border:1px solid "
       "#ddd;padding:3px 7px;text-align:right}\n"
    << "th{background:#f4f4f4}td.l,th.l{text-align:left}.lbl{font-size:11px;fill:#333}\n"
    << "svg.plot{display:block;margin:4px 0}svg.roofline{display:inline-block;margin:4px 10px 4px "
       "0;vertical-align:top}\n"
    << ".ttl{font-size:13px;font-weight:600;fill:#222}\n"
    << ".recommendation{border-left:6px solid #4c78a8;background:#eef3f9;padding:8px "
       "14px;margin:10px 0;font-size:14px}\n"
    << ".wide{overflow-x:auto}#roofline-table td,#roofline-table th{white-space:nowrap;padding:2px "
       "5px;font-size:12px}\n"
    << ".recommendation p{margin:6px "
       "0}table.evidence{font-size:12px;background:#fff}\n</style>\n</head>\n<body>\n";
  int ok = 0;
  for (const RankRow& r : a.ranks)
    ok += r.status == RankOutcome::kOk || r.status == RankOutcome::kStoppedEarly;
  o << "<h1>attnscope run report</h1>\n<div class=\"sub\">" << html(a.traceDir) << " &middot; "
    << ok << " of " << a.worldSize << " ranks analysed &middot; " << a.totalSteps
    << " sampled steps &middot; " << fmt("%.1f", a.endUnix - a.startUnix) << " s</div>\n";

  // The finding first.
  if (a.stragglers.empty()) {
    o << "<div class=\"finding ok\" id=\"verdict\"><b class=\"big\">No straggler</b>: no rank's "
         "attention time per "
         "step stayed above "
      << fmt("%.2f", a.threshold) << "&times; the median for a run of bins.</div>\n";
  } else {
    for (size_t i = 0; i < a.stragglers.size(); ++i) {
      const StragglerEpisode& e = a.stragglers[i];
      o << "<div class=\"finding\"" << (i == 0 ? " id=\"verdict\"" : "")
        << "><b class=\"big\">Straggler: rank " << e.rank;
      if (!e.layer.empty()) o << ", layer " << html(e.layer);
      o << "</b><br>" << fmt("%.2f", e.maxScore)
        << "&times; the other ranks' median attention time per step (mean "
        << fmt("%.2f", e.meanScore) << "&times;, +" << html(text::seconds(e.excessSecondsPerStep))
        << " per step), steps " << e.firstStep << "&ndash;" << e.lastStep << ", +"
        << fmt("%.1f", e.startUnix - a.startUnix) << " s to +"
        << fmt("%.1f", e.endUnix - a.startUnix) << " s.";
      if (!e.layer.empty()) {
        o << " " << html(e.layer) << " carries " << fmt("%.0f", 100 * e.layerShare)
          << "% of the excess; within it " << phaseName(e.phase) << " " << opKindName(e.kind)
          << " is the largest part (" << fmt("%.0f", 100 * e.kindShare)
          << "% of the excess by op kind).";
      }
      o << "</div>\n";
    }
  }
  if (a.anythingSkipped()) {
    o << "<div class=\"finding warn\"><b>Incomplete:</b> ";
    for (const RankRow& r : a.ranks) {
      if (r.status == RankOutcome::kSkipped || r.status == RankOutcome::kMissing) {
        o << "rank " << r.rank << " " << (r.status == RankOutcome::kSkipped ? "skipped" : "missing")
          << " (" << html(r.file) << ": " << html(r.reason) << "). ";
      }
    }
    for (const SkippedFile& s : a.skipped) {
      bool listed = false;
      for (const RankRow& r : a.ranks) listed = listed || r.file == s.path;
      if (!listed) o << html(s.path) << " skipped: " << html(s.reason) << ". ";
    }
    o << "</div>\n";
  }
  for (const RankRow& r : a.ranks) {
    if (r.status == RankOutcome::kStoppedEarly) {
      o << "<div class=\"finding warn\"><b>Rank " << r.rank << " stopped early:</b> "
        << html(r.reason) << "</div>\n";
    }
  }
  for (const CellOutlier& c : a.cellOutliers) {
    o << "<div class=\"finding warn\"><b>Cell outlier: rank " << c.rank << ", " << html(c.layer)
      << " " << phaseName(c.phase) << " " << opKindName(c.kind) << "</b>: " << fmt("%.2f", c.factor)
      << "&times; the other ranks' median (" << html(text::seconds(c.secondsPerStep)) << " vs "
      << html(text::seconds(c.othersSecondsPerStep)) << " per step; the others "
      << html(text::seconds(c.othersMinSecondsPerStep)) << " to "
      << html(text::seconds(c.othersMaxSecondsPerStep)) << "), +"
      << fmt("%.0f", 100 * c.excessShare) << "% on the layer's " << phaseName(c.phase)
      << " time, above in " << c.stepsAbove << " of " << c.steps << " steps"
      << (c.rankIsStraggler ? "; the rank is a straggler"
                            : "; the rank as a whole is not a straggler")
      << "</div>\n";
  }
  for (const MemoryOutlier& m : a.memoryOutliers) {
    o << "<div class=\"finding warn\"><b>Memory:</b> rank " << m.rank << " " << html(m.layer) << " "
      << phaseName(m.phase) << " peaks at " << html(text::bytes(static_cast<double>(m.peakBytes)))
      << ", " << fmt("%.1f", m.ratio) << "&times; the median of the ranks</div>\n";
  }

  o << "<h2>Attention time per step, rank &times; time</h2>\n";
  heatmap(o, a);
  o << "<h2>Straggler score over time</h2>\n<div class=\"sub\">A rank's typical attention time per "
       "step in the bin over "
       "the median of the other ranks; shaded: straggler episodes.</div>\n";
  scoreTimeline(o, a);
  o << "<h2>Forward vs backward per layer and rank</h2>\n<div class=\"sub\">Median time per "
       "sampled step.</div>\n";
  layerBars(
      o, a, "fwdbwd", "forward and backward time per layer per rank",
      [](const LayerPhaseRow& l, size_t r) { return l.rankSecondsPerStep[r]; },
      [](double v) { return text::seconds(v); });
  o << "<h2>Peak memory per layer and rank</h2>\n<div class=\"sub\">Median over steps of the peak "
       "live bytes above the "
       "call's start.</div>\n";
  layerBars(
      o, a, "memory", "peak memory per layer per rank",
      [](const LayerPhaseRow& l, size_t r) {
        return l.rankPeakBytes[r] < 0 ? NAN : static_cast<double>(l.rankPeakBytes[r]);
      },
      [](double v) { return text::bytes(v); });

  o << "<h2>Ranks</h2>\n<table><tr><th>rank</th><th class=\"l\">status</th><th "
       "class=\"l\">node</th><th>sampled steps</th>"
       "<th>steps</th><th>fwd / step</th><th>bwd / step</th><th>score</th><th class=\"l\">file, "
       "note</th></tr>\n";
  for (const RankRow& r : a.ranks) {
    o << "<tr><td>" << r.rank << "</td><td class=\"l\">" << rankOutcomeName(r.status)
      << "</td><td class=\"l\">" << html(r.node) << "</td><td>" << r.steps << "</td><td>"
      << r.firstStep << "&ndash;" << r.lastStep << "</td><td>"
      << html(text::seconds(r.forwardSeconds)) << "</td><td>"
      << html(text::seconds(r.backwardSeconds)) << "</td><td>" << fmt("%.2f", r.score)
      << "</td><td class=\"l\">" << html(r.file) << (r.reason.empty() ? "" : ": ") << html(r.reason)
      << "</td></tr>\n";
  }
  o << "</table>\n<h2>Per layer, all ranks</h2>\n<table><tr><th class=\"l\">layer</th><th "
       "class=\"l\">phase</th>"
       "<th>calls</th><th>p50 / call</th><th>p99 / call</th><th>slowest rank p50</th><th>fastest "
       "rank p50</th>"
       "<th>peak (median of ranks)</th><th>peak (max)</th></tr>\n";
  for (const LayerPhaseRow& l : a.layers) {
    double slow = -1, fast = INFINITY;
    int slowRank = -1, fastRank = -1;
    for (size_t r = 0; r < l.rankP50Seconds.size(); ++r) {
      const double v = l.rankP50Seconds[r];
      if (!std::isfinite(v)) continue;
      if (v > slow) slow = v, slowRank = a.ranks[r].rank;
      if (v < fast) fast = v, fastRank = a.ranks[r].rank;
    }
    o << "<tr><td class=\"l\">" << html(l.layer) << "</td><td class=\"l\">" << phaseName(l.phase)
      << "</td><td>" << l.calls << "</td><td>" << html(text::seconds(l.p50Seconds)) << "</td><td>"
      << html(text::seconds(l.p99Seconds)) << "</td><td>" << html(text::seconds(slow)) << " (rank "
      << slowRank << ")</td><td>" << html(text::seconds(fast)) << " (rank " << fastRank
      << ")</td><td>" << html(text::bytes(static_cast<double>(l.medianPeakBytes))) << "</td><td>"
      << html(text::bytes(static_cast<double>(l.maxPeakBytes))) << "</td></tr>\n";
  }
  o << "</table>\n";
  rooflineSection(o, a);
  recommendations(o, a);
  if (!a.liveFindings.empty()) {
    o << "<h2>Recorded live by rank 0</h2>\n<table><tr><th "
         "class=\"l\">kind</th><th>rank</th><th>rounds</th>"
         "<th class=\"l\">description</th></tr>\n";
    for (const TraceFindingRow& f : a.liveFindings) {
      o << "<tr><td class=\"l\">" << html(f.kind) << "</td><td>" << f.rank << "</td><td>"
        << f.firstRound << "&ndash;" << f.lastRound << "</td><td class=\"l\">"
        << html(f.description) << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  o << "<p class=\"sub\">Written by attnscope-analyze from the per-rank trace store; the JSON "
       "report carries the same "
       "figures (schema attnscope.analysis/1).</p>\n</body>\n</html>\n";
  return o.str();
}

}  // namespace analysis
}  // namespace attnscope
