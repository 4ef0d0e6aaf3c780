#include "DetectorReplay.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "attnscope/core/Log.h"
#include "attnscope/core/StragglerEpisodes.h"

namespace attnscope {
namespace analysis {
namespace detail {
namespace {

// A rank-local layer id as an index into the merged layer names (-1: none or unknown).
int32_t globalLayer(const RankTrace& t, int32_t id,
                    const std::unordered_map<std::string, int>& layerIndex) {
  if (id < 0) return -1;
  const auto it = layerIndex.find(t.layerName(id));
  return it == layerIndex.end() ? -1 : it->second;
}

// Silences the episode log lines (rank 0 printed them during the job) while the replay runs.
class QuietLog {
 public:
  QuietLog() : level_(attnscope::detail::Log::level()) {
    attnscope::detail::Log::setLevel(LogLevel::kOff);
  }
  ~QuietLog() { attnscope::detail::Log::setLevel(level_); }

 private:
  LogLevel level_;
};

}  // namespace

double runConfigNumber(const RankTrace* t, const std::string& key) {
  if (t == nullptr) return std::numeric_limits<double>::quiet_NaN();
  const auto it = t->meta.find("config");
  if (it == t->meta.end()) return std::numeric_limits<double>::quiet_NaN();
  const std::string& json = it->second;
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::numeric_limits<double>::quiet_NaN();
  const char* begin = json.c_str() + at + key.size() + 3;
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  return end != begin && std::isfinite(v) ? v : std::numeric_limits<double>::quiet_NaN();
}

StragglerOptions replayOptions(const RankTrace* rank0, double threshold, int windows) {
  StragglerOptions o;
  o.threshold = threshold;
  o.windows = windows;
  const double exitThreshold = runConfigNumber(rank0, "straggler_exit_threshold");
  o.exitThreshold =
      exitThreshold > 1 && exitThreshold <= threshold ? exitThreshold : 1 + (threshold - 1) / 2;
  const double exitWindows = runConfigNumber(rank0, "straggler_exit_windows");
  o.exitWindows = exitWindows >= 1 && exitWindows <= 1000 ? static_cast<int>(exitWindows) : 3;
  const double hang = runConfigNumber(rank0, "hang_s");
  o.hangSeconds = hang > 0 ? hang : 300;
  o.minSampledSteps = 3;  // as rank 0's detector (Reporter)
  return o;
}

Replay replayDetector(const std::map<int, const RankTrace*>& byRank, int worldSize,
                      const std::vector<std::string>& layerNames,
                      const std::unordered_map<std::string, int>& layerIndex,
                      const StragglerOptions& options) {
  Replay out;
  std::set<uint64_t> intervals;
  for (const auto& [rank, t] : byRank) {
    if (!t->steps.empty() && t->windows.empty()) return out;  // a file from before windows
    for (const TraceWindowRow& w : t->windows) intervals.insert(w.interval);
  }
  if (intervals.empty() || worldSize <= 0) return out;
  out.done = true;
  out.intervals.assign(intervals.begin(), intervals.end());
  const size_t rounds = out.intervals.size(), n = static_cast<size_t>(worldSize);
  std::vector<std::vector<RankWindow>> windows(rounds, std::vector<RankWindow>(n));
  out.startUnix.assign(rounds, std::numeric_limits<double>::infinity());
  out.endUnix.assign(rounds, -std::numeric_limits<double>::infinity());
  for (const auto& [rank, t] : byRank) {
    if (rank < 0 || static_cast<size_t>(rank) >= n) continue;
    for (const TraceWindowRow& row : t->windows) {
      const size_t k = static_cast<size_t>(
          std::lower_bound(out.intervals.begin(), out.intervals.end(), row.interval) -
          out.intervals.begin());
      RankWindow w = row.window;
      w.rank = rank;
      w.present = true;
      w.topLayer = globalLayer(*t, w.topLayer, layerIndex);
      w.cellLayer = globalLayer(*t, w.cellLayer, layerIndex);
      out.cells = out.cells || w.cellLayer >= 0;
      windows[k][static_cast<size_t>(rank)] = w;
      out.startUnix[k] = std::min(out.startUnix[k], row.startUnix);
      out.endUnix[k] = std::max(out.endUnix[k], row.endUnix);
    }
  }
  out.score.assign(rounds, std::vector<double>(n, std::numeric_limits<double>::quiet_NaN()));
  out.cellLayer.assign(rounds, std::vector<int32_t>(n, -1));
  out.cellPhase.assign(rounds, std::vector<uint8_t>(n, 0));
  out.cellKind.assign(rounds, std::vector<uint8_t>(n, 0));
  out.cellFactor.assign(rounds, std::vector<double>(n, 0.0));
  QuietLog quiet;
  StragglerDetector detector(worldSize, options);
  for (size_t k = 0; k < rounds; ++k) {
    const ClusterRound& round = detector.update(windows[k], out.endUnix[k]);
    for (size_t r = 0; r < n; ++r) {
      const RankWindow& w = windows[k][r];
      if (w.present && w.sampledSteps >= static_cast<uint32_t>(options.minSampledSteps) &&
          round.ranks[r].score > 0) {
        out.score[k][r] = round.ranks[r].score;
      }
      out.cellLayer[k][r] = w.present ? w.cellLayer : -1;
      out.cellPhase[k][r] = static_cast<uint8_t>(w.cellPhase);
      out.cellKind[k][r] = static_cast<uint8_t>(w.cellKind);
      out.cellFactor[k][r] = w.cellFactor;
    }
    updateEpisodes(round, layerNames, &out.stragglers, &out.hangs, &out.cellOutliers);
  }
  return out;
}

}  // namespace detail
}  // namespace analysis
}  // namespace attnscope
