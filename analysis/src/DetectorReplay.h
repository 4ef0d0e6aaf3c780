#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnscope/analysis/TraceReader.h"
#include "attnscope/core/ClusterReport.h"
#include "attnscope/core/StragglerDetector.h"

namespace attnscope {
namespace analysis {
namespace detail {

// The live detector's rounds, replayed from the windows every rank recorded (its "windows" and
// "window_cells" rows): the same RankWindows, in the same order, through the same
// StragglerDetector and updateEpisodes that rank 0 ran during the job. The report's stragglers,
// cell outliers and scores are the live ones by construction (with the report's thresholds).
struct Replay {
  bool done = false;                // every rank with steps recorded windows
  bool cells = false;               // some window carried a cell comparison (the job aggregated)
  std::vector<uint64_t> intervals;  // replayed, in order (interval numbers of the windows)
  std::vector<double> startUnix, endUnix;  // per round: the span its windows cover
  // Per round, per rank (0..worldSize-1): the detector's score (NaN: not scored), and the cell
  // the rank's window named (layer id in layerNames, or -1) with its factor.
  std::vector<std::vector<double>> score;
  std::vector<std::vector<int32_t>> cellLayer;
  std::vector<std::vector<uint8_t>> cellPhase, cellKind;
  std::vector<std::vector<double>> cellFactor;
  // Episodes, rounds numbered 1.. as the detector numbers them (round k is intervals[k - 1]).
  std::vector<DetectorEpisode> stragglers, hangs, cellOutliers;
};

// A number from the run's "config" metadata ({"hang_s": 300, ...}); NaN when absent.
double runConfigNumber(const RankTrace* rank0, const std::string& key);

// The detector's settings for the replay: the report's threshold and window count, the rest as
// the run had them (its "config" metadata), else the defaults.
StragglerOptions replayOptions(const RankTrace* rank0, double threshold, int windows);

// Replays the ranks' windows. layerIndex maps a layer name to its index in layerNames.
Replay replayDetector(const std::map<int, const RankTrace*>& byRank, int worldSize,
                      const std::vector<std::string>& layerNames,
                      const std::unordered_map<std::string, int>& layerIndex,
                      const StragglerOptions& options);

}  // namespace detail
}  // namespace analysis
}  // namespace attnscope
