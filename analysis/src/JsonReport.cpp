#include "attnscope/analysis/JsonReport.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace attnscope {
namespace analysis {
namespace text {

std::string jsonNumber(double v, const char* format) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string html(const std::string& s) {
  std::string out;
  for (const char c : s) {
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

std::string seconds(double s) {
  if (!std::isfinite(s)) return "-";
  char buf[32];
  if (s >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f us", s * 1e6);
  }
  return buf;
}

std::string bytes(double b) {
  if (!std::isfinite(b) || b < 0) return "-";
  char buf[32];
  if (b >= 1 << 30) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1 << 30));
  } else if (b >= 1 << 20) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1 << 20));
  } else if (b >= 1 << 10) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / (1 << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  }
  return buf;
}

std::string si(double v, const char* unit) {
  if (!std::isfinite(v)) return "-";
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  double x = std::fabs(v);
  while (x >= 999.5 && p < 6) {
    x /= 1000;
    ++p;
  }
  char buf[64];
  const char* format = x >= 99.5 ? "%.0f %s%s" : (x >= 9.95 ? "%.1f %s%s" : "%.2f %s%s");
  std::snprintf(buf, sizeof(buf), format, v < 0 ? -x : x, prefixes[p], unit);
  return buf;
}

std::string percent(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  char buf[32];
  const double x = 100 * fraction;
  std::snprintf(buf, sizeof(buf), std::fabs(x) >= 9.95 || x == 0 ? "%.0f%%" : "%.1f%%", x);
  return buf;
}

bool writeFile(const std::string& path, const std::string& content, std::string* error) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace text

namespace {

using text::jsonNumber;
using text::jsonString;

std::string numberList(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + jsonNumber(v[i], "%.6g");
  return out + "]";
}

std::string stringList(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + jsonString(v[i]);
  return out + "]";
}

std::string positiveOrNull(double v) { return v > 0 ? jsonNumber(v) : "null"; }

void roofline(std::ostringstream& o, const RooflineAnalysis& r) {
  const Ceilings& c = r.ceilings;
  o << "  \"roofline\": {\"present\": " << (r.present ? "true" : "false")
    << ", \"timing\": " << jsonString(r.timing)
    << ", \"torch_version\": " << jsonString(r.torchVersion)
    << ", \"attention_seconds\": " << jsonNumber(r.attentionSeconds)
    << ", \"bad_rows\": " << r.badRows
    << ",\n    \"ceilings\": {\"peak_flops_per_second\": " << positiveOrNull(c.peakFlopsPerSecond)
    << ", \"peak_bytes_per_second\": " << positiveOrNull(c.peakBytesPerSecond)
    << ", \"ridge_flops_per_byte\": " << positiveOrNull(c.ridge())
    << ", \"source\": " << jsonString(c.source) << ", \"detail\": " << jsonString(c.detail)
    << ", \"ranks\": " << r.ceilingRanks << "},\n    \"thresholds\": {";
  const char* sep = "";
  for (const RecommendationThreshold& t : recommendationThresholds()) {
    o << sep << jsonString(t.name) << ": " << jsonNumber(r.options.*t.field, "%.4g");
    sep = ", ";
  }
  o << "},\n    \"hardware\": [";
  for (size_t i = 0; i < r.hardware.size(); ++i) {
    const RankHardware& h = r.hardware[i];
    o << (i ? ",\n" : "\n") << "      {\"rank\": " << h.rank << ", \"node\": " << jsonString(h.node)
      << ", \"peak_flops_per_second\": " << positiveOrNull(h.ceilings.peakFlopsPerSecond)
      << ", \"peak_bytes_per_second\": " << positiveOrNull(h.ceilings.peakBytesPerSecond)
      << ", \"ceiling_source\": " << jsonString(h.ceilings.source)
      << ", \"ceiling_detail\": " << jsonString(h.ceilings.detail)
      << ", \"timing\": " << jsonString(h.timing) << ", \"cpu_model\": " << jsonString(h.cpuModel)
      << ", \"cpu_cores\": " << jsonString(h.cpuCores)
      << ", \"torch_threads\": " << jsonString(h.torchThreads)
      << ", \"blas\": " << jsonString(h.blas) << ", \"gpu_name\": " << jsonString(h.gpuName)
      << ", \"gpu_driver\": " << jsonString(h.gpuDriver)
      << ", \"gpu_memory_bytes\": " << jsonString(h.gpuMemoryBytes)
      << ", \"torch_version\": " << jsonString(h.torchVersion) << "}";
  }
  o << (r.hardware.empty() ? "" : "\n    ") << "],\n    \"points\": [";
  for (size_t i = 0; i < r.cells.size(); ++i) {
    const ReportRooflineCell& x = r.cells[i];
    const RooflinePoint& p = x.point;
    const bool known = p.bound != Bound::kUnknown;
    o << (i ? ",\n" : "\n") << "      {\"layer\": " << jsonString(x.layer) << ", \"phase\": \""
      << phaseName(x.phase) << "\", \"kind\": \"" << opKindName(x.kind) << "\", \"ops\": " << x.ops
      << ", \"seconds\": " << jsonNumber(x.seconds)
      << ", \"modelled_seconds\": " << jsonNumber(x.modelledSeconds)
      << ", \"flops\": " << jsonNumber(x.flops) << ", \"bytes\": " << jsonNumber(x.bytes)
      << ", \"wide_flops\": " << jsonNumber(x.wideFlops)
      << ", \"intensity\": " << (x.bytes > 0 ? jsonNumber(p.intensity, "%.6g") : "null")
      << ", \"flops_per_second\": "
      << (x.modelledSeconds > 0 ? jsonNumber(p.flopsPerSecond, "%.6g") : "null")
      << ", \"bytes_per_second\": "
      << (x.modelledSeconds > 0 ? jsonNumber(p.bytesPerSecond, "%.6g") : "null")
      << ", \"attainable_flops_per_second\": " << positiveOrNull(p.attainableFlopsPerSecond)
      << ", \"bound\": \"" << boundName(p.bound)
      << "\", \"fraction\": " << (known ? jsonNumber(p.fraction, "%.4f") : "null")
      << ", \"rank_fractions\": [";
    for (size_t k = 0; k < x.rankFraction.size(); ++k)
      o << (k ? ", " : "") << jsonNumber(x.rankFraction[k], "%.4f");
    o << "]}";
  }
  o << (r.cells.empty() ? "" : "\n    ") << "],\n    \"recommendations\": [";
  for (size_t i = 0; i < r.recommendations.size(); ++i) {
    const Recommendation& x = r.recommendations[i];
    o << (i ? ",\n" : "\n") << "      {\"id\": " << jsonString(x.id)
      << ", \"title\": " << jsonString(x.title) << ", \"impact\": " << jsonNumber(x.impact, "%.4f")
      << ", \"suggestion\": " << jsonString(x.suggestion) << ",\n       \"evidence\": {";
    for (size_t k = 0; k < x.evidence.size(); ++k) {
      o << (k ? ", " : "") << jsonString(x.evidence[k].first) << ": "
        << jsonString(x.evidence[k].second);
    }
    o << "}, \"ranks\": [";
    for (size_t k = 0; k < x.ranks.size(); ++k) o << (k ? ", " : "") << x.ranks[k];
    o << "], \"layers\": " << stringList(x.layers) << "}";
  }
  o << (r.recommendations.empty() ? "" : "\n    ") << "]\n  }";
}

}  // namespace

std::string JsonReport::render(const Analysis& a) {
  std::ostringstream o;
  const auto offset = [&](double unix) { return jsonNumber(unix - a.startUnix, "%.3f"); };
  o << "{\n  \"schema\": \"attnscope.analysis/1\",\n";
  o << "  \"trace_dir\": " << jsonString(a.traceDir) << ",\n";
  o << "  \"world_size\": " << a.worldSize << ",\n";
  o << "  \"start_unix\": " << jsonNumber(a.startUnix, "%.6f") << ",\n";
  o << "  \"end_unix\": " << jsonNumber(a.endUnix, "%.6f") << ",\n";
  o << "  \"sampled_steps\": " << a.totalSteps << ",\n";
  o << "  \"complete\": " << (a.anythingSkipped() ? "false" : "true") << ",\n";
  o << "  \"ranks\": [";
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const RankRow& r = a.ranks[i];
    o << (i ? ",\n" : "\n") << "    {\"rank\": " << r.rank << ", \"status\": \""
      << rankOutcomeName(r.status) << "\", \"file\": " << jsonString(r.file)
      << ", \"reason\": " << jsonString(r.reason) << ", \"node\": " << jsonString(r.node)
      << ", \"sampled_steps\": " << r.steps << ", \"first_step\": " << r.firstStep
      << ", \"last_step\": " << r.lastStep
      << ", \"first_unix\": " << jsonNumber(r.firstUnix, "%.6f")
      << ", \"last_unix\": " << jsonNumber(r.lastUnix, "%.6f")
      << ", \"forward_seconds_per_step\": " << jsonNumber(r.forwardSeconds)
      << ", \"backward_seconds_per_step\": " << jsonNumber(r.backwardSeconds)
      << ", \"score\": " << jsonNumber(r.score, "%.4f") << ", \"bad_step_records\": " << r.badSteps
      << "}";
  }
  o << "\n  ],\n  \"skipped_files\": [";
  for (size_t i = 0; i < a.skipped.size(); ++i) {
    o << (i ? ",\n" : "\n") << "    {\"file\": " << jsonString(a.skipped[i].path)
      << ", \"reason\": " << jsonString(a.skipped[i].reason) << "}";
  }
  o << (a.skipped.empty() ? "" : "\n  ") << "],\n  \"missing_ranks\": [";
  for (size_t i = 0; i < a.missingRanks.size(); ++i) o << (i ? ", " : "") << a.missingRanks[i];
  o << "],\n  \"detection\": " << jsonString(a.detection)
    << ",\n  \"detection_rounds\": " << a.rounds << ",\n  \"stragglers\": [";
  for (size_t i = 0; i < a.stragglers.size(); ++i) {
    const StragglerEpisode& e = a.stragglers[i];
    o << (i ? ",\n" : "\n") << "    {\"rank\": " << e.rank << ", \"first_step\": " << e.firstStep
      << ", \"last_step\": " << e.lastStep
      << ", \"start_unix\": " << jsonNumber(e.startUnix, "%.6f")
      << ", \"end_unix\": " << jsonNumber(e.endUnix, "%.6f")
      << ", \"start_offset_seconds\": " << offset(e.startUnix)
      << ", \"end_offset_seconds\": " << offset(e.endUnix)
      << ", \"max_score\": " << jsonNumber(e.maxScore, "%.4f")
      << ", \"mean_score\": " << jsonNumber(e.meanScore, "%.4f")
      << ", \"slow_bins\": " << e.slowBins << ", \"bins\": " << (e.lastBin - e.firstBin + 1)
      << ", \"excess_seconds_per_step\": " << jsonNumber(e.excessSecondsPerStep)
      << ", \"layer\": " << jsonString(e.layer)
      << ", \"layer_share\": " << jsonNumber(e.layerShare, "%.4f") << ", \"phase\": \""
      << (e.layer.empty() ? "" : phaseName(e.phase)) << "\", \"op_kind\": \""
      << (e.layer.empty() ? "" : opKindName(e.kind))
      << "\", \"op_kind_share\": " << jsonNumber(e.kindShare, "%.4f") << "}";
  }
  o << (a.stragglers.empty() ? "" : "\n  ") << "],\n  \"cell_outliers\": [";
  for (size_t i = 0; i < a.cellOutliers.size(); ++i) {
    const CellOutlier& c = a.cellOutliers[i];
    o << (i ? ",\n" : "\n") << "    {\"rank\": " << c.rank << ", \"layer\": " << jsonString(c.layer)
      << ", \"phase\": \"" << phaseName(c.phase) << "\", \"op_kind\": \"" << opKindName(c.kind)
      << "\", \"factor\": " << jsonNumber(c.factor, "%.4f")
      << ", \"seconds_per_step\": " << jsonNumber(c.secondsPerStep)
      << ", \"others_seconds_per_step\": " << jsonNumber(c.othersSecondsPerStep)
      << ", \"others_min_seconds_per_step\": " << jsonNumber(c.othersMinSecondsPerStep)
      << ", \"others_max_seconds_per_step\": " << jsonNumber(c.othersMaxSecondsPerStep)
      << ", \"other_ranks\": " << c.otherRanks
      << ", \"excess_share\": " << jsonNumber(c.excessShare, "%.4f") << ", \"steps\": " << c.steps
      << ", \"steps_above\": " << c.stepsAbove << ", \"windows\": " << c.windows
      << ", \"max_factor\": " << jsonNumber(c.maxFactor, "%.4f")
      << ", \"rank_is_straggler\": " << (c.rankIsStraggler ? "true" : "false") << "}";
  }
  o << (a.cellOutliers.empty() ? "" : "\n  ")
    << "],\n  \"cell_outliers_found\": " << a.cellOutliersFound << ",\n  \"memory_outliers\": [";
  for (size_t i = 0; i < a.memoryOutliers.size(); ++i) {
    const MemoryOutlier& m = a.memoryOutliers[i];
    o << (i ? ",\n" : "\n") << "    {\"rank\": " << m.rank << ", \"layer\": " << jsonString(m.layer)
      << ", \"phase\": \"" << phaseName(m.phase) << "\", \"peak_bytes\": " << m.peakBytes
      << ", \"median_peak_bytes\": " << m.medianPeakBytes
      << ", \"ratio\": " << jsonNumber(m.ratio, "%.4f") << "}";
  }
  o << (a.memoryOutliers.empty() ? "" : "\n  ") << "],\n  \"layers\": [";
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerPhaseRow& l = a.layers[i];
    o << (i ? ",\n" : "\n") << "    {\"layer\": " << jsonString(l.layer) << ", \"phase\": \""
      << phaseName(l.phase) << "\", \"calls\": " << l.calls
      << ", \"p50_seconds\": " << jsonNumber(l.p50Seconds)
      << ", \"p99_seconds\": " << jsonNumber(l.p99Seconds)
      << ", \"rank_p50_seconds\": " << numberList(l.rankP50Seconds)
      << ", \"rank_seconds_per_step\": " << numberList(l.rankSecondsPerStep)
      << ", \"rank_peak_bytes\": [";
    for (size_t r = 0; r < l.rankPeakBytes.size(); ++r) {
      o << (r ? ", " : "");
      if (l.rankPeakBytes[r] < 0) {
        o << "null";
      } else {
        o << l.rankPeakBytes[r];
      }
    }
    o << "], \"median_peak_bytes\": " << l.medianPeakBytes
      << ", \"max_peak_bytes\": " << l.maxPeakBytes << "}";
  }
  o << (a.layers.empty() ? "" : "\n  ")
    << "],\n  \"timeline\": {\n    \"bin_seconds\": " << jsonNumber(a.binSeconds, "%.6g")
    << ",\n    \"threshold\": " << jsonNumber(a.threshold, "%.4g")
    << ",\n    \"attention_seconds_per_step\": [";
  for (size_t r = 0; r < a.binAttentionSeconds.size(); ++r) {
    o << (r ? ",\n      " : "\n      ") << numberList(a.binAttentionSeconds[r]);
  }
  o << "\n    ],\n    \"score\": [";
  for (size_t r = 0; r < a.binScore.size(); ++r)
    o << (r ? ",\n      " : "\n      ") << numberList(a.binScore[r]);
  o << "\n    ]\n  },\n  \"live_findings\": [";
  for (size_t i = 0; i < a.liveFindings.size(); ++i) {
    const TraceFindingRow& f = a.liveFindings[i];
    o << (i ? ",\n" : "\n") << "    {\"kind\": " << jsonString(f.kind) << ", \"rank\": " << f.rank
      << ", \"first_round\": " << f.firstRound << ", \"last_round\": " << f.lastRound
      << ", \"max_score\": " << jsonNumber(f.maxScore, "%.4f")
      << ", \"layer\": " << jsonString(f.layer) << ", \"phase\": " << jsonString(f.phase)
      << ", \"op_kind\": " << jsonString(f.opKind) << ", \"share\": " << jsonNumber(f.share, "%.4f")
      << ", \"description\": " << jsonString(f.description) << "}";
  }
  o << (a.liveFindings.empty() ? "" : "\n  ") << "],\n";
  roofline(o, a.roofline);
  o << "\n}\n";
  return o.str();
}

}  // namespace analysis
}  // namespace attnscope
