#include "attnscope/core/Attribution.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnscope {

Estimate lowerMeanEstimate(const LogHistogram& h, double fraction) {
  const uint64_t n = h.count();
  if (n == 0) return {};
  const double p = std::clamp(fraction, 0.0, 1.0);
  const double want = std::max(1.0, p * static_cast<double>(n));
  // Each value read back as its bucket's middle is off by up to kRelativeError either way:
  // uniform, a variance of (kRelativeError x)^2 / 3 per value.
  constexpr double kBucketVariance =
      LogHistogram::kRelativeError * LogHistogram::kRelativeError / 3;
  double taken = 0, sum = 0, sumSquares = 0, cut = 0;
  double allSum = 0, allSquares = 0;  // every call, for few calls
  for (int i = 0; i < LogHistogram::kNumBuckets; ++i) {
    const uint64_t count = h.buckets()[i];
    if (count == 0) continue;
    const double mid = std::clamp(
        std::sqrt(LogHistogram::bucketLower(i) * LogHistogram::bucketUpper(i)), h.min(), h.max());
    const double c = static_cast<double>(count);
    allSum += c * mid;
    allSquares += c * mid * mid;
    if (taken < want) {
      const double part = std::min(c, want - taken);
      sum += part * mid;
      sumSquares += part * mid * mid;
      taken += part;
      cut = mid;
    }
  }
  Estimate e;
  e.value = sum / taken;
  const double quantization = kBucketVariance * (sumSquares / taken) / taken;
  double sampling = 0;
  if (n >= kMinCallsForTrimmedError) {
    const double kept = taken / static_cast<double>(n);
    // S2 = mean of (x - cut)^2 over the kept values; D = their mean - cut.
    const double s2 = sumSquares / taken - 2 * cut * e.value + cut * cut;
    const double d = e.value - cut;
    sampling = std::max(0.0, (s2 - kept * d * d) / (static_cast<double>(n) * kept));
  } else if (n >= 2) {
    const double mean = allSum / static_cast<double>(n);
    const double variance =
        std::max(0.0, (allSquares - n * mean * mean) / static_cast<double>(n - 1));
    sampling = variance / static_cast<double>(n);
  }
  e.standardError = std::sqrt(sampling + quantization);
  return e;
}

double lowerMean(const LogHistogram& h, double fraction) {
  return lowerMeanEstimate(h, fraction).value;
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
      return lowerMean(calls, kFastHalf);
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

CellOutlierLimits cellOutlierLimits(const Config& config) {
  return {config.cellOutlierFactor, config.cellOutlierMinShare, config.cellOutlierSigmas};
}

namespace {

// A cell's typical time per sampled step with its standard error (kFastHalfMean only; the other
// statistics are there for comparison and carry none). Calls per step are counted, not estimated.
Estimate typicalPerStep(const CellStats& cell, uint64_t sampledSteps, Typical statistic) {
  if (sampledSteps == 0) return {};
  const LogHistogram& h = cell.seconds;
  const double callsPerStep = static_cast<double>(h.count()) / static_cast<double>(sampledSteps);
  if (statistic != Typical::kFastHalfMean) {
    return {typicalSecondsPerCall(h, statistic) * callsPerStep, 0};
  }
  const Estimate perCall = lowerMeanEstimate(h, kFastHalf);
  return {perCall.value * callsPerStep, perCall.standardError * callsPerStep};
}

}  // namespace

CellComparison compareCells(const StatsTable& mine, uint64_t mySampledSteps,
                            const StatsTable& others, uint64_t othersSampledSteps,
                            const CellOutlierLimits& limits, const CellOutlierCell& keep, bool held,
                            Typical statistic) {
  CellComparison out;
  const CellOutlierLimits keepLimits = held ? limits.exit() : limits;
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
        Estimate ownEstimate = typicalPerStep(*pa->kinds[k], mySampledSteps, statistic);
        const Estimate typicalEstimate =
            pc && pc->kinds[k] ? typicalPerStep(*pc->kinds[k], othersSampledSteps, statistic)
                               : Estimate{};
        const double own = ownEstimate.value, typical = typicalEstimate.value;
        // A window's own error rests on few calls and comes out low by chance (at 20 calls of the
        // example's spread, one window in ten reads it 38% low, one in four 25%); the others' calls
        // of the same cell show its relative spread far better. This rank's error is the larger of
        // the two readings, so that neither a lucky window nor a rank noisier than the rest passes.
        if (typical > 0 && own > 0) {
          const double myCalls = static_cast<double>(pa->kinds[k]->seconds.count());
          const double theirCalls = static_cast<double>(pc->kinds[k]->seconds.count());
          ownEstimate.standardError =
              std::max(ownEstimate.standardError, own * (typicalEstimate.standardError / typical) *
                                                      std::sqrt(theirCalls / myCalls));
        }
        const double excess = own - typical;
        if (excess <= 0) continue;
        total += excess;
        if (excess > top) {
          top = excess;
          out.attribution.layer = static_cast<int32_t>(l);
          out.attribution.phase = static_cast<Phase>(p);
          out.attribution.kind = static_cast<OpKind>(k);
        }
        // Standard error of the difference; 0 where not computed (then any excess is evidence).
        const double error = std::hypot(ownEstimate.standardError, typicalEstimate.standardError);
        const double sigmas = error > 0 ? excess / error : 0.0;
        const bool kept = static_cast<int32_t>(l) == keep.layer &&
                          static_cast<Phase>(p) == keep.phase &&
                          static_cast<OpKind>(k) == keep.kind;
        const CellOutlierLimits& bar = kept ? keepLimits : limits;
        if (typical > 0 && own >= bar.factor * typical && layerPhase > 0 &&
            excess >= bar.minShare * layerPhase && (error == 0 || sigmas >= bar.sigmas)) {
          const CellOutlierCell cell{static_cast<int32_t>(l), static_cast<Phase>(p),
                                     static_cast<OpKind>(k),  own / typical,
                                     excess / layerPhase,     sigmas};
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
