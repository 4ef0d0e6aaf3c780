#include "attnscope/analysis/RunAnalysis.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <unordered_map>

#include "DetectorReplay.h"
#include "Median.h"
#include "RooflineAnalysis.h"
#include "attnscope/core/Attribution.h"
#include "attnscope/trace/TraceStore.h"

namespace attnscope {
namespace analysis {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kCells = 1 + kNumOpKinds;  // the whole call, then each op kind

using detail::median;

// Nearest-rank quantile of a sorted vector.
double quantileSorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return kNaN;
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, i == 0 ? 0 : i - 1)];
}

// One rank's steps, with every (layer, phase, cell) flattened to global layer indices.
struct RankSteps {
  int rank = -1;
  std::vector<double> endUnix;
  std::vector<uint64_t> step;
  std::vector<double> attention;  // seconds per step, all layers and phases
  // Per step: [slot * kCells + cell] seconds, slot = layer * kNumPhases + phase.
  std::vector<std::vector<float>> cells;
  // Per step: per slot (calls, peak bytes); calls 0 when the layer did not run.
  std::vector<std::vector<std::pair<uint32_t, int64_t>>> callsPeak;
};

int slotOf(int layer, Phase phase) { return layer * kNumPhases + static_cast<int>(phase); }

// The typical time per step of per-step figures: the live statistic (Typical::kFastHalfMean, the
// mean of the faster half) over exact values.
double typical(std::vector<double> v) { return lowerMean(std::move(v), kFastHalf); }

// A rank's typical attention time per step over the steps `idx`: per (layer, phase) the typical
// time per step, summed, as the live detector's (typical call x calls per step). A statistic of
// whole-step totals lets a preemption that lands in a different layer in each step raise every
// step; per layer, it stays the outlier it is.
double typicalAttention(const RankSteps& r, const std::vector<size_t>& idx, int numSlots) {
  if (idx.empty()) return kNaN;
  double sum = 0;
  std::vector<double> v(idx.size());
  for (int slot = 0; slot < numSlots; ++slot) {
    for (size_t j = 0; j < idx.size(); ++j)
      v[j] = r.cells[idx[j]][static_cast<size_t>(slot) * kCells];
    sum += typical(v);
  }
  return sum;
}

// Cell outliers of a run without live rounds (no aggregation): per (rank, layer, phase, op kind),
// the rank's typical time per step over the median of the other ranks' typical times. Runs after
// the episodes (it marks the straggler ranks).
void findCellOutliers(const std::vector<RankSteps>& ranks, int numSlots,
                      const AnalysisOptions& options, Analysis* a) {
  std::vector<const RankSteps*> sampled;
  for (const RankSteps& r : ranks) {
    if (!r.cells.empty()) sampled.push_back(&r);
  }
  if (sampled.size() < 2) return;
  const size_t numCells = static_cast<size_t>(numSlots) * kCells;
  // medians[i][c]: rank i's median per step of cell c.
  std::vector<std::vector<double>> medians(sampled.size(), std::vector<double>(numCells, 0.0));
  for (size_t i = 0; i < sampled.size(); ++i) {
    const RankSteps& r = *sampled[i];
    std::vector<double> v(r.cells.size());
    for (size_t c = 0; c < numCells; ++c) {
      for (size_t s = 0; s < r.cells.size(); ++s) v[s] = r.cells[s][c];
      medians[i][c] = typical(v);
    }
  }
  std::vector<CellOutlier> found;
  for (size_t i = 0; i < sampled.size(); ++i) {
    const RankSteps& r = *sampled[i];
    bool straggler = false;
    for (const StragglerEpisode& e : a->stragglers) straggler = straggler || e.rank == r.rank;
    for (size_t c = 0; c < numCells; ++c) {
      if (c % kCells == 0) continue;
      std::vector<double> others;
      for (size_t o = 0; o < sampled.size(); ++o) {
        if (o != i) others.push_back(medians[o][c]);
      }
      // What the excess is a share of: the rank's median time per step in the layer and phase.
      const double layerPhase = medians[i][c - c % kCells];
      const double mine = medians[i][c], theirs = median(others);
      if (!(theirs > 0) || !(layerPhase > 0) || mine < options.cellFactor * theirs ||
          mine - theirs < options.cellMinShare * layerPhase) {
        continue;
      }
      CellOutlier out;
      out.rank = r.rank;
      const int slot = static_cast<int>(c / kCells);
      out.layer = a->layerNames[static_cast<size_t>(slot / kNumPhases)];
      out.phase = static_cast<Phase>(slot % kNumPhases);
      out.kind = static_cast<OpKind>(c % kCells - 1);
      out.secondsPerStep = mine;
      out.othersSecondsPerStep = theirs;
      out.othersMinSecondsPerStep = *std::min_element(others.begin(), others.end());
      out.othersMaxSecondsPerStep = *std::max_element(others.begin(), others.end());
      out.factor = mine / theirs;
      out.excessShare = (mine - theirs) / layerPhase;
      out.steps = r.cells.size();
      for (const std::vector<float>& step : r.cells) {
        if (step[c] > options.cellFactor * theirs) ++out.stepsAbove;
      }
      out.otherRanks = static_cast<int>(others.size());
      out.rankIsStraggler = straggler;
      found.push_back(std::move(out));
    }
  }
  std::sort(found.begin(), found.end(), [](const CellOutlier& x, const CellOutlier& y) {
    return x.secondsPerStep - x.othersSecondsPerStep > y.secondsPerStep - y.othersSecondsPerStep;
  });
  a->cellOutliersFound = found.size();
  if (found.size() > Analysis::kMaxCellOutliers) found.resize(Analysis::kMaxCellOutliers);
  a->cellOutliers = std::move(found);
}

// Straggler episodes of a trace without windows: runs of time bins above the threshold (bins
// without steps of the rank neither extend nor break a run).
std::vector<StragglerEpisode> binnedEpisodes(const Analysis& a, const std::vector<RankSteps>& ranks,
                                             const std::map<int, size_t>& rowOf,
                                             const AnalysisOptions& options, int bins) {
  std::vector<StragglerEpisode> episodes;
  const int minBins = std::max(1, std::min(options.minBins, bins));
  for (const RankSteps& r : ranks) {
    const size_t row = rowOf.at(r.rank);
    const std::vector<double>& score = a.binScore[row];
    int first = -1, last = -1, count = 0;
    double maxScore = 0, sum = 0;
    const auto close = [&] {
      if (count >= minBins) {
        StragglerEpisode e;
        e.rank = r.rank;
        e.firstBin = first;
        e.lastBin = last;
        e.startUnix = a.startUnix + first * a.binSeconds;
        e.endUnix = a.startUnix + (last + 1) * a.binSeconds;
        e.maxScore = maxScore;
        e.meanScore = sum / count;
        e.slowBins = count;
        episodes.push_back(e);
      }
      first = last = -1;
      count = 0;
      maxScore = sum = 0;
    };
    for (int b = 0; b < bins; ++b) {
      if (std::isnan(score[b])) continue;
      if (score[b] > options.threshold) {
        if (first < 0) first = b;
        last = b;
        ++count;
        maxScore = std::max(maxScore, score[b]);
        sum += score[b];
      } else {
        close();
      }
    }
    close();
  }

  // Episodes of one rank less than minBins bins apart are one episode (a short dip, a preempted
  // bin of the other ranks).
  {
    std::vector<StragglerEpisode> merged;
    for (const StragglerEpisode& e : episodes) {  // in rank, then time order
      StragglerEpisode* last = merged.empty() ? nullptr : &merged.back();
      if (last != nullptr && last->rank == e.rank && e.firstBin - last->lastBin - 1 < minBins) {
        last->meanScore = (last->meanScore * last->slowBins + e.meanScore * e.slowBins) /
                          (last->slowBins + e.slowBins);
        last->slowBins += e.slowBins;
        last->maxScore = std::max(last->maxScore, e.maxScore);
        last->lastBin = e.lastBin;
        last->endUnix = e.endUnix;
      } else {
        merged.push_back(e);
      }
    }
    episodes.swap(merged);
  }
  return episodes;
}

// The round (0-based) of the first of the `windows` consecutive windows that opened an episode.
size_t firstSlowRound(const DetectorEpisode& f, const AnalysisOptions& options) {
  const uint64_t back = static_cast<uint64_t>(std::max(1, options.minBins)) - 1;
  return static_cast<size_t>(f.firstRound - 1 >= back ? f.firstRound - 1 - back : 0);
}

// Straggler episodes as the replayed detector found them, with each episode's scores over its
// rounds (maximum, mean, rounds above the threshold).
template <typename BinOf>
std::vector<StragglerEpisode> replayedEpisodes(const detail::Replay& replay,
                                               const AnalysisOptions& options, const BinOf& binOf) {
  std::vector<StragglerEpisode> episodes;
  for (const DetectorEpisode& f : replay.stragglers) {
    StragglerEpisode e;
    e.rank = f.rank;
    // From the first of the windows above the threshold that made the rank a straggler.
    const size_t k1 = f.lastRound - 1, k0 = firstSlowRound(f, options);
    e.startUnix = replay.startUnix[k0];
    e.endUnix = replay.endUnix[k1];
    e.firstBin = binOf(e.startUnix);
    e.lastBin = binOf(e.endUnix);
    double sum = 0;
    int scored = 0;
    for (size_t k = k0; k <= k1; ++k) {
      const double x = replay.score[k][static_cast<size_t>(f.rank)];
      if (std::isnan(x)) continue;
      e.maxScore = std::max(e.maxScore, x);
      sum += x;
      ++scored;
      if (x > options.threshold) ++e.slowBins;
    }
    e.meanScore = scored > 0 ? sum / scored : 0;
    episodes.push_back(e);
  }
  return episodes;
}

// Cell outliers as the replayed detector found them. Each episode's evidence comes from the steps
// in its span: the rank's typical time per step in the cell, the other ranks' (median, least and
// most) and the steps above cellFactor x the others' median. Sorted by evidence: the longest
// episodes first, then the largest excess.
void replayedCellOutliers(const detail::Replay& replay, const std::vector<RankSteps>& ranks,
                          const std::unordered_map<std::string, int>& layerIndex,
                          const AnalysisOptions& options, Analysis* a) {
  std::vector<CellOutlier> found;
  for (const DetectorEpisode& f : replay.cellOutliers) {
    const auto layer = layerIndex.find(f.layer);
    // The live thresholds applied during the job; the report's can only be stricter.
    if (layer == layerIndex.end() || f.maxScore < options.cellFactor ||
        f.share < options.cellMinShare) {
      continue;
    }
    CellOutlier out;
    out.rank = f.rank;
    out.layer = f.layer;
    out.phase = f.phase;
    out.kind = f.kind;
    out.maxFactor = f.maxScore;
    out.excessShare = f.share;
    const size_t k0 = firstSlowRound(f, options), k1 = f.lastRound - 1,
                 r = static_cast<size_t>(f.rank);
    out.windows = static_cast<int>(k1 - k0 + 1);
    out.startUnix = replay.startUnix[k0];
    out.endUnix = replay.endUnix[k1];
    std::vector<double> factors;
    for (size_t k = k0; k <= k1; ++k) {
      if (replay.cellLayer[k][r] == layer->second &&
          replay.cellPhase[k][r] == static_cast<uint8_t>(f.phase) &&
          replay.cellKind[k][r] == static_cast<uint8_t>(f.kind)) {
        factors.push_back(replay.cellFactor[k][r]);
      }
    }
    out.factor = factors.empty() ? f.maxScore : median(factors);
    for (const StragglerEpisode& e : a->stragglers) {
      out.rankIsStraggler = out.rankIsStraggler || e.rank == f.rank;
    }
    const size_t c = static_cast<size_t>(slotOf(layer->second, f.phase)) * kCells + 1 +
                     static_cast<size_t>(f.kind);
    std::vector<double> others;
    const RankSteps* mine = nullptr;
    for (const RankSteps& rs : ranks) {
      std::vector<double> v;
      for (size_t i = 0; i < rs.cells.size(); ++i) {
        if (rs.endUnix[i] > out.startUnix && rs.endUnix[i] <= out.endUnix + 1e-9 &&
            c < rs.cells[i].size()) {
          v.push_back(rs.cells[i][c]);
        }
      }
      if (v.empty()) continue;
      if (rs.rank == f.rank) {
        mine = &rs;
        out.secondsPerStep = typical(std::move(v));
      } else {
        others.push_back(typical(std::move(v)));
      }
    }
    if (!others.empty()) {
      out.othersSecondsPerStep = median(others);
      out.othersMinSecondsPerStep = *std::min_element(others.begin(), others.end());
      out.othersMaxSecondsPerStep = *std::max_element(others.begin(), others.end());
      out.otherRanks = static_cast<int>(others.size());
    }
    if (mine != nullptr) {
      for (size_t i = 0; i < mine->cells.size(); ++i) {
        if (mine->endUnix[i] <= out.startUnix || mine->endUnix[i] > out.endUnix + 1e-9) continue;
        ++out.steps;
        if (mine->cells[i][c] > options.cellFactor * out.othersSecondsPerStep) ++out.stepsAbove;
      }
    }
    found.push_back(std::move(out));
  }
  std::sort(found.begin(), found.end(), [](const CellOutlier& x, const CellOutlier& y) {
    if (x.windows != y.windows) return x.windows > y.windows;
    return x.secondsPerStep - x.othersSecondsPerStep > y.secondsPerStep - y.othersSecondsPerStep;
  });
  a->cellOutliersFound = found.size();
  if (found.size() > Analysis::kMaxCellOutliers) found.resize(Analysis::kMaxCellOutliers);
  a->cellOutliers = std::move(found);
}

// What the stages below share: the ranks' files by rank, the merged layer names, and every
// rank's steps flattened to those names.
struct RunInput {
  std::map<int, const RankTrace*> byRank;
  std::map<int, const SkippedFile*> skippedByRank;
  std::unordered_map<std::string, int> layerIndex;
  std::vector<RankSteps> ranks;
  std::map<int, size_t> rowOf;  // rank -> index in Analysis::ranks
  int numLayers = 0;
  int numSlots = 0;
  const RankTrace* rank0() const {
    const auto it = byRank.find(0);
    return it == byRank.end() ? nullptr : it->second;
  }
};

// Ranks: every rank of the largest world any file names, plus ranks of skipped file names.
void gatherRanks(const std::vector<RankTrace>& traces, const std::vector<SkippedFile>& skipped,
                 RunInput* in, Analysis* a) {
  for (const RankTrace& t : traces) {
    in->byRank[t.rank] = &t;
    a->worldSize = std::max({a->worldSize, t.worldSize, t.rank + 1});
  }
  for (const SkippedFile& s : skipped) {
    const size_t slash = s.path.rfind('/');
    const std::string name = slash == std::string::npos ? s.path : s.path.substr(slash + 1);
    if (name.rfind("rank-", 0) == 0) {
      char* end = nullptr;
      const long r = std::strtol(name.c_str() + 5, &end, 10);
      if (end != name.c_str() + 5 && r >= 0 && r < (1 << 24) && std::string(end) == ".sqlite") {
        in->skippedByRank[static_cast<int>(r)] = &s;
        a->worldSize = std::max(a->worldSize, static_cast<int>(r) + 1);
      }
    }
  }
}

// Global layer names, in first-seen order; steps may name layers the layer table lacks (a file
// cut before its layers row).
void mergeLayerNames(RunInput* in, Analysis* a) {
  const auto add = [&](const std::string& name) {
    if (in->layerIndex.emplace(name, static_cast<int>(a->layerNames.size())).second)
      a->layerNames.push_back(name);
  };
  for (const auto& [rank, t] : in->byRank) {
    for (const std::string& name : t->layers) {
      if (!name.empty()) add(name);
    }
  }
  for (const auto& [rank, t] : in->byRank) {
    for (const TraceStep& s : t->steps) {
      for (const TraceCall& c : s.calls) add(t->layerName(c.layer));
    }
  }
  in->numLayers = static_cast<int>(a->layerNames.size());
  in->numSlots = in->numLayers * kNumPhases;
}

// Each rank's steps, flattened; the run's start and end.
void flattenSteps(RunInput* in, Analysis* a) {
  a->startUnix = std::numeric_limits<double>::infinity();
  a->endUnix = -std::numeric_limits<double>::infinity();
  for (const auto& [rank, t] : in->byRank) {
    RankSteps r;
    r.rank = rank;
    for (const TraceStep& s : t->steps) {
      std::vector<float> cells(static_cast<size_t>(in->numSlots) * kCells, 0.0f);
      std::vector<std::pair<uint32_t, int64_t>> cp(in->numSlots, {0, 0});
      double total = 0;
      for (const TraceCall& c : s.calls) {
        const int layer = in->layerIndex.at(t->layerName(c.layer));
        const int slot = slotOf(layer, c.phase);
        float* cell = &cells[static_cast<size_t>(slot) * kCells];
        cell[0] += static_cast<float>(c.ns * 1e-9);
        for (int k = 0; k < kNumOpKinds; ++k)
          cell[1 + k] += static_cast<float>(c.kinds[k].ns * 1e-9);
        cp[slot].first += c.calls;
        cp[slot].second = std::max(cp[slot].second, c.peak);
        total += c.ns * 1e-9;
      }
      r.endUnix.push_back(s.endUnix);
      r.step.push_back(s.step);
      r.attention.push_back(total);
      r.cells.push_back(std::move(cells));
      r.callsPeak.push_back(std::move(cp));
      a->startUnix = std::min(a->startUnix, s.endUnix - s.stepNs * 1e-9);
      a->endUnix = std::max(a->endUnix, s.endUnix);
    }
    a->totalSteps += t->steps.size();
    in->ranks.push_back(std::move(r));
  }
  if (!(a->startUnix < a->endUnix)) {
    a->startUnix = a->endUnix = 0;
    for (const auto& [rank, t] : in->byRank)
      a->startUnix = a->endUnix = std::max(a->endUnix, t->startUnix);
  }
}

// One row per rank of the world: its file, node, steps and how it ended.
void rankRows(RunInput* in, Analysis* a) {
  for (int r = 0; r < a->worldSize; ++r) {
    RankRow row;
    row.rank = r;
    row.file = TraceStore::fileName(r);
    if (auto it = in->byRank.find(r); it != in->byRank.end()) {
      const RankTrace& t = *it->second;
      row.file = t.path;
      row.node = t.node;
      row.steps = t.steps.size();
      row.badSteps = t.badSteps;
      if (t.badSteps > 0) {
        row.reason = std::to_string(t.badSteps) +
                     " step records did not decode and were left out (" + t.firstBadStep + ")";
      }
      if (!t.steps.empty()) {
        row.firstStep = t.steps.front().step;
        row.lastStep = t.steps.back().step;
        row.firstUnix = t.steps.front().endUnix;
        row.lastUnix = t.steps.back().endUnix;
      }
      const double margin = std::max(2.0 * t.intervalSeconds, 0.05 * (a->endUnix - a->startUnix));
      if (t.stopUnix <= 0 && (t.steps.empty() || row.lastUnix < a->endUnix - margin)) {
        row.status = RankOutcome::kStoppedEarly;
        char buf[160];
        std::snprintf(buf, sizeof(buf),
                      "no clean stop; last step %llu at +%.1f s, the run goes on to +%.1f s",
                      static_cast<unsigned long long>(row.lastStep), row.lastUnix - a->startUnix,
                      a->endUnix - a->startUnix);
        row.reason = row.reason.empty() ? buf : std::string(buf) + "; " + row.reason;
      }
    } else if (auto s = in->skippedByRank.find(r); s != in->skippedByRank.end()) {
      row.status = RankOutcome::kSkipped;
      row.file = s->second->path;
      row.reason = s->second->reason;
      a->missingRanks.push_back(r);
    } else {
      row.status = RankOutcome::kMissing;
      row.reason = "no file " + TraceStore::fileName(r) + " in the trace directory";
      a->missingRanks.push_back(r);
    }
    in->rowOf[r] = a->ranks.size();
    a->ranks.push_back(row);
  }
}

// Each rank's typical forward and backward time per step, and its score over the whole run: the
// live detector's definition (StragglerDetector), over the others' median; alone, 1.
void rankFigures(const RunInput* in, Analysis* a) {
  for (const RankSteps& r : in->ranks) {
    RankRow& row = a->ranks[in->rowOf.at(r.rank)];
    std::vector<double> fwd, bwd;
    for (size_t i = 0; i < r.cells.size(); ++i) {
      double f = 0, b = 0;
      for (int l = 0; l < in->numLayers; ++l) {
        for (int p = 0; p < kNumPhases; ++p) {
          const double s = r.cells[i][static_cast<size_t>(l * kNumPhases + p) * kCells];
          (p == static_cast<int>(Phase::kBackward) ? b : f) += s;
        }
      }
      fwd.push_back(f);
      bwd.push_back(b);
    }
    row.forwardSeconds = fwd.empty() ? 0 : typical(fwd);
    row.backwardSeconds = bwd.empty() ? 0 : typical(bwd);
  }
  std::vector<double> rankTypical(in->ranks.size(), kNaN);  // per rank: over all its steps
  for (size_t i = 0; i < in->ranks.size(); ++i) {
    std::vector<size_t> all(in->ranks[i].cells.size());
    for (size_t s = 0; s < all.size(); ++s) all[s] = s;
    rankTypical[i] = typicalAttention(in->ranks[i], all, in->numSlots);
  }
  for (size_t i = 0; i < in->ranks.size(); ++i) {
    const RankSteps& r = in->ranks[i];
    if (r.attention.empty()) continue;
    std::vector<double> others;
    for (size_t o = 0; o < in->ranks.size(); ++o) {
      if (o != i && !in->ranks[o].attention.empty()) others.push_back(rankTypical[o]);
    }
    // The live detector's definition (StragglerDetector): over the others' median; alone, 1.
    const double m = median(others);
    double& score = a->ranks[in->rowOf.at(r.rank)].score;
    if (others.empty()) {
      score = 1.0;
    } else if (m > 0) {
      score = rankTypical[i] / m;
    }
  }
}

// The detection options the report was not given: the run's own, what its live detector applied
// (the config of the lowest rank whose file has one, rank 0 unless its file is lost; Config's
// defaults where no file has a value in range). Replayed at other options, the report would name
// other stragglers and cells than the job did.
void runOptions(const RunInput& in, AnalysisOptions* options) {
  const Config defaults;
  const auto own = [&](const char* key, double lo, double hi, double fallback) {
    for (const auto& [rank, t] : in.byRank) {
      const double v = detail::runConfigNumber(t, key);
      if (!std::isnan(v)) return v >= lo && v <= hi ? v : fallback;
    }
    return fallback;
  };
  if (!(options->threshold > 0))
    options->threshold = own("straggler_threshold", 1.01, 100, defaults.stragglerThreshold);
  if (options->minBins <= 0) {
    options->minBins = static_cast<int>(
        own("straggler_windows", 1, 1000, static_cast<double>(defaults.stragglerWindows)));
  }
  if (!(options->cellFactor > 0))
    options->cellFactor = own("cell_outlier_factor", 1.01, 100, defaults.cellOutlierFactor);
  if (!(options->cellMinShare >= 0))
    options->cellMinShare = own("cell_outlier_min_share", 0, 1, defaults.cellOutlierMinShare);
}

// The live detector, replayed from the windows every rank recorded: where the files have them,
// the scores, straggler episodes and cell outliers are the live ones by construction.
detail::Replay replayLive(const RunInput& in, const AnalysisOptions* options, Analysis* a) {
  detail::Replay replay = detail::replayDetector(
      in.byRank, a->worldSize, a->layerNames, in.layerIndex,
      detail::replayOptions(in.rank0(), options->threshold, options->minBins));
  a->detection = replay.done ? "live_rounds" : "steps";
  a->rounds = replay.intervals.size();
  if (replay.done) {
    for (RankRow& row : a->ranks) {
      std::vector<double> scores;
      for (const std::vector<double>& round : replay.score) {
        if (static_cast<size_t>(row.rank) < round.size() && !std::isnan(round[row.rank]))
          scores.push_back(round[row.rank]);
      }
      // The median over the rounds that scored the rank (rounds of start-up and the short last
      // window do not move it).
      if (!scores.empty()) row.score = median(scores);
    }
  }
  return replay;
}

// Time bins across the run.
struct Bins {
  int count = 1;
  double start = 0, width = 1;
  int operator()(double t) const {
    return std::clamp(static_cast<int>((t - start) / width), 0, count - 1);
  }
};

// Each rank's typical attention time and score per bin: its time over the median of the other
// ranks with steps in the bin (with two ranks, the median of both would halve any difference).
Bins timeline(const RunInput& in, const AnalysisOptions& options, Analysis* a) {
  const double duration = a->endUnix - a->startUnix;
  Bins bins;
  bins.count = options.bins > 0
                   ? options.bins
                   : static_cast<int>(std::clamp(std::lround(duration / 2.0), 12L, 60L));
  if (duration <= 0) bins.count = 1;
  a->binSeconds = duration > 0 ? duration / bins.count : 1.0;
  bins.start = a->startUnix;
  bins.width = a->binSeconds;
  a->binAttentionSeconds.assign(a->ranks.size(), std::vector<double>(bins.count, kNaN));
  a->binScore.assign(a->ranks.size(), std::vector<double>(bins.count, kNaN));
  for (const RankSteps& r : in.ranks) {
    std::vector<std::vector<size_t>> perBin(bins.count);
    for (size_t i = 0; i < r.attention.size(); ++i) perBin[bins(r.endUnix[i])].push_back(i);
    for (int b = 0; b < bins.count; ++b)
      a->binAttentionSeconds[in.rowOf.at(r.rank)][b] = typicalAttention(r, perBin[b], in.numSlots);
  }
  for (int b = 0; b < bins.count; ++b) {
    for (size_t r = 0; r < a->ranks.size(); ++r) {
      const double mine = a->binAttentionSeconds[r][b];
      if (std::isnan(mine)) continue;
      std::vector<double> others;
      for (size_t o = 0; o < a->ranks.size(); ++o) {
        if (o != r && !std::isnan(a->binAttentionSeconds[o][b]))
          others.push_back(a->binAttentionSeconds[o][b]);
      }
      const double m = median(others);
      if (!others.empty() && m > 0)
        a->binScore[r][b] = mine / m;  // alone: nobody to be slower than
    }
  }
  return bins;
}

// A straggler episode's cells over its span: the rank's typical time per step in each (layer,
// phase, cell) slot and each other rank's.
struct EpisodeCells {
  std::vector<double> mine;                 // by slot
  std::vector<std::vector<double>> others;  // by slot, one per other rank with steps in the span
  // The rank's excess over the other ranks' median in the slot; 0 when no other rank had steps.
  double excess(size_t c) const { return others[c].empty() ? 0 : mine[c] - median(others[c]); }
};

// Gathers the episode's cells, and sets its first and last steps and its excess per step.
EpisodeCells episodeCells(const RunInput& in, StragglerEpisode* e) {
  const auto inSpan = [&](const RankSteps& r, size_t i) {
    return r.endUnix[i] > e->startUnix && r.endUnix[i] <= e->endUnix + 1e-9;
  };
  EpisodeCells cells;
  cells.mine.assign(static_cast<size_t>(in.numSlots) * kCells, 0.0);
  cells.others.resize(cells.mine.size());
  std::vector<double> otherTotals;
  double myTotal = 0;
  bool firstStep = true;
  for (const RankSteps& r : in.ranks) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < r.cells.size(); ++i) {
      if (inSpan(r, i)) idx.push_back(i);
    }
    if (idx.empty()) continue;
    std::vector<double> totals;
    for (size_t i : idx) totals.push_back(r.attention[i]);
    for (size_t c = 0; c < cells.mine.size(); ++c) {
      std::vector<double> v;
      v.reserve(idx.size());
      for (size_t i : idx) v.push_back(r.cells[i][c]);
      const double m = typical(std::move(v));
      if (r.rank == e->rank) {
        cells.mine[c] = m;
      } else {
        cells.others[c].push_back(m);
      }
    }
    if (r.rank == e->rank) {
      myTotal = typical(totals);
      for (size_t i : idx) {
        if (firstStep) e->firstStep = r.step[i];
        firstStep = false;
        e->lastStep = r.step[i];
      }
    } else {
      otherTotals.push_back(typical(totals));
    }
  }
  e->excessSecondsPerStep = otherTotals.empty() ? 0 : myTotal - median(otherTotals);
  return cells;
}

// The layer with the largest positive excess (its share of the summed excess), and within it the
// phase and op kind with the largest (its share of every op kind's positive excess).
void attributeEpisode(const EpisodeCells& cells, const RunInput& in,
                      const std::vector<std::string>& layerNames, StragglerEpisode* e) {
  std::vector<double> layerExcess(in.numLayers, 0.0);
  double layerSum = 0, kindSum = 0;
  for (int l = 0; l < in.numLayers; ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const size_t c = static_cast<size_t>(l * kNumPhases + p) * kCells;
      layerExcess[l] += std::max(0.0, cells.excess(c));
      for (int k = 1; k < kCells; ++k) kindSum += std::max(0.0, cells.excess(c + k));
    }
    layerSum += layerExcess[l];
  }
  if (layerSum <= 0) return;
  const int top = static_cast<int>(std::max_element(layerExcess.begin(), layerExcess.end()) -
                                   layerExcess.begin());
  e->layer = layerNames[top];
  e->layerShare = layerExcess[top] / layerSum;
  double best = -1;
  for (int p = 0; p < kNumPhases; ++p) {
    const size_t c = static_cast<size_t>(top * kNumPhases + p) * kCells;
    for (int k = 1; k < kCells; ++k) {
      const double y = cells.excess(c + k);
      if (y > best) {
        best = y;
        e->phase = static_cast<Phase>(p);
        e->kind = static_cast<OpKind>(k - 1);
      }
    }
  }
  e->kindShare = kindSum > 0 && best > 0 ? best / kindSum : 0;
}

// Attribution of each straggler episode: per (layer, phase, cell), the rank's typical time per
// step in the episode against the median over the other ranks of theirs. Strongest first.
void attributeEpisodes(const RunInput& in, Analysis* a) {
  for (StragglerEpisode& e : a->stragglers) {
    attributeEpisode(episodeCells(in, &e), in, a->layerNames, &e);
  }
  std::sort(
      a->stragglers.begin(), a->stragglers.end(),
      [](const StragglerEpisode& x, const StragglerEpisode& y) { return x.maxScore > y.maxScore; });
}

// The per-layer table (per-call p50/p99 over every rank, each rank's typical time per step and
// peak bytes) and the memory outliers among the ranks' peaks.
void layerTable(const RunInput& in, const AnalysisOptions& options, Analysis* a) {
  for (int l = 0; l < in.numLayers; ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const int slot = l * kNumPhases + p;
      LayerPhaseRow row;
      row.layer = a->layerNames[l];
      row.phase = static_cast<Phase>(p);
      row.rankP50Seconds.assign(a->ranks.size(), kNaN);
      row.rankSecondsPerStep.assign(a->ranks.size(), kNaN);
      row.rankPeakBytes.assign(a->ranks.size(), -1);
      std::vector<double> all, peaks;
      for (const RankSteps& r : in.ranks) {
        std::vector<double> perCall, perStep, peak;
        for (size_t i = 0; i < r.cells.size(); ++i) {
          const auto [calls, pk] = r.callsPeak[i][slot];
          if (calls == 0) continue;
          const double s = r.cells[i][static_cast<size_t>(slot) * kCells];
          perCall.push_back(s / calls);
          perStep.push_back(s);
          peak.push_back(static_cast<double>(pk));
          row.calls += calls;
        }
        if (perCall.empty()) continue;
        const size_t ri = in.rowOf.at(r.rank);
        row.rankP50Seconds[ri] = median(perCall);
        row.rankSecondsPerStep[ri] = median(perStep);
        row.rankPeakBytes[ri] = static_cast<int64_t>(median(peak));
        peaks.push_back(static_cast<double>(row.rankPeakBytes[ri]));
        row.maxPeakBytes = std::max(
            row.maxPeakBytes, static_cast<int64_t>(*std::max_element(peak.begin(), peak.end())));
        all.insert(all.end(), perCall.begin(), perCall.end());
      }
      if (all.empty()) continue;
      std::sort(all.begin(), all.end());
      row.p50Seconds = quantileSorted(all, 0.5);
      row.p99Seconds = quantileSorted(all, 0.99);
      row.medianPeakBytes = static_cast<int64_t>(median(peaks));
      if (peaks.size() >= 2) {
        for (size_t ri = 0; ri < a->ranks.size(); ++ri) {
          const int64_t pk = row.rankPeakBytes[ri];
          if (pk < 0) continue;
          if (pk > options.memoryFactor * row.medianPeakBytes &&
              pk - row.medianPeakBytes >= options.minOutlierBytes) {
            MemoryOutlier o;
            o.rank = a->ranks[ri].rank;
            o.layer = row.layer;
            o.phase = row.phase;
            o.peakBytes = pk;
            o.medianPeakBytes = row.medianPeakBytes;
            o.ratio =
                row.medianPeakBytes > 0 ? static_cast<double>(pk) / row.medianPeakBytes : kNaN;
            a->memoryOutliers.push_back(o);
          }
        }
      }
      a->layers.push_back(std::move(row));
    }
  }
}

}  // namespace

const char* rankOutcomeName(RankOutcome s) {
  switch (s) {
    case RankOutcome::kOk:
      return "ok";
    case RankOutcome::kStoppedEarly:
      return "stopped_early";
    case RankOutcome::kSkipped:
      return "skipped";
    case RankOutcome::kMissing:
      return "missing";
  }
  return "?";
}

Analysis analyzeRun(const std::string& traceDir, const std::vector<RankTrace>& traces,
                    const std::vector<SkippedFile>& skipped, const AnalysisOptions& given) {
  AnalysisOptions options = given;
  Analysis a;
  a.traceDir = traceDir;
  a.skipped = skipped;
  RunInput in;
  gatherRanks(traces, skipped, &in, &a);
  runOptions(in, &options);
  a.threshold = options.threshold;
  mergeLayerNames(&in, &a);
  flattenSteps(&in, &a);
  rankRows(&in, &a);
  rankFigures(&in, &a);
  const detail::Replay replay = replayLive(in, &options, &a);
  const Bins bins = timeline(in, options, &a);
  a.stragglers = replay.done ? replayedEpisodes(replay, options, bins)
                             : binnedEpisodes(a, in.ranks, in.rowOf, options, bins.count);
  attributeEpisodes(in, &a);
  // A job that aggregated compared cells live (rank 0's rounds, or a window naming a cell): the
  // replay's cell outliers are the live ones. Without aggregation, from the steps.
  if (replay.done && (replay.cells || (in.rank0() != nullptr && !in.rank0()->rounds.empty()))) {
    replayedCellOutliers(replay, in.ranks, in.layerIndex, options, &a);
  } else {
    findCellOutliers(in.ranks, in.numSlots, options, &a);
  }
  layerTable(in, options, &a);
  for (const auto& [rank, t] : in.byRank) {
    a.liveFindings.insert(a.liveFindings.end(), t->findings.begin(), t->findings.end());
    a.liveRounds.insert(a.liveRounds.end(), t->rounds.begin(), t->rounds.end());
  }
  detail::analyzeRoofline(in.byRank, options, &a);
  return a;
}

}  // namespace analysis
}  // namespace attnscope
