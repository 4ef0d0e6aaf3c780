#include "attnscope/core/Attribution.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnscope {

double lowerMean(const LogHistogram& h, double fraction) {
  if (h.count() == 0) return 0.0;
  const double want =
      std::max(1.0, std::clamp(fraction, 0.0, 1.0) * static_cast<double>(h.count()));
  double taken = 0, sum = 0;
  for (int i = 0; i < LogHistogram::kNumBuckets && taken < want; ++i) {
    const uint64_t n = h.buckets()[i];
    if (n == 0) continue;
    const double mid = std::clamp(
        std::sqrt(LogHistogram::bucketLower(i) * LogHistogram::bucketUpper(i)), h.min(), h.max());
    const double part = std::min(static_cast<double>(n), want - taken);
    sum += part * mid;
    taken += part;
  }
  return sum / taken;
}

double lowerMean(std::vector<double> values, double fraction) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double want =
      std::max(1.0, std::clamp(fraction, 0.0, 1.0) * static_cast<double>(values.size()));
  const size_t whole = static_cast<size_t>(want);
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (size_t i = 0; i < whole; ++i) sum += values[i];
  if (whole < values.size()) sum += (want - static_cast<double>(whole)) * values[whole];
  return sum / want;
}

double typicalSecondsPerCall(const LogHistogram& calls, Typical statistic) {
  switch (statistic) {
    case Typical::kFastHalfMean:
      return lowerMean(calls, 0.5);
    case Typical::kMedian:
      return calls.quantile(0.5);
    case Typical::kMean:
      return calls.mean();
  }
  return 0;
}

double typicalSecondsPerStep(const CellStats& cell, uint64_t sampledSteps, Typical statistic) {
  if (sampledSteps == 0) return 0;
  const LogHistogram& h = cell.seconds;
  return typicalSecondsPerCall(h, statistic) * static_cast<double>(h.count()) /
         static_cast<double>(sampledSteps);
}

CellComparison compareCells(const StatsTable& mine, uint64_t mySampledSteps,
                            const StatsTable& others, uint64_t othersSampledSteps,
                            double outlierFactor, double outlierMinShare,
                            const CellOutlierCell& keep, Typical statistic) {
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
      const double layerPhase = typicalSecondsPerStep(pa->call, mySampledSteps, statistic);
      for (int k = 0; k < kNumOpKinds; ++k) {
        if (!pa->kinds[k]) continue;
        const double own = typicalSecondsPerStep(*pa->kinds[k], mySampledSteps, statistic);
        const double typical =
            pc && pc->kinds[k] ? typicalSecondsPerStep(*pc->kinds[k], othersSampledSteps, statistic)
                               : 0.0;
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
