#include "attnscope/core/Attribution.h"

namespace attnscope {

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
        const double own = pa->kinds[k]->seconds.sum() / static_cast<double>(mySampledSteps);
        const double mean = pc && pc->kinds[k]
                                ? pc->kinds[k]->seconds.sum() / static_cast<double>(clusterSampledSteps)
                                : 0.0;
        const double excess = own - mean;
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
