#include "attnscope/core/StragglerEpisodes.h"

#include <algorithm>

#include "attnscope/core/Log.h"

namespace attnscope {
namespace {

// The episode of `rank` that was still going in the previous round, if any.
StragglerFinding* ongoingEpisode(std::vector<StragglerFinding>& episodes, int32_t rank,
                                 uint64_t round) {
  for (StragglerFinding& f : episodes) {
    if (f.rank == rank && f.lastRound + 1 == round) return &f;
  }
  return nullptr;
}

// While `active`, extends the rank's ongoing episode to this round, or opens (and logs) a new
// one. Returns the episode, or null when not active.
StragglerFinding* extendEpisode(std::vector<StragglerFinding>* episodes, const RankStatus& s,
                                bool active, uint64_t round,
                                const std::vector<std::string>& names) {
  if (!active) return nullptr;
  StragglerFinding* f = ongoingEpisode(*episodes, s.rank, round);
  const std::string description = StragglerDetector::describe(s, names);
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
                    std::vector<StragglerFinding>* stragglers,
                    std::vector<StragglerFinding>* hangs) {
  for (const RankStatus& s : r.ranks) {
    const bool wasStraggler = ongoingEpisode(*stragglers, s.rank, r.round) != nullptr;
    if (StragglerFinding* f = extendEpisode(stragglers, s, s.straggler, r.round, names)) {
      f->maxScore = std::max(f->maxScore, s.score);
      if (s.window.topLayer >= 0) {
        f->layer = static_cast<size_t>(s.window.topLayer) < names.size()
                       ? names[s.window.topLayer]
                       : "layer " + std::to_string(s.window.topLayer);
        f->phase = s.window.topPhase;
        f->kind = s.window.topKind;
        f->share = s.window.topShare;
      }
    } else if (wasStraggler) {
      ATTNSCOPE_LOG(kInfo, "rank " << s.rank << " is no longer a straggler");
    }
    extendEpisode(hangs, s, s.hung || s.missing, r.round, names);
  }
}

}  // namespace attnscope
