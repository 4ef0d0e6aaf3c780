#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/analysis/TraceReader.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/Roofline.h"

namespace attnscope {
namespace analysis {

// Every detection option left at "the run's own" (0, or a negative share) takes what the run's live
// detector applied: its trace's config, else Config's default. Given, it overrides the run's.
struct AnalysisOptions {
  // A rank is slow in a time bin when its typical (median) attention time per step exceeds
  // threshold × the median of the other ranks with steps in that bin (0: the run's own
  // ATTNSCOPE_STRAGGLER_THRESHOLD)...
  double threshold = 0;
  // ...and a straggler episode is at least this many consecutive slow bins (0: the run's own
  // ATTNSCOPE_STRAGGLER_WINDOWS).
  int minBins = 0;
  // Time bins across the run (0: about one per 2 s of run time, 12 to 60).
  int bins = 0;
  // A (layer, phase) whose typical peak on one rank exceeds this × the median of the ranks (and
  // by at least minOutlierBytes) is a memory outlier.
  double memoryFactor = 1.5;
  int64_t minOutlierBytes = 1 << 20;
  // A (rank, layer, phase, op kind) cell whose median time per step is at least cellFactor × the
  // median over the other ranks of theirs, by at least cellMinShare of the rank's own time per
  // step in that layer and phase, is a cell outlier (whether or not the rank as a whole is a
  // straggler). 0: the run's own ATTNSCOPE_CELL_OUTLIER_FACTOR; a negative share: the run's own
  // ATTNSCOPE_CELL_OUTLIER_MIN_SHARE.
  double cellFactor = 0;
  double cellMinShare = -1;

  // Recommendations from the roofline cells (docs/ANALYSIS.md):
  // unfused_attention: no fused_attention op ran and softmax + dropout + layout_copy take more
  // than this share of the forward attention op time.
  double unfusedShare = 0.30;
  // lower_precision: a matmul kind, compute-bound, with at least this share of its flops in
  // float32/float64.
  double wideFlopsShare = 0.5;
  // rank_below_ceiling: a rank's fraction of its roof below this × the median of the other ranks'
  // (each of which is itself at or above this × that median: the others agree).
  double rankFractionRatio = 0.7;
  // ...in cells that make up at least this share of that rank's attention op time (one slow cell
  // of tiny ops is noise; a hardware problem slows most of them).
  double rankBelowShare = 0.25;
  // memory_bound_far_below: a memory-bound kind with more than this share of the attention op
  // time...
  double memoryBoundShare = 0.10;
  // ...reaching less than this fraction of its roof.
  double memoryBoundFraction = 0.20;
};

// The recommendation thresholds above, each with its attnscope-analyze flag (--unfused-share ...)
// and JSON name (unfused_share ...), the range it accepts and what it means.
struct RecommendationThreshold {
  const char* name;  // JSON key; the flag is "--" + name with '_' as '-'
  double AnalysisOptions::*field;
  double lo, hi;  // accepted: lo <= x <= hi
  const char* help;
};
const std::vector<RecommendationThreshold>& recommendationThresholds();

enum class RankOutcome { kOk, kStoppedEarly, kSkipped, kMissing };
const char* rankOutcomeName(RankOutcome s);  // "ok", "stopped_early", "skipped", "missing"

struct RankRow {
  int rank = -1;
  RankOutcome status = RankOutcome::kOk;
  std::string file;
  std::string reason;  // skipped / missing / stopped early: why
  std::string node;
  uint64_t steps = 0;  // sampled steps in the file
  uint64_t firstStep = 0, lastStep = 0;
  double firstUnix = 0, lastUnix = 0;
  double forwardSeconds = 0;   // median attention forward (+ recompute) time per sampled step
  double backwardSeconds = 0;  // median attention backward time per sampled step
  double score = 0;       // attention time per step over the median of the other ranks (1 alone)
  uint64_t badSteps = 0;  // undecodable step records left out
};

struct StragglerEpisode {
  int rank = -1;
  int firstBin = 0, lastBin = 0;
  uint64_t firstStep = 0, lastStep = 0;
  double startUnix = 0, endUnix = 0;
  double maxScore = 0, meanScore = 0;  // over the bins above the threshold
  int slowBins = 0;                    // bins above the threshold (gaps shorter than minBins join)
  // What the excess is made of: the layer with the largest excess over the other ranks, its phase
  // and op kind with the largest excess, and their shares of the summed excess.
  std::string layer;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  double layerShare = 0;
  double kindShare = 0;
  double excessSecondsPerStep = 0;  // rank's attention time per step minus the others' median
};

struct MemoryOutlier {
  int rank = -1;
  std::string layer;
  Phase phase = Phase::kForward;
  int64_t peakBytes = 0;        // the rank's median peak per step
  int64_t medianPeakBytes = 0;  // median of the ranks
  double ratio = 0;
};

// One op kind of one layer and phase that is slow on one rank against the same cell elsewhere.
struct CellOutlier {
  int rank = -1;
  std::string layer;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  double secondsPerStep = 0;        // the rank's median time per sampled step in the cell
  double othersSecondsPerStep = 0;  // median over the other ranks of their medians
  double othersMinSecondsPerStep = 0, othersMaxSecondsPerStep = 0;
  double factor = 0;        // secondsPerStep / othersSecondsPerStep
  double excessShare = 0;   // (secondsPerStep - others) / the rank's time in the layer and phase
  uint64_t steps = 0;       // the rank's sampled steps
  uint64_t stepsAbove = 0;  // of which the cell took more than cellFactor × the others' median
  int otherRanks = 0;       // ranks the others' median is over
  bool rankIsStraggler = false;  // the rank also has a straggler episode
  // Found by the replayed live detector (Analysis::detection "live_rounds"): `factor` is the
  // median over the episode's windows of the factor the rank measured against the other ranks,
  // maxFactor the largest (what the live finding keeps), `windows` the episode's length and
  // startUnix/endUnix its span. secondsPerStep and the others' figures are then over that span.
  double maxFactor = 0;
  int windows = 0;
  double startUnix = 0, endUnix = 0;
};

struct LayerPhaseRow {
  std::string layer;
  Phase phase = Phase::kForward;
  uint64_t calls = 0;
  double p50Seconds = 0, p99Seconds = 0;   // per call, all ranks' sampled steps together
  std::vector<double> rankP50Seconds;      // per rank (NaN: none), indexed like Analysis::ranks
  std::vector<double> rankSecondsPerStep;  // per rank: median (layer, phase) time per step
  std::vector<int64_t> rankPeakBytes;      // per rank: median peak per step (-1: none)
  int64_t medianPeakBytes = 0;
  int64_t maxPeakBytes = 0;
};

// One rank's machine, from its trace's metadata (empty: the rank did not say).
struct RankHardware {
  int rank = -1;
  std::string node;
  Ceilings ceilings;   // peak_flops_per_second, peak_bytes_per_second, ceiling_source/_detail
  std::string timing;  // "host" or "device": what the roofline seconds measure
  std::string cpuModel, cpuCores, torchThreads, blas;
  std::string gpuName, gpuDriver, gpuMemoryBytes;  // only with a GPU
  std::string torchVersion;
};

// One (layer, phase, op kind) on the roofline: its cells summed over every rank and window.
struct ReportRooflineCell {
  std::string layer;
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  uint64_t ops = 0;
  double seconds = 0;          // all its ops
  double modelledSeconds = 0;  // the ops with a formula: the rates divide by this
  double flops = 0, bytes = 0, wideFlops = 0;
  // rooflinePoint(flops, bytes, modelledSeconds) against the run's ceilings.
  RooflinePoint point;
  // Per rank (index as in Analysis::ranks): the rank's own sums against its own ceilings; NaN where
  // the rank has no modelled ops of the cell or no ceilings.
  std::vector<double> rankFraction;
};

// Something to change, with the figures that support it.
struct Recommendation {
  std::string id;  // unfused_attention, lower_precision, rank_below_ceiling, memory_bound_far_below
  std::string title;
  std::string suggestion;
  std::vector<std::pair<std::string, std::string>> evidence;  // key, value as shown
  std::vector<int> ranks;                                     // ranks concerned (empty: all)
  std::vector<std::string> layers;                            // layers concerned (empty: all)
  double impact = 0;  // share of the attention op time concerned (sort key)
};

struct RooflineAnalysis {
  bool present = false;  // any roofline row in any rank's trace
  // The run's ceilings: per figure, the median of the ranks that have one. source is the ranks'
  // common source ("mixed" when they differ), detail the first such rank's.
  Ceilings ceilings;
  int ceilingRanks = 0;                   // ranks with known ceilings
  std::string timing;                     // the ranks' common timing ("mixed" when they differ)
  std::string torchVersion;               // the first rank's that states one
  std::vector<RankHardware> hardware;     // one per rank with a trace, in rank order
  std::vector<ReportRooflineCell> cells;  // by layer (first-seen order), phase, kind
  double attentionSeconds = 0;            // all cells' seconds: the attention op time
  uint64_t badRows = 0;                   // rows the reader left out, all ranks
  std::vector<Recommendation> recommendations;  // largest impact first
  AnalysisOptions
      options;  // what the recommendations applied (recommendationThresholds() names them)
};

// The whole run, merged from every readable rank file.
struct Analysis {
  std::string traceDir;
  int worldSize = 0;
  double startUnix = 0, endUnix = 0;
  std::vector<RankRow> ranks;        // one per rank 0..worldSize-1 (and any beyond in files)
  std::vector<SkippedFile> skipped;  // files that could not be read, by name
  std::vector<int> missingRanks;     // no usable file
  std::vector<StragglerEpisode> stragglers;
  std::vector<MemoryOutlier> memoryOutliers;
  std::vector<CellOutlier> cellOutliers;  // largest excess first, at most kMaxCellOutliers
  size_t cellOutliersFound = 0;           // before the cap
  static constexpr size_t kMaxCellOutliers = 20;
  std::vector<LayerPhaseRow> layers;
  // Timeline: `bins` equal time bins from startUnix; per rank (index as in `ranks`) the median
  // attention time per step in the bin (per layer and phase the median, summed; NaN: no step) and
  // its score.
  double binSeconds = 0;
  std::vector<std::vector<double>> binAttentionSeconds;
  std::vector<std::vector<double>> binScore;
  // Where the stragglers, cell outliers and scores come from: "live_rounds" (the live detector
  // replayed from the windows every rank recorded, `rounds` of them) or "steps" (a trace without
  // windows: time bins of the sampled steps).
  std::string detection;
  size_t rounds = 0;
  std::vector<TraceFindingRow> liveFindings;  // what rank 0's live detector recorded
  std::vector<TraceRoundRow> liveRounds;
  double threshold = 0;
  uint64_t totalSteps = 0;
  std::vector<std::string> layerNames;  // in first-seen order
  RooflineAnalysis roofline;

  bool anythingSkipped() const { return !skipped.empty() || !missingRanks.empty(); }
};

// Merges the ranks' traces and finds stragglers, memory outliers, missing and stopped ranks, and
// the per-layer table. `skipped` are the files readTraceDirectory could not use.
Analysis analyzeRun(const std::string& traceDir, const std::vector<RankTrace>& traces,
                    const std::vector<SkippedFile>& skipped, const AnalysisOptions& options);

}  // namespace analysis
}  // namespace attnscope
