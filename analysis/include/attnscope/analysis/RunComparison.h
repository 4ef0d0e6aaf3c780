#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/analysis/TraceReader.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {
namespace analysis {

// How two runs are compared (attnscope-analyze RUN_DIR --baseline OTHER_RUN_DIR).
struct ComparisonOptions {
  // A cell is faster or slower only when the bootstrap interval of its time ratio excludes 1 and
  // the ratio itself differs from 1 by at least this much (0.05: 5%); otherwise "same within
  // noise".
  double minChange = 0.05;
  double confidence = 0.95;  // of the bootstrap interval
  // Bootstrap resamples per cell. A comparison so long that they would draw more than 2e8 steps
  // in all takes fewer (not below 200); RunComparison::options holds the number used.
  int resamples = 1000;
  uint64_t seed = 1;  // of the resampling (a report is reproducible)
};

enum class Verdict { kFaster, kSlower, kSame, kOnlyBaseline, kOnlyCurrent };
// "faster", "slower", "same within noise", "only in baseline", "only in current"
const char* verdictName(Verdict v);

// One (layer, phase, op kind) in both runs. kind == OpKind::kCount is the whole attention call;
// layer kAllLayers is the sum of every layer's calls in the phase.
struct ComparedCell {
  static constexpr const char* kAllLayers = "(all layers)";
  std::string layer;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kCount;
  // Time per sampled step: per rank the median over its steps, then the median over ranks (ranks
  // of runs with different world sizes compare by this per-rank median).
  double baselineSeconds = 0, currentSeconds = 0;
  double ratio = 0;     // current / baseline (NaN when either is 0)
  double ratioLow = 0;  // bootstrap interval of the ratio (steps resampled within each rank)
  double ratioHigh = 0;
  int64_t baselinePeak = 0;  // median over ranks of the rank's median peak live bytes per step
  int64_t currentPeak = 0;
  double peakRatio = 0;                          // NaN when either is 0
  uint64_t baselineSteps = 0, currentSteps = 0;  // all ranks' steps that ran the cell
  Verdict verdict = Verdict::kSame;
  // current - baseline seconds per step: what a regression costs (sort key)
  double deltaSeconds() const { return currentSeconds - baselineSeconds; }
};

// A fact of the runs' metadata that differs: hardware, versions, world size, sample rate, or for
// one layer its implementation, SDPA backend, dtype or shapes.
struct RunDifference {
  std::string layer;  // empty: the whole run
  std::string what;
  std::string baseline, current;
};

// What one run is, as the comparison describes it.
struct ComparedRun {
  std::string dir;
  int worldSize = 0;   // the largest any file states
  int ranks = 0;       // ranks with a usable file
  uint64_t steps = 0;  // sampled steps, all ranks
  std::vector<SkippedFile> skipped;
  std::vector<std::string> layers;  // first-seen order
  // Per layer (as `layers`): the attention implementation ("sdpa (flash)", "eager (matmul-softmax-
  // matmul)", ...) and the observed shapes, from the run's metadata and op kinds.
  std::vector<std::string> implementation;
  std::vector<std::string> shapes;
};

struct RunComparison {
  ComparedRun baseline, current;
  ComparisonOptions options;
  std::vector<RunDifference> differences;  // run-wide first, then per layer
  std::vector<std::string> onlyBaseline;   // layers in the baseline alone
  std::vector<std::string> onlyCurrent;    // layers in the current run alone
  // The all-layers totals first, then slower cells (largest added seconds per step first), then
  // faster ones (largest saving first), then the rest in layer, phase and kind order.
  std::vector<ComparedCell> cells;

  size_t count(Verdict v) const;
};

// Compares `current` against `baseline` (each every readable rank file of one run, as
// readTraceDirectory returns them). False with `error` when they cannot be compared: a side
// without any rank file, or runs that share no attention layer (different models).
bool compareRuns(const std::string& baselineDir, const std::vector<RankTrace>& baseline,
                 const std::vector<SkippedFile>& baselineSkipped, const std::string& currentDir,
                 const std::vector<RankTrace>& current,
                 const std::vector<SkippedFile>& currentSkipped, const ComparisonOptions& options,
                 RunComparison* out, std::string* error);

// One run's layers as attnscope-replay reads them (attnscope-analyze TRACE_DIR --layers FILE;
// schema attnscope.layers/1): per layer its implementation, the kernel shapes the plugin recorded,
// and per phase and op kind the time and peak per sampled step (the comparison's statistic), with
// the run's steps, versions and ceilings. Empty `traces`: a run without a usable rank file.
std::string renderLayersJson(const std::string& dir, const std::vector<RankTrace>& traces,
                             const std::vector<SkippedFile>& skipped);

// The comparison as JSON (schema attnscope.comparison/1), a self-contained HTML page, and the
// summary attnscope-analyze prints.
std::string renderComparisonJson(const RunComparison& c);
std::string renderComparisonHtml(const RunComparison& c);
std::string renderComparisonText(const RunComparison& c);

}  // namespace analysis
}  // namespace attnscope
