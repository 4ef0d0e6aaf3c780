#include "attnscope/core/StragglerEpisodes.h"

#include <algorithm>

#include "attnscope/core/Log.h"

namespace attnscope {
namespace {

// The episode of `rank` that was still going in the previous round, if any.
DetectorEpisode* ongoingEpisode(std::vector<DetectorEpisode>& episodes, int32_t rank,
                                uint64_t round) {
  for (DetectorEpisode& f : episodes) {
    if (f.rank == rank && f.lastRound + 1 == round) return &f;
  }
  return nullptr;
}

std::string layerName(const std::vector<std::string>& names, int32_t id) {
  return static_cast<size_t>(id) < names.size() ? names[id] : "layer " + std::to_string(id);
}

// While `active`, extends the rank's ongoing episode to this round, or opens (and logs) a new
// one. Returns the episode, or null when not active.
DetectorEpisode* extendEpisode(std::vector<DetectorEpisode>* episodes, const RankStatus& s,
                               bool active, uint64_t round, const std::vector<std::string>& names,
                               bool cell = false) {
  if (!active) return nullptr;
  DetectorEpisode* f = ongoingEpisode(*episodes, s.rank, round);
  const RankStatus& w = s;
  if (cell && f != nullptr &&
      (f->layer != layerName(names, w.cellLayer) || f->phase != w.cellPhase ||
       f->kind != w.cellKind)) {
    f = nullptr;  // another cell of the same rank: its own episode
  }
  const std::string description =
      cell ? StragglerDetector::describeCell(s, names) : StragglerDetector::describe(s, names);
  if (f == nullptr) {
    episodes->emplace_back();
    f = &episodes->back();
    f->rank = s.rank;
    f->firstRound = round;
    ATTNSCOPE_LOG(kWarn, description);
  }
  f->lastRound = round;
  f->description = description;
  return f;
}

}  // namespace

void updateEpisodes(const ClusterRound& r, const std::vector<std::string>& names,
                    std::vector<DetectorEpisode>* stragglers, std::vector<DetectorEpisode>* hangs,
                    std::vector<DetectorEpisode>* cellOutliers) {
  for (const RankStatus& s : r.ranks) {
    const bool wasStraggler = ongoingEpisode(*stragglers, s.rank, r.round) != nullptr;
    if (DetectorEpisode* f = extendEpisode(stragglers, s, s.straggler, r.round, names)) {
      f->maxScore = std::max(f->maxScore, s.score);
      if (s.window.topLayer >= 0) {
        f->layer = layerName(names, s.window.topLayer);
        f->phase = s.window.topPhase;
        f->kind = s.window.topKind;
        f->share = s.window.topShare;
      }
    } else if (wasStraggler) {
      ATTNSCOPE_LOG(kInfo, "rank " << s.rank << " is no longer a straggler");
    }
    extendEpisode(hangs, s, s.hung || s.missing, r.round, names);
    DetectorEpisode* ongoingCell = ongoingEpisode(*cellOutliers, s.rank, r.round);
    const std::string endedCell = ongoingCell != nullptr && !s.cellOutlier
                                      ? ongoingCell->layer + " " + phaseName(ongoingCell->phase) +
                                            " " + opKindName(ongoingCell->kind)
                                      : "";
    if (!endedCell.empty()) {
      ATTNSCOPE_LOG(kInfo, "rank " << s.rank << ": cell outlier " << endedCell << " is over");
    }
    if (DetectorEpisode* f =
            extendEpisode(cellOutliers, s, s.cellOutlier, r.round, names, /*cell=*/true)) {
      f->layer = layerName(names, s.cellLayer);
      f->phase = s.cellPhase;
      f->kind = s.cellKind;
      f->maxScore = std::max(f->maxScore, s.cellFactor);
      f->share = std::max(f->share, s.cellShare);
    }
  }
}

}  // namespace attnscope
