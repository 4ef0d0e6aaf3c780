#include "attnscope/core/Attribution.h"

namespace attnscope {

double typicalSecondsPerStep(const CellStats& cell, uint64_t sampledSteps) {
  if (sampledSteps == 0) return 0;
  const LogHistogram& h = cell.seconds;
  return h.quantile(0.5) * static_cast<double>(h.count()) / static_cast<double>(sampledSteps);
}

CellComparison compareCells(const StatsTable& mine, uint64_t mySampledSteps,
                            const StatsTable& others, uint64_t othersSampledSteps,
                            double outlierFactor, double outlierMinShare,
                            const CellOutlierCell& keep) {
  CellComparison out;
  if (mySampledSteps == 0 || othersSampledSteps == 0) return out;
  const auto& a = mine.layers();
  const auto& c = others.layers();
  double total = 0, top = 0, topOutlier = 0;
  CellOutlierCell keptOutlier;
  for (size_t l = 0; l < a.size() && l < c.size(); ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* pa = a[l].phases[p].get();
      if (pa == nullptr) continue;
      const PhaseStats* pc = c[l].phases[p].get();
      // This rank's time per step in the layer and phase: what an outlier's excess is a share of.
      const double layerPhase = typicalSecondsPerStep(pa->call, mySampledSteps);
      for (int k = 0; k < kNumOpKinds; ++k) {
        if (!pa->kinds[k]) continue;
        const double own = typicalSecondsPerStep(*pa->kinds[k], mySampledSteps);
        const double typical =
            pc && pc->kinds[k] ? typicalSecondsPerStep(*pc->kinds[k], othersSampledSteps) : 0.0;
        const double excess = own - typical;
        if (excess <= 0) continue;
        total += excess;
        if (excess > top) {
          top = excess;
          out.attribution.layer = static_cast<int32_t>(l);
          out.attribution.phase = static_cast<Phase>(p);
          out.attribution.kind = static_cast<OpKind>(k);
        }
        if (typical > 0 && own >= outlierFactor * typical && layerPhase > 0 &&
            excess >= outlierMinShare * layerPhase) {
          const CellOutlierCell cell{static_cast<int32_t>(l), static_cast<Phase>(p),
                                     static_cast<OpKind>(k), own / typical, excess / layerPhase};
          const bool kept =
              cell.layer == keep.layer && cell.phase == keep.phase && cell.kind == keep.kind;
          if (kept) {
            keptOutlier = cell;
          } else if (excess > topOutlier) {
            topOutlier = excess;
            out.outlier = cell;
          }
        }
      }
    }
  }
  if (keptOutlier.layer >= 0) out.outlier = keptOutlier;
  if (out.attribution.layer >= 0) out.attribution.share = top / total;
  return out;
}

}  // namespace attnscope
