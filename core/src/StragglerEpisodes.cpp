#include "attnscope/core/StragglerEpisodes.h"

#include <algorithm>
#include <map>
#include <utility>

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

// The cell a scored window of `s` named, counted in the episode `f`.
void vote(DetectorEpisode* f, const RankStatus& s, uint64_t round) {
  const RankWindow& w = s.window;
  if (!s.scored || w.topLayer < 0) return;
  auto it = std::find_if(f->votes.begin(), f->votes.end(), [&](const AttributionVote& v) {
    return v.layer == w.topLayer && v.phase == w.topPhase && v.kind == w.topKind;
  });
  if (it == f->votes.end()) {
    f->votes.push_back(AttributionVote{w.topLayer, w.topPhase, w.topKind, 0, 0, 0});
    it = f->votes.end() - 1;
  }
  ++it->windows;
  it->share = w.topShare;
  it->lastRound = round;
}

// `s` as the straggler episode `f` describes it: its attribution, not this window's.
std::string describeStraggler(const DetectorEpisode& f, RankStatus s,
                              const std::vector<std::string>& names) {
  const AttributionVote* v = leadingVote(f.votes);
  s.window.topLayer = v != nullptr ? v->layer : -1;
  if (v != nullptr) {
    s.window.topPhase = v->phase;
    s.window.topKind = v->kind;
    s.window.topShare = v->share;
  }
  return StragglerDetector::describe(s, names);
}

// While `active`, extends the rank's ongoing episode to this round, or opens a new one (`opened`).
// Returns the episode, or null when not active.
DetectorEpisode* extendEpisode(std::vector<DetectorEpisode>* episodes, const RankStatus& s,
                               bool active, uint64_t round, const std::vector<std::string>& names,
                               bool* opened, bool cell = false) {
  *opened = false;
  if (!active) return nullptr;
  DetectorEpisode* f = ongoingEpisode(*episodes, s.rank, round);
  if (cell && f != nullptr &&
      (f->layer != layerName(names, s.cellLayer) || f->phase != s.cellPhase ||
       f->kind != s.cellKind)) {
    f = nullptr;  // another cell of the same rank: its own episode
  }
  if (f == nullptr) {
    episodes->emplace_back();
    f = &episodes->back();
    f->rank = s.rank;
    f->firstRound = round;
    *opened = true;
  }
  f->lastRound = round;
  return f;
}

// Sets the episode's description, and logs it when the episode opened this round.
void describeEpisode(DetectorEpisode* f, std::string description, bool opened) {
  if (opened) ATTNSCOPE_LOG(kWarn, description);
  f->description = std::move(description);
}

}  // namespace

const AttributionVote* leadingVote(const std::vector<AttributionVote>& votes) {
  // The later of two equal counts: its last vote came in a later round.
  const auto ahead = [](uint64_t a, uint64_t aRound, uint64_t b, uint64_t bRound) {
    return a > b || (a == b && aRound > bRound);
  };
  std::map<int32_t, std::pair<uint64_t, uint64_t>> layers;  // windows, last round
  for (const AttributionVote& v : votes) {
    auto& [windows, last] = layers[v.layer];
    windows += v.windows;
    last = std::max(last, v.lastRound);
  }
  int32_t layer = -1;
  uint64_t layerWindows = 0, layerRound = 0;
  for (const auto& [id, counts] : layers) {
    if (layer < 0 || ahead(counts.first, counts.second, layerWindows, layerRound)) {
      layer = id;
      layerWindows = counts.first;
      layerRound = counts.second;
    }
  }
  const AttributionVote* best = nullptr;
  for (const AttributionVote& v : votes) {
    if (v.layer == layer &&
        (best == nullptr || ahead(v.windows, v.lastRound, best->windows, best->lastRound))) {
      best = &v;
    }
  }
  return best;
}

void updateEpisodes(const ClusterRound& r, const std::vector<std::string>& names,
                    std::vector<DetectorEpisode>* stragglers, std::vector<DetectorEpisode>* hangs,
                    std::vector<DetectorEpisode>* cellOutliers) {
  for (const RankStatus& s : r.ranks) {
    const bool wasStraggler = ongoingEpisode(*stragglers, s.rank, r.round) != nullptr;
    bool opened = false;
    if (DetectorEpisode* f = extendEpisode(stragglers, s, s.straggler, r.round, names, &opened)) {
      f->maxScore = std::max(f->maxScore, s.score);
      vote(f, s, r.round);
      if (const AttributionVote* v = leadingVote(f->votes)) {
        f->layer = layerName(names, v->layer);
        f->phase = v->phase;
        f->kind = v->kind;
        f->share = v->share;
      }
      // A window too short to score has a score of 0: the description stays that of the last
      // scored one.
      if (opened || s.scored) describeEpisode(f, describeStraggler(*f, s, names), opened);
    } else if (wasStraggler) {
      ATTNSCOPE_LOG(kInfo, "rank " << s.rank << " is no longer a straggler");
    }
    if (DetectorEpisode* f =
            extendEpisode(hangs, s, s.hung || s.missing, r.round, names, &opened)) {
      describeEpisode(f, StragglerDetector::describe(s, names), opened);
    }
    DetectorEpisode* ongoingCell = ongoingEpisode(*cellOutliers, s.rank, r.round);
    const std::string endedCell = ongoingCell != nullptr && !s.cellOutlier
                                      ? ongoingCell->layer + " " + phaseName(ongoingCell->phase) +
                                            " " + opKindName(ongoingCell->kind)
                                      : "";
    if (!endedCell.empty()) {
      ATTNSCOPE_LOG(kInfo, "rank " << s.rank << ": cell outlier " << endedCell << " is over");
    }
    if (DetectorEpisode* f =
            extendEpisode(cellOutliers, s, s.cellOutlier, r.round, names, &opened, /*cell=*/true)) {
      f->layer = layerName(names, s.cellLayer);
      f->phase = s.cellPhase;
      f->kind = s.cellKind;
      f->maxScore = std::max(f->maxScore, s.cellFactor);
      f->share = std::max(f->share, s.cellShare);
      describeEpisode(f, StragglerDetector::describeCell(s, names), opened);
    }
  }
}

}  // namespace attnscope
