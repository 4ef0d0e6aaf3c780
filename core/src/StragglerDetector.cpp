#include "attnscope/core/StragglerDetector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace attnscope {
namespace {

double sortedMedian(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  if (n == 0) return 0;
  if (n % 2 == 1) return sorted[n / 2];
  return 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

bool seen(double lastChange) { return !std::isnan(lastChange); }

// The median of `sorted` without one element equal to `value` (sorted ascending, holding it):
// O(log n) per rank, so a round stays O(n log n) at 16k ranks.
double medianWithout(const std::vector<double>& sorted, double value) {
  const size_t n = sorted.size();
  if (n < 2) return 0;
  const size_t removed =
      static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  const auto at = [&](size_t k) { return sorted[k < removed ? k : k + 1]; };  // k of the n - 1
  const size_t m = n - 1;
  if (m % 2 == 1) return at(m / 2);
  return 0.5 * (at(m / 2 - 1) + at(m / 2));
}

}  // namespace

StragglerOptions stragglerOptions(const Config& config) {
  StragglerOptions o;
  o.threshold = config.stragglerThreshold;
  o.windows = static_cast<int>(config.stragglerWindows);
  o.exitThreshold = config.exitThreshold();
  o.exitWindows = static_cast<int>(config.stragglerExitWindows);
  o.hangSeconds = config.hangSeconds;
  o.minSampledSteps = 3;
  return o;
}

StragglerDetector::StragglerDetector(int worldSize, StragglerOptions options)
    : worldSize_(std::max(worldSize, 0)),
      options_(options),
      lastStepChange_(static_cast<size_t>(std::max(worldSize, 0)),
                      std::numeric_limits<double>::quiet_NaN()) {
  last_.expectedRanks = worldSize_;
  last_.ranks.resize(static_cast<size_t>(worldSize_));
  for (int r = 0; r < worldSize_; ++r) last_.ranks[static_cast<size_t>(r)].rank = r;
}

void StragglerDetector::advanceCell(const RankWindow& w, const RankStatus& prev, RankStatus* s,
                                    const StragglerOptions& options) {
  const bool named = w.cellLayer >= 0;
  if (prev.cellActive) {
    const bool namesIt = named && w.cellLayer == prev.cellLayer && w.cellPhase == prev.cellPhase &&
                         w.cellKind == prev.cellKind;
    s->cellMissed = namesIt ? 0 : prev.cellMissed + 1;
    s->cellActive = s->cellMissed < options.exitWindows;
    if (namesIt) {
      s->cellFactor = w.cellFactor;
      s->cellShare = w.cellShare;
    }
    if (s->cellActive) {
      s->cellConsecutive = prev.cellConsecutive + 1;
      return;
    }
    s->cellLayer = -1;
    s->cellConsecutive = 0;  // over; a new cell starts its own count next window
    return;
  }
  const RankWindow& before = prev.window;
  const bool sameAsBefore = named && w.cellLayer == before.cellLayer &&
                            w.cellPhase == before.cellPhase && w.cellKind == before.cellKind;
  s->cellConsecutive = !named ? 0 : sameAsBefore ? prev.cellConsecutive + 1 : 1;
  s->cellMissed = 0;
  s->cellActive = s->cellConsecutive >= options.windows;
  if (s->cellActive) {
    s->cellLayer = w.cellLayer;
    s->cellPhase = w.cellPhase;
    s->cellKind = w.cellKind;
    s->cellFactor = w.cellFactor;
    s->cellShare = w.cellShare;
  }
}

const ClusterRound& StragglerDetector::update(const std::vector<RankWindow>& windows,
                                              double nowSeconds) {
  const size_t n = static_cast<size_t>(worldSize_);
  const RankWindow absent;
  auto report = [&](size_t r) -> const RankWindow& {
    return r < windows.size() ? windows[r] : absent;
  };
  auto sampled = [&](size_t r) {
    return report(r).present &&
           report(r).sampledSteps >= static_cast<uint32_t>(options_.minSampledSteps);
  };

  ClusterRound next;
  next.round = last_.round + 1;
  next.timeSeconds = nowSeconds;
  next.expectedRanks = worldSize_;

  std::vector<double> attention;
  for (size_t r = 0; r < n; ++r) {
    if (report(r).present) ++next.presentRanks;
    if (sampled(r)) attention.push_back(report(r).attentionSeconds());
  }
  std::sort(attention.begin(), attention.end());
  next.medianAttentionSeconds = sortedMedian(attention);

  // Step counters first: the hang test compares every rank's last change with the others'.
  for (size_t r = 0; r < n; ++r) {
    const RankWindow& w = report(r);
    if (!w.present) continue;
    if (!seen(lastStepChange_[r]) || w.lastStep != last_.ranks[r].lastStep) {
      lastStepChange_[r] = nowSeconds;
    }
  }

  double latestChange = -std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < n; ++r) {
    if (report(r).present && seen(lastStepChange_[r]))
      latestChange = std::max(latestChange, lastStepChange_[r]);
  }

  next.ranks.resize(n);
  for (size_t r = 0; r < n; ++r) {
    const RankWindow& w = report(r);
    const RankStatus& prev = last_.ranks[r];
    RankStatus& s = next.ranks[r];
    s.rank = static_cast<int32_t>(r);
    s.present = w.present;
    s.window = w.present ? w : prev.window;
    s.lastStep = w.present ? w.lastStep : prev.lastStep;

    s.missing = !w.present;
    s.missingSinceRound = !s.missing ? 0 : (prev.missing ? prev.missingSinceRound : next.round);

    s.consecutive = prev.consecutive;
    s.below = prev.below;
    s.active = prev.active;
    s.cellConsecutive = prev.cellConsecutive;
    s.cellMissed = prev.cellMissed;
    s.cellActive = prev.cellActive;
    s.cellLayer = prev.cellLayer;
    s.cellPhase = prev.cellPhase;
    s.cellKind = prev.cellKind;
    s.cellFactor = prev.cellFactor;
    s.cellShare = prev.cellShare;
    s.scored = sampled(r);
    if (s.scored) {
      // Over the median of the others, as the post-run report scores (with two ranks the median
      // of both would halve any difference); alone, nobody to be slower than: 1.
      if (attention.size() < 2) {
        s.score = 1.0;
      } else {
        const double others = medianWithout(attention, w.attentionSeconds());
        s.score = others > 0 ? w.attentionSeconds() / others : 0;
      }
      if (prev.active) {
        s.below = s.score <= options_.exitThreshold ? prev.below + 1 : 0;
        s.active = s.below < options_.exitWindows;
        s.consecutive = s.active ? prev.consecutive + 1 : 0;
      } else {
        s.consecutive = s.score > options_.threshold ? prev.consecutive + 1 : 0;
        s.active = s.consecutive >= options_.windows;
        s.below = 0;
      }
      advanceCell(w, prev, &s, options_);
    }
    s.straggler = s.present && s.active;
    s.cellOutlier = s.present && s.cellActive;

    if (seen(lastStepChange_[r])) s.stalledSeconds = nowSeconds - lastStepChange_[r];
    // Another present rank moved later than this one: the latest change of any present rank is
    // later (comparing with the maximum keeps the round O(N) when the whole job stands still).
    if (w.present && seen(lastStepChange_[r]) && s.stalledSeconds >= options_.hangSeconds) {
      s.hung = latestChange > lastStepChange_[r];
    }

    if (s.straggler) next.stragglers.push_back(s.rank);
    if (s.hung) next.hung.push_back(s.rank);
    if (s.missing) next.missing.push_back(s.rank);
  }

  last_ = std::move(next);
  return last_;
}

void CellHold::observe(const RankWindow& w) {
  RankStatus next = status_;
  next.window = w;
  if (w.sampledSteps >= static_cast<uint32_t>(options_.minSampledSteps)) {
    StragglerDetector::advanceCell(w, status_, &next, options_);
  }
  status_ = next;
}

CellOutlierCell CellHold::keep() const {
  CellOutlierCell c;
  const bool held = status_.cellActive;
  const RankWindow& w = status_.window;
  c.layer = held ? status_.cellLayer : w.cellLayer;
  c.phase = held ? status_.cellPhase : w.cellPhase;
  c.kind = held ? status_.cellKind : w.cellKind;
  return c;
}

std::string StragglerDetector::describeCell(const RankStatus& status,
                                            const std::vector<std::string>& layerNames) {
  const RankStatus& w = status;
  const size_t layer = static_cast<size_t>(w.cellLayer);
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                " %s %s, %.2fx the other ranks' time for it (+%.0f%% on the layer's %s time) "
                "for %d windows",
                phaseName(w.cellPhase), opKindName(w.cellKind), w.cellFactor, 100 * w.cellShare,
                phaseName(w.cellPhase), status.cellConsecutive);
  return "rank " + std::to_string(status.rank) + ": cell outlier " +
         (layer < layerNames.size() && !layerNames[layer].empty()
              ? layerNames[layer]
              : "layer " + std::to_string(w.cellLayer)) +
         buf;
}

std::string StragglerDetector::describe(const RankStatus& status,
                                        const std::vector<std::string>& layerNames) {
  char buf[256];
  const std::string head = "rank " + std::to_string(status.rank) + ": ";
  if (status.missing) {
    return head + "missing since round " + std::to_string(status.missingSinceRound);
  }
  if (status.hung) {
    std::snprintf(buf, sizeof(buf),
                  "step counter stalled at %llu for %.0fs while other ranks advance",
                  static_cast<unsigned long long>(status.lastStep), status.stalledSeconds);
    return head + buf;
  }
  std::snprintf(buf, sizeof(buf), "%.2fx the other ranks' median attention time for %d windows; ",
                status.score, status.consecutive);
  std::string out = head + buf;
  const RankWindow& w = status.window;
  if (w.topLayer < 0) return out + "no attribution yet";
  const size_t layer = static_cast<size_t>(w.topLayer);
  if (layer < layerNames.size() && !layerNames[layer].empty()) {
    out += layerNames[layer];
  } else {
    out += "layer " + std::to_string(w.topLayer);
  }
  out += " ";
  out += phaseName(w.topPhase);
  out += " ";
  out += opKindName(w.topKind);
  out += " is " + std::to_string(std::lround(w.topShare * 100)) + "% of the excess";
  return out;
}

}  // namespace attnscope
