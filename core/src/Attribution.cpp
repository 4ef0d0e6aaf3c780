#include "attnscope/core/Attribution.h"

namespace attnscope {

double typicalSecondsPerStep(const CellStats& cell, uint64_t sampledSteps) {
  if (sampledSteps == 0) return 0;
  const LogHistogram& h = cell.seconds;
  return h.quantile(0.5) * static_cast<double>(h.count()) / static_cast<double>(sampledSteps);
}

Attribution attributeExcess(const StatsTable& mine, uint64_t mySampledSteps,
                            const StatsTable& cluster, uint64_t clusterSampledSteps) {
  Attribution best;
  if (mySampledSteps == 0 || clusterSampledSteps == 0) return best;
  const auto& a = mine.layers();
  const auto& c = cluster.layers();
  double total = 0, top = 0;
  for (size_t l = 0; l < a.size() && l < c.size(); ++l) {
    for (int p = 0; p < kNumPhases; ++p) {
      const PhaseStats* pa = a[l].phases[p].get();
      if (pa == nullptr) continue;
      const PhaseStats* pc = c[l].phases[p].get();
      for (int k = 0; k < kNumOpKinds; ++k) {
        if (!pa->kinds[k]) continue;
        const double own = typicalSecondsPerStep(*pa->kinds[k], mySampledSteps);
        const double typical =
            pc && pc->kinds[k] ? typicalSecondsPerStep(*pc->kinds[k], clusterSampledSteps) : 0.0;
        const double excess = own - typical;
        if (excess <= 0) continue;
        total += excess;
        if (excess > top) {
          top = excess;
          best.layer = static_cast<int32_t>(l);
          best.phase = static_cast<Phase>(p);
          best.kind = static_cast<OpKind>(k);
        }
      }
    }
  }
  if (best.layer >= 0) best.share = top / total;
  return best;
}

}  // namespace attnscope
