// attnscope-analyze: merges every rank's trace store file and writes the straggler report.
//
//   attnscope-analyze TRACE_DIR [--html FILE] [--json FILE] [--perfetto FILE] [--threshold X]
//                     [--windows N] [--bins N] [--quiet] [--unfused-share X ...]
//
// Exit status: 0 every rank of the run was analysed; 1 the report was written but a rank file was
// skipped (corrupt, truncated, unreadable) or missing; 2 bad usage, no readable rank file, or an
// output that could not be written.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "attnscope/analysis/HtmlReport.h"
#include "attnscope/analysis/JsonReport.h"
#include "attnscope/analysis/PerfettoTrace.h"
#include "attnscope/analysis/RunAnalysis.h"
#include "attnscope/analysis/RunComparison.h"
#include "attnscope/analysis/TraceReader.h"

namespace {

using namespace attnscope::analysis;

constexpr char kUsage[] =
    "usage: attnscope-analyze TRACE_DIR [--html FILE] [--json FILE] [--perfetto FILE]\n"
    "                         [--threshold X] [--windows N] [--bins N]\n"
    "                         [--cell-factor X] [--cell-min-share X] [--quiet]\n"
    "Reads every rank-<r>.sqlite under TRACE_DIR (ATTNSCOPE_TRACE_DIR of the run), finds\n"
    "stragglers, cell outliers, memory outliers and missing ranks, and writes the reports asked\n"
    "for.\n"
    "  --html FILE      one self-contained HTML page with plots\n"
    "  --json FILE      the same figures as JSON (schema attnscope.analysis/1)\n"
    "  --perfetto FILE  Chrome/Perfetto trace; a FILE containing {rank} gives one file per rank\n"
    "  --threshold X    straggler when attention time per step exceeds X x the median (default:\n"
    "                   the run's ATTNSCOPE_STRAGGLER_THRESHOLD; 1.01 to 100)\n"
    "  --windows N      ...for at least N consecutive windows or time bins (default: the run's\n"
    "                   ATTNSCOPE_STRAGGLER_WINDOWS; 1 to 1000)\n"
    "  --bins N         time bins across the run (default: one per ~2 s, 12 to 60)\n"
    "  --cell-factor X  a (rank, layer, phase, op kind) cell is an outlier at X x the other\n"
    "                   ranks' median of the same cell (default: the run's\n"
    "                   ATTNSCOPE_CELL_OUTLIER_FACTOR; 1.01 to 100)...\n"
    "  --cell-min-share X  ...and an excess of at least X of the rank's time per step in that\n"
    "                   layer and phase (default: the run's ATTNSCOPE_CELL_OUTLIER_MIN_SHARE;\n"
    "                   0 to 1)\n"
    "  --quiet          no summary on stdout\n"
    "  --baseline DIR   compare this run against another run's TRACE_DIR instead: per layer,\n"
    "                   phase and op kind, time per step and peak memory side by side, the\n"
    "                   ratio with a bootstrap interval and a verdict; what differs between them\n"
    "  --layers FILE    per layer its kernel shapes and time per step by phase and op kind as\n"
    "                   JSON (schema attnscope.layers/1; what attnscope-replay reads)\n"
    "  --min-change X   with --baseline: faster or slower needs a ratio at least X away from 1\n"
    "                   (default 0.05, 0 to 1) and an interval that excludes 1\n"
    "  --resamples N    with --baseline: bootstrap resamples per cell (default 1000, 100 to\n"
    "                   100000)\n"
    "Recommendation thresholds (docs/ANALYSIS.md), each a number from 0 to 1:\n";
constexpr char kUsageEnd[] =
    "Exit status: 0 all ranks analysed, 1 a rank file was skipped or missing, 2 error.\n";

// "--unfused-share" for "unfused_share".
std::string flagOf(const RecommendationThreshold& t) {
  std::string flag = std::string("--") + t.name;
  for (char& ch : flag) ch = ch == '_' ? '-' : ch;
  return flag;
}

std::string usage() {
  std::string u = kUsage;
  for (const RecommendationThreshold& t : recommendationThresholds()) {
    std::string flag = flagOf(t) + " X";
    flag.resize(std::max<size_t>(flag.size() + 1, 26), ' ');
    char defaults[32];
    std::snprintf(defaults, sizeof defaults, " (default %g)", AnalysisOptions{}.*t.field);
    u += "  " + flag + t.help + defaults + "\n";
  }
  return u + kUsageEnd;
}

struct Args {
  std::string dir, html, json, perfetto, baseline, layers;
  AnalysisOptions options;
  ComparisonOptions comparison;
  bool quiet = false;
};

double number(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !(x >= lo && x <= hi)) {
    char allowed[96];
    std::snprintf(allowed, sizeof(allowed), "a number from %g to %g", lo, hi);
    throw std::invalid_argument(flag + "=\"" + v +
                                "\" is out of range or not a number; allowed: " + allowed);
  }
  return x;
}

int integer(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
    throw std::invalid_argument(flag + "=\"" + v +
                                "\" is out of range or not an integer; allowed: an integer from " +
                                std::to_string(lo) + " to " + std::to_string(hi));
  }
  return static_cast<int>(x);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << usage();
      std::exit(0);
    }
    if (flag == "--quiet") {
      a.quiet = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      if (!a.dir.empty())
        throw std::invalid_argument("more than one TRACE_DIR (\"" + a.dir + "\", \"" + flag +
                                    "\")");
      a.dir = flag;
      continue;
    }
    if (i + 1 >= argc)
      throw std::invalid_argument(flag + ": missing value (or unknown flag; see --help)");
    const std::string v = argv[++i];
    if (flag == "--html")
      a.html = v;
    else if (flag == "--json")
      a.json = v;
    else if (flag == "--perfetto")
      a.perfetto = v;
    else if (flag == "--baseline")
      a.baseline = v;
    else if (flag == "--layers")
      a.layers = v;
    else if (flag == "--min-change")
      a.comparison.minChange = number(flag, v, 0, 1);
    else if (flag == "--resamples")
      a.comparison.resamples = integer(flag, v, 100, 100000);
    else if (flag == "--threshold")
      a.options.threshold = number(flag, v, 1.01, 100);
    else if (flag == "--windows")
      a.options.minBins = integer(flag, v, 1, 1000);
    else if (flag == "--bins")
      a.options.bins = integer(flag, v, 1, 10000);
    else if (flag == "--cell-factor")
      a.options.cellFactor = number(flag, v, 1.01, 100);
    else if (flag == "--cell-min-share")
      a.options.cellMinShare = number(flag, v, 0, 1);
    else {
      const RecommendationThreshold* threshold = nullptr;
      for (const RecommendationThreshold& t : recommendationThresholds()) {
        if (flag == flagOf(t)) threshold = &t;
      }
      if (threshold == nullptr)
        throw std::invalid_argument("unknown flag " + flag + " (see --help)");
      a.options.*threshold->field = number(flag, v, threshold->lo, threshold->hi);
    }
  }
  if (a.dir.empty())
    throw std::invalid_argument("TRACE_DIR is missing (the run's ATTNSCOPE_TRACE_DIR)");
  if (!a.baseline.empty() && (!a.perfetto.empty() || !a.layers.empty()))
    throw std::invalid_argument(std::string(a.perfetto.empty() ? "--layers" : "--perfetto") +
                                " describes one run; it does not go with --baseline");
  return a;
}

std::string expandRank(std::string pattern, int rank) {
  const std::string token = "{rank}";
  for (size_t pos = pattern.find(token); pos != std::string::npos; pos = pattern.find(token, pos)) {
    pattern.replace(pos, token.size(), std::to_string(rank));
  }
  return pattern;
}

void summary(const Analysis& a, std::ostream& out) {
  out << "attnscope-analyze: " << a.traceDir << ": " << a.worldSize << " ranks, " << a.totalSteps
      << " sampled steps over " << text::seconds(a.endUnix - a.startUnix) << "\n";
  for (const RankRow& r : a.ranks) {
    if (r.status != RankOutcome::kOk) {
      out << "  rank " << r.rank << " " << rankOutcomeName(r.status) << ": " << r.file << ": "
          << r.reason << "\n";
    }
  }
  for (const SkippedFile& s : a.skipped) {
    bool listed = false;
    for (const RankRow& r : a.ranks) listed = listed || r.file == s.path;
    if (!listed) out << "  skipped " << s.path << ": " << s.reason << "\n";
  }
  if (a.stragglers.empty()) out << "  no straggler\n";
  for (const StragglerEpisode& e : a.stragglers) {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "  straggler: rank %d, %.2fx the other ranks' median (mean %.2fx), steps "
                  "%llu-%llu, +%.1f s to +%.1f s; %s %s %s "
                  "(layer %.0f%% of the excess, op kind %.0f%%)\n",
                  e.rank, e.maxScore, e.meanScore, static_cast<unsigned long long>(e.firstStep),
                  static_cast<unsigned long long>(e.lastStep), e.startUnix - a.startUnix,
                  e.endUnix - a.startUnix, e.layer.empty() ? "(no layer)" : e.layer.c_str(),
                  e.layer.empty() ? "" : attnscope::phaseName(e.phase),
                  e.layer.empty() ? "" : attnscope::opKindName(e.kind), 100 * e.layerShare,
                  100 * e.kindShare);
    out << buf;
  }
  for (const CellOutlier& c : a.cellOutliers) {
    char buf[320];
    std::snprintf(buf, sizeof(buf),
                  "  cell outlier: rank %d %s %s %s, %.2fx the other ranks' median (%s vs %s per "
                  "step, +%.0f%% on the layer's %s time; %llu of %llu steps above%s)%s\n",
                  c.rank, c.layer.c_str(), attnscope::phaseName(c.phase),
                  attnscope::opKindName(c.kind), c.factor, text::seconds(c.secondsPerStep).c_str(),
                  text::seconds(c.othersSecondsPerStep).c_str(), 100 * c.excessShare,
                  attnscope::phaseName(c.phase), static_cast<unsigned long long>(c.stepsAbove),
                  static_cast<unsigned long long>(c.steps),
                  c.windows > 0 ? (", " + std::to_string(c.windows) + " windows").c_str() : "",
                  c.rankIsStraggler ? "; the rank is a straggler" : "");
    out << buf;
  }
  if (a.cellOutliersFound > a.cellOutliers.size()) {
    out << "  (" << a.cellOutliersFound - a.cellOutliers.size()
        << " smaller cell outliers not listed: the reports keep the " << Analysis::kMaxCellOutliers
        << " largest)\n";
  }
  for (const MemoryOutlier& m : a.memoryOutliers) {
    out << "  memory outlier: rank " << m.rank << " " << m.layer << " "
        << attnscope::phaseName(m.phase) << " " << text::bytes(static_cast<double>(m.peakBytes))
        << " (median " << text::bytes(static_cast<double>(m.medianPeakBytes)) << ")\n";
  }
  for (const Recommendation& r : a.roofline.recommendations) {
    out << "  recommendation (" << r.id << ", " << text::percent(r.impact)
        << " of attention time): " << r.title << "\n";
  }
}

// Writes one report; false (and said on stderr) when it cannot.
bool writeReport(const std::string& path, const std::string& content) {
  std::string why;
  if (text::writeFile(path, content, &why)) return true;
  std::cerr << "attnscope-analyze: " << why << "\n";
  return false;
}

// Reads one run's directory for the comparison; false (reported) when nothing of it is usable.
bool readRun(const std::string& what, const std::string& dir, std::vector<RankTrace>* traces,
             std::vector<SkippedFile>* skipped) {
  std::string error;
  if (!readTraceDirectory(dir, traces, skipped, &error)) {
    std::cerr << "attnscope-analyze: " << what << ": " << error << "\n";
    return false;
  }
  for (const SkippedFile& s : *skipped)
    std::cerr << "attnscope-analyze: " << what << ": skipped " << s.path << ": " << s.reason
              << "\n";
  if (traces->empty()) {
    std::cerr << "attnscope-analyze: " << what << ": no readable rank file (rank-<r>.sqlite) in "
              << dir << "\n";
    return false;
  }
  return true;
}

// attnscope-analyze TRACE_DIR --baseline OTHER: same exit statuses as the report.
int compareMain(const Args& args) {
  std::vector<RankTrace> baseline, current;
  std::vector<SkippedFile> baselineSkipped, currentSkipped;
  if (!readRun("baseline", args.baseline, &baseline, &baselineSkipped) ||
      !readRun("current run", args.dir, &current, &currentSkipped)) {
    return 2;
  }
  RunComparison comparison;
  std::string error;
  if (!compareRuns(args.baseline, baseline, baselineSkipped, args.dir, current, currentSkipped,
                   args.comparison, &comparison, &error)) {
    std::cerr << "attnscope-analyze: " << error << "\n";
    return 2;
  }
  bool written = true;
  const auto write = [&](const std::string& path, const std::string& content) {
    written = writeReport(path, content) && written;
  };
  if (!args.json.empty()) write(args.json, renderComparisonJson(comparison));
  if (!args.html.empty()) write(args.html, renderComparisonHtml(comparison));
  if (!args.quiet) std::cout << renderComparisonText(comparison);
  if (!written) return 2;
  return baselineSkipped.empty() && currentSkipped.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "attnscope-analyze: " << e.what() << "\n" << usage();
    return 2;
  }
  if (!args.baseline.empty()) return compareMain(args);
  const auto began = std::chrono::steady_clock::now();
  std::vector<RankTrace> traces;
  std::vector<SkippedFile> skipped;
  std::string error;
  if (!readTraceDirectory(args.dir, &traces, &skipped, &error)) {
    std::cerr << "attnscope-analyze: " << error << "\n";
    return 2;
  }
  for (const SkippedFile& s : skipped)
    std::cerr << "attnscope-analyze: skipped " << s.path << ": " << s.reason << "\n";
  if (traces.empty()) {
    std::cerr << "attnscope-analyze: no readable rank file (rank-<r>.sqlite) in " << args.dir
              << "\n";
    return 2;
  }
  const Analysis analysis = analyzeRun(args.dir, traces, skipped, args.options);
  const double readSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  bool written = true;
  const auto write = [&](const std::string& path, const std::string& content) {
    written = writeReport(path, content) && written;
  };
  if (!args.json.empty()) write(args.json, JsonReport::render(analysis));
  if (!args.html.empty()) write(args.html, HtmlReport::render(analysis));
  if (!args.layers.empty()) write(args.layers, renderLayersJson(args.dir, traces, skipped));
  if (!args.perfetto.empty()) {
    if (args.perfetto.find("{rank}") != std::string::npos) {
      for (const RankTrace& t : traces)
        write(expandRank(args.perfetto, t.rank), PerfettoTrace::renderRank(t, analysis));
    } else {
      write(args.perfetto, PerfettoTrace::renderAll(traces, analysis));
    }
  }
  if (!args.quiet) {
    summary(analysis, std::cout);
    std::cout
        << "  analysed in " << text::seconds(readSeconds) << " (reports written in "
        << text::seconds(
               std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() -
               readSeconds)
        << ")\n";
  }
  if (!written) return 2;
  return analysis.anythingSkipped() ? 1 : 0;
}
