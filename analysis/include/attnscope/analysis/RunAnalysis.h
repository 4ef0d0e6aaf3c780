#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/analysis/TraceReader.h"
#include "attnscope/core/OpKind.h"

namespace attnscope {
namespace analysis {

struct AnalysisOptions {
  // A rank is slow in a time bin when its typical (median) attention time per step exceeds
  // threshold × the median of the other ranks with steps in that bin...
  double threshold = 1.2;
  // ...and a straggler episode is at least this many consecutive slow bins.
  int minBins = 3;
  // Time bins across the run (0: about one per 2 s of run time, 12 to 60).
  int bins = 0;
  // A (layer, phase) whose typical peak on one rank exceeds this × the median of the ranks (and
  // by at least minOutlierBytes) is a memory outlier.
  double memoryFactor = 1.5;
  int64_t minOutlierBytes = 1 << 20;
};

enum class RankStatus { kOk, kStoppedEarly, kSkipped, kMissing };
const char* rankStatusName(RankStatus s);  // "ok", "stopped_early", "skipped", "missing"

struct RankRow {
  int rank = -1;
  RankStatus status = RankStatus::kOk;
  std::string file;
  std::string reason;        // skipped / missing / stopped early: why
  std::string node;
  uint64_t steps = 0;        // sampled steps in the file
  uint64_t firstStep = 0, lastStep = 0;
  double firstUnix = 0, lastUnix = 0;
  double forwardSeconds = 0;   // median attention forward (+ recompute) time per sampled step
  double backwardSeconds = 0;  // median attention backward time per sampled step
  double score = 0;            // attention time per step over the median of the other ranks
  uint64_t badSteps = 0;       // undecodable step records left out
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

struct LayerPhaseRow {
  std::string layer;
  Phase phase = Phase::kForward;
  uint64_t calls = 0;
  double p50Seconds = 0, p99Seconds = 0;  // per call, all ranks' sampled steps together
  std::vector<double> rankP50Seconds;      // per rank (NaN: none), indexed like Analysis::ranks
  std::vector<double> rankSecondsPerStep;  // per rank: median (layer, phase) time per step
  std::vector<int64_t> rankPeakBytes;      // per rank: median peak per step (-1: none)
  int64_t medianPeakBytes = 0;
  int64_t maxPeakBytes = 0;
};

// The whole run, merged from every readable rank file.
struct Analysis {
  std::string traceDir;
  int worldSize = 0;
  double startUnix = 0, endUnix = 0;
  std::vector<RankRow> ranks;           // one per rank 0..worldSize-1 (and any beyond in files)
  std::vector<SkippedFile> skipped;     // files that could not be read, by name
  std::vector<int> missingRanks;        // no usable file
  std::vector<StragglerEpisode> stragglers;
  std::vector<MemoryOutlier> memoryOutliers;
  std::vector<LayerPhaseRow> layers;
  // Timeline: `bins` equal time bins from startUnix; per rank (index as in `ranks`) the median
  // attention time per step in the bin (NaN: no step) and its score.
  double binSeconds = 0;
  std::vector<std::vector<double>> binAttentionSeconds;
  std::vector<std::vector<double>> binScore;
  std::vector<TraceFindingRow> liveFindings;  // what rank 0's live detector recorded
  std::vector<TraceRoundRow> liveRounds;
  double threshold = 0;
  uint64_t totalSteps = 0;
  std::vector<std::string> layerNames;  // in first-seen order

  bool anythingSkipped() const { return !skipped.empty() || !missingRanks.empty(); }
};

// Merges the ranks' traces and finds stragglers, memory outliers, missing and stopped ranks, and
// the per-layer table. `skipped` are the files readTraceDirectory could not use.
Analysis analyzeRun(const std::string& traceDir, const std::vector<RankTrace>& traces,
                    const std::vector<SkippedFile>& skipped, const AnalysisOptions& options);

}  // namespace analysis
}  // namespace attnscope
