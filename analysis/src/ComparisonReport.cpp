// The run-against-run comparison as JSON, HTML and the summary attnscope-analyze prints.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "attnscope/analysis/JsonReport.h"
#include "attnscope/analysis/RunComparison.h"

namespace attnscope {
namespace analysis {
namespace {

const char* kindName(OpKind k) { return k == OpKind::kCount ? "all" : opKindName(k); }

std::string ratioText(double r) {
  if (!std::isfinite(r)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", r);
  return buf;
}

std::string intervalText(const ComparedCell& c) {
  if (!std::isfinite(c.ratioLow)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fx-%.2fx", c.ratioLow, c.ratioHigh);
  return buf;
}

std::string cellName(const ComparedCell& c) {
  std::string s = c.layer + " " + phaseName(c.phase);
  if (c.kind != OpKind::kCount) s += std::string(" ") + opKindName(c.kind);
  return s;
}

std::string runJson(const ComparedRun& r) {
  std::ostringstream o;
  o << "{\"dir\": " << text::jsonString(r.dir) << ", \"world_size\": " << r.worldSize
    << ", \"ranks\": " << r.ranks << ", \"sampled_steps\": " << r.steps << ", \"skipped_files\": [";
  for (size_t i = 0; i < r.skipped.size(); ++i) {
    o << (i ? ", " : "") << "{\"file\": " << text::jsonString(r.skipped[i].path)
      << ", \"reason\": " << text::jsonString(r.skipped[i].reason) << "}";
  }
  o << "], \"layers\": [";
  for (size_t i = 0; i < r.layers.size(); ++i) {
    o << (i ? ", " : "") << "{\"layer\": " << text::jsonString(r.layers[i])
      << ", \"implementation\": " << text::jsonString(r.implementation[i])
      << ", \"shapes\": " << text::jsonString(r.shapes[i]) << "}";
  }
  o << "]}";
  return o.str();
}

std::string stringList(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + text::jsonString(v[i]);
  return s + "]";
}

// "a, b, c" for up to four layers, else the first two, "...", the last.
std::string layerList(const std::vector<std::string>& layers) {
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers.size() > 4 && i == 2) {
      s += ", ..., " + layers.back();
      break;
    }
    s += (i > 0 ? ", " : "") + layers[i];
  }
  return s;
}

}  // namespace

std::string renderComparisonJson(const RunComparison& c) {
  std::ostringstream o;
  o << "{\n  \"schema\": \"attnscope.comparison/1\",\n  \"baseline\": " << runJson(c.baseline)
    << ",\n  \"current\": " << runJson(c.current)
    << ",\n  \"options\": {\"min_change\": " << text::jsonNumber(c.options.minChange)
    << ", \"confidence\": " << text::jsonNumber(c.options.confidence)
    << ", \"resamples\": " << c.options.resamples
    << "},\n  \"statistic\": \"per rank the median time per sampled step, then the median over "
       "ranks; interval: bootstrap over steps within each rank\",\n  \"differences\": [";
  for (size_t i = 0; i < c.differences.size(); ++i) {
    const RunDifference& d = c.differences[i];
    o << (i ? ",\n    " : "\n    ") << "{\"layer\": " << text::jsonString(d.layer)
      << ", \"what\": " << text::jsonString(d.what)
      << ", \"baseline\": " << text::jsonString(d.baseline)
      << ", \"current\": " << text::jsonString(d.current) << "}";
  }
  o << "],\n  \"only_in_baseline\": " << stringList(c.onlyBaseline)
    << ",\n  \"only_in_current\": " << stringList(c.onlyCurrent) << ",\n  \"counts\": {";
  const Verdict all[] = {Verdict::kSlower, Verdict::kFaster, Verdict::kSame, Verdict::kOnlyBaseline,
                         Verdict::kOnlyCurrent};
  for (size_t i = 0; i < 5; ++i)
    o << (i ? ", " : "") << text::jsonString(verdictName(all[i])) << ": " << c.count(all[i]);
  o << "},\n  \"cells\": [";
  for (size_t i = 0; i < c.cells.size(); ++i) {
    const ComparedCell& x = c.cells[i];
    o << (i ? ",\n    " : "\n    ") << "{\"layer\": " << text::jsonString(x.layer)
      << ", \"phase\": \"" << phaseName(x.phase) << "\", \"op_kind\": \"" << kindName(x.kind)
      << "\", \"baseline_seconds_per_step\": " << text::jsonNumber(x.baselineSeconds)
      << ", \"current_seconds_per_step\": " << text::jsonNumber(x.currentSeconds)
      << ", \"ratio\": " << text::jsonNumber(x.ratio)
      << ", \"ratio_low\": " << text::jsonNumber(x.ratioLow)
      << ", \"ratio_high\": " << text::jsonNumber(x.ratioHigh) << ", \"verdict\": \""
      << verdictName(x.verdict) << "\", \"baseline_peak_bytes\": " << x.baselinePeak
      << ", \"current_peak_bytes\": " << x.currentPeak
      << ", \"peak_ratio\": " << text::jsonNumber(x.peakRatio)
      << ", \"baseline_steps\": " << x.baselineSteps << ", \"current_steps\": " << x.currentSteps
      << "}";
  }
  o << "]\n}\n";
  return o.str();
}

std::string renderComparisonText(const RunComparison& c) {
  std::ostringstream o;
  o << "attnscope-analyze: " << c.current.dir << " against baseline " << c.baseline.dir << ": "
    << c.current.worldSize << " vs " << c.baseline.worldSize << " ranks, " << c.current.steps
    << " vs " << c.baseline.steps << " sampled steps\n";
  for (const SkippedFile& s : c.baseline.skipped)
    o << "  baseline: skipped " << s.path << ": " << s.reason << "\n";
  for (const SkippedFile& s : c.current.skipped)
    o << "  current: skipped " << s.path << ": " << s.reason << "\n";
  // The same difference in several layers (a model switched implementation) is one line.
  std::vector<std::pair<const RunDifference*, std::vector<std::string>>> grouped;
  for (const RunDifference& d : c.differences) {
    auto it = std::find_if(grouped.begin(), grouped.end(), [&](const auto& g) {
      return !d.layer.empty() && !g.second.empty() && g.first->what == d.what &&
             g.first->baseline == d.baseline && g.first->current == d.current;
    });
    if (it == grouped.end()) it = grouped.insert(grouped.end(), {&d, {}});
    if (!d.layer.empty()) it->second.push_back(d.layer);
  }
  for (const auto& [d, layers] : grouped) {
    o << "  differs: " << (layers.size() == 1 ? layers[0] + " " : "") << d->what << ": "
      << d->current << " (baseline " << d->baseline << ")";
    if (layers.size() > 1) o << " in " << layers.size() << " layers: " << layerList(layers);
    o << "\n";
  }
  for (const std::string& l : c.onlyBaseline) o << "  only in baseline: " << l << "\n";
  for (const std::string& l : c.onlyCurrent) o << "  only in current: " << l << "\n";
  size_t same = 0;
  // Op kinds that ran in one run only, one line per layer and phase (an implementation change
  // swaps the unfused kinds for fused_attention).
  std::vector<std::pair<std::string, std::array<std::string, 2>>> onlyKinds;
  for (const ComparedCell& x : c.cells) {
    if (x.kind == OpKind::kCount ||
        (x.verdict != Verdict::kOnlyBaseline && x.verdict != Verdict::kOnlyCurrent))
      continue;
    const std::string key = x.layer + " " + phaseName(x.phase);
    auto it = std::find_if(onlyKinds.begin(), onlyKinds.end(),
                           [&](const auto& e) { return e.first == key; });
    if (it == onlyKinds.end()) it = onlyKinds.insert(onlyKinds.end(), {key, {}});
    std::string& list = it->second[x.verdict == Verdict::kOnlyBaseline ? 0 : 1];
    list += (list.empty() ? "" : ", ") + std::string(opKindName(x.kind));
  }
  // Layers and phases with the same lists are one line.
  std::vector<std::pair<std::string, std::vector<std::string>>> kindLines;
  for (const auto& [key, lists] : onlyKinds) {
    const size_t space = key.rfind(' ');
    std::string line = key.substr(space + 1) + " op kinds:";
    if (!lists[0].empty()) line += " only in baseline " + lists[0] + (lists[1].empty() ? "" : ";");
    if (!lists[1].empty()) line += " only in current " + lists[1];
    auto it = std::find_if(kindLines.begin(), kindLines.end(),
                           [&](const auto& k) { return k.first == line; });
    if (it == kindLines.end()) it = kindLines.insert(kindLines.end(), {line, {}});
    it->second.push_back(key.substr(0, space));
  }
  for (const auto& [line, layers] : kindLines) {
    o << "  " << (layers.size() == 1 ? layers[0] : std::to_string(layers.size()) + " layers") << " "
      << line;
    if (layers.size() > 1) o << " (" << layerList(layers) << ")";
    o << "\n";
  }
  for (const ComparedCell& x : c.cells) {
    if (x.verdict == Verdict::kSame) {
      ++same;
      continue;
    }
    if (x.kind != OpKind::kCount) continue;  // whole calls here; the reports have every kind
    o << "  " << verdictName(x.verdict) << ": " << cellName(x);
    if (x.verdict == Verdict::kFaster || x.verdict == Verdict::kSlower) {
      o << " " << ratioText(x.ratio) << " (" << intervalText(x) << "), "
        << text::seconds(x.currentSeconds) << " vs " << text::seconds(x.baselineSeconds)
        << " per step";
    } else {
      o << " "
        << text::seconds(x.verdict == Verdict::kOnlyBaseline ? x.baselineSeconds : x.currentSeconds)
        << " per step";
    }
    o << "\n";
  }
  o << "  " << c.count(Verdict::kSlower) << " slower, " << c.count(Verdict::kFaster) << " faster, "
    << same << " same within noise (cells of layer, phase and op kind)\n";
  return o.str();
}

std::string renderComparisonHtml(const RunComparison& c) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attnscope "
       "comparison</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222}"
       "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px "
       "7px;font-size:13px;text-align:right}td.l,th.l{text-align:left}"
       "tr.slower td{background:#fde2e2}tr.faster td{background:#e2f5e2}"
       ".banner{font-size:18px;padding:10px;border-radius:6px;background:#f4f4f4;margin:8px 0}"
       "</style></head><body>\n<h1>Run comparison</h1>\n";
  o << "<p>current <code>" << text::html(c.current.dir) << "</code> (" << c.current.worldSize
    << " ranks, " << c.current.steps << " sampled steps) against baseline <code>"
    << text::html(c.baseline.dir) << "</code> (" << c.baseline.worldSize << " ranks, "
    << c.baseline.steps << " sampled steps). Time per sampled step: per rank the median over its "
    << "steps, then the median over ranks; the ratio is current / baseline with a "
    << text::percent(c.options.confidence) << " bootstrap interval over steps ("
    << c.options.resamples << " resamples); a cell is faster or slower when the interval excludes "
    << "1 and the ratio differs by at least " << text::percent(c.options.minChange) << ".</p>\n";
  o << "<div class=\"banner\" id=\"verdicts\">" << c.count(Verdict::kSlower) << " slower, "
    << c.count(Verdict::kFaster) << " faster, " << c.count(Verdict::kSame)
    << " same within noise</div>\n";
  o << "<h2>What differs</h2>\n";
  if (c.differences.empty() && c.onlyBaseline.empty() && c.onlyCurrent.empty())
    o << "<p id=\"no-differences\">Nothing in the runs' metadata differs.</p>\n";
  o << "<table id=\"differences\"><tr><th class=\"l\">layer</th><th class=\"l\">what</th><th "
       "class=\"l\">baseline</th><th class=\"l\">current</th></tr>\n";
  for (const RunDifference& d : c.differences) {
    o << "<tr><td class=\"l\">" << text::html(d.layer.empty() ? "(run)" : d.layer)
      << "</td><td class=\"l\">" << text::html(d.what) << "</td><td class=\"l\">"
      << text::html(d.baseline) << "</td><td class=\"l\">" << text::html(d.current)
      << "</td></tr>\n";
  }
  for (const std::string& l : c.onlyBaseline)
    o << "<tr><td class=\"l\">" << text::html(l)
      << "</td><td class=\"l\">layer</td><td class=\"l\">present</td><td "
         "class=\"l\">absent</td></tr>\n";
  for (const std::string& l : c.onlyCurrent)
    o << "<tr><td class=\"l\">" << text::html(l)
      << "</td><td class=\"l\">layer</td><td class=\"l\">absent</td><td "
         "class=\"l\">present</td></tr>\n";
  o << "</table>\n<h2>Per layer, phase and op kind</h2>\n<p>Regressions first. The bar shows the "
       "ratio's interval on a log scale from 0.25x to 4x (the line: 1x).</p>\n"
       "<table id=\"cells\"><tr><th class=\"l\">layer</th><th class=\"l\">phase</th><th "
       "class=\"l\">op kind</th><th>baseline / step</th><th>current / step</th><th>ratio</th>"
       "<th>interval</th><th></th><th class=\"l\">verdict</th><th>baseline peak</th>"
       "<th>current peak</th></tr>\n";
  const auto x = [](double r) {
    const double v = std::log2(std::min(4.0, std::max(0.25, r)));
    return 60 + v * 28;  // 0.25x..4x over 120 px
  };
  for (const ComparedCell& cell : c.cells) {
    const char* cls = cell.verdict == Verdict::kSlower   ? "slower"
                      : cell.verdict == Verdict::kFaster ? "faster"
                                                         : "same";
    o << "<tr class=\"" << cls << "\"><td class=\"l\">" << text::html(cell.layer)
      << "</td><td class=\"l\">" << phaseName(cell.phase) << "</td><td class=\"l\">"
      << kindName(cell.kind) << "</td><td>" << text::seconds(cell.baselineSeconds) << "</td><td>"
      << text::seconds(cell.currentSeconds) << "</td><td>" << ratioText(cell.ratio) << "</td><td>"
      << intervalText(cell) << "</td><td>";
    if (std::isfinite(cell.ratioLow)) {
      o << "<svg class=\"ratio\" width=\"120\" height=\"12\"><line x1=\"60\" y1=\"0\" x2=\"60\" "
           "y2=\"12\" stroke=\"#888\"/><rect x=\""
        << x(cell.ratioLow) << "\" y=\"3\" width=\""
        << std::max(1.0, x(cell.ratioHigh) - x(cell.ratioLow)) << "\" height=\"6\" fill=\""
        << (cell.verdict == Verdict::kSlower   ? "#c33"
            : cell.verdict == Verdict::kFaster ? "#3a3"
                                               : "#888")
        << "\"/><circle cx=\"" << x(cell.ratio) << "\" cy=\"6\" r=\"2.5\" fill=\"#000\"/></svg>";
    }
    o << "</td><td class=\"l verdict\">" << verdictName(cell.verdict) << "</td><td>"
      << (cell.baselinePeak > 0 ? text::bytes(static_cast<double>(cell.baselinePeak)) : "-")
      << "</td><td>"
      << (cell.currentPeak > 0 ? text::bytes(static_cast<double>(cell.currentPeak)) : "-")
      << "</td></tr>\n";
  }
  o << "</table>\n<h2>Layers</h2>\n<table id=\"layers\"><tr><th class=\"l\">run</th><th "
       "class=\"l\">layer</th><th class=\"l\">implementation</th><th "
       "class=\"l\">shapes</th></tr>\n";
  for (const ComparedRun* r : {&c.baseline, &c.current}) {
    for (size_t i = 0; i < r->layers.size(); ++i) {
      o << "<tr><td class=\"l\">" << (r == &c.baseline ? "baseline" : "current")
        << "</td><td class=\"l\">" << text::html(r->layers[i]) << "</td><td class=\"l\">"
        << text::html(r->implementation[i]) << "</td><td class=\"l\">"
        << text::html(r->shapes[i].empty() ? "not recorded" : r->shapes[i]) << "</td></tr>\n";
    }
  }
  o << "</table>\n</body></html>\n";
  return o.str();
}

}  // namespace analysis
}  // namespace attnscope
