#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/core/Config.h"
#include "attnscope/core/Export.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// Which (layer, phase, op kind) cell accounts for most of a rank's excess attention time.
struct Attribution {
  int32_t layer = -1;  // -1: no excess anywhere
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  double share = 0;  // of the summed positive excess over all cells
};

// How a cell's typical time per call is read from its histogram. kFastHalfMean (the default):
// the mean of the faster half of the calls. Preemption, page faults and collector pauses only add
// time, and on a crowded host they hit a third to a half of the calls by 10-30x; the faster half
// leaves them out, while a cell slow in every call (a slower kernel, a throttled device, the kind
// of slowness that holds back synchronous training) moves it by its full factor. A median leaves
// them out too, but jumps from one mode to the other when about half of the calls are hit: two
// ranks preempted 45% and 55% of the time differ 3x by their medians (docs/AGGREGATION.md,
// bench/detection_bench). kMedian and kMean remain for that comparison.
enum class Typical { kFastHalfMean, kMedian, kMean };
// The share of the calls kFastHalfMean keeps: the live detector and the post-run report both read
// it from here.
constexpr double kFastHalf = 0.5;

// Mean of the smallest `fraction` (in (0, 1]) of a histogram's values, each read back as its
// bucket's geometric middle clamped to [min, max] (the bucket that straddles the cut counts in
// part); 0 when empty. Unlike a quantile it moves continuously as values cross the cut.
ATTNSCOPE_API double lowerMean(const LogHistogram& h, double fraction);

// An estimate and its standard error.
struct Estimate {
  double value = 0;
  double standardError = 0;
};
// lowerMean and its standard error: the asymptotic variance of a lower trimmed mean,
// (S2 - p D^2) / (n p), where p is the fraction kept, q the value at the cut, S2 the mean of
// (x - q)^2 over the kept values and D their mean less q; plus each value's uncertainty inside its
// bucket (uniform over +-kRelativeError). Below kMinCallsForTrimmedError calls the formula has
// too little to go on, and the standard error of the plain mean of all calls stands in (larger
// wherever calls spread, so a cell of few calls needs a larger difference). {0, 0} when empty.
constexpr uint64_t kMinCallsForTrimmedError = 8;
ATTNSCOPE_API Estimate lowerMeanEstimate(const LogHistogram& h, double fraction);
// The same over exact values (the post-run report's per-step figures); NaN when empty.
ATTNSCOPE_API double lowerMean(std::vector<double> values, double fraction);

// A cell's typical time per sampled step: its typical time per call x calls per step. The one
// statistic behind the live scores, the cell outliers and the post-run report.
ATTNSCOPE_API double typicalSecondsPerStep(const CellStats& cell, uint64_t sampledSteps,
                                           Typical statistic = Typical::kFastHalfMean);
ATTNSCOPE_API double typicalSecondsPerCall(const LogHistogram& calls,
                                           Typical statistic = Typical::kFastHalfMean);

// A cell far above the same cell on the other ranks: its factor and its excess as a share of
// the rank's time per step in the cell's layer and phase.
struct CellOutlierCell {
  int32_t layer = -1;  // -1: none
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  double factor = 0;
  double share = 0;
  double sigmas = 0;  // its excess in standard errors of the difference (0: not computed)
};

// What makes a cell an outlier (ATTNSCOPE_CELL_OUTLIER_FACTOR, _MIN_SHARE and _SIGMAS): at least
// `factor` x the other ranks' typical time, an excess of at least `minShare` of the rank's time in
// that layer and phase, and an excess of at least `sigmas` standard errors of the difference
// between the two typical times (the evidence: a window of few calls, or calls spread wide, needs
// a larger factor; a long window of steady calls can show a small one). sigmas applies to the
// default statistic (kFastHalfMean) only; 0 turns it off.
struct CellOutlierLimits {
  double factor = 1.1;
  double minShare = 0.02;
  double sigmas = 0;
  // What keeps a cell the detector already holds (CellHold): half the factor's excess over 1
  // (as the straggler exit threshold is by default), half the share and one standard error, or
  // less where the entry limits ask less. Entering still takes the full limits, `windows` times.
  CellOutlierLimits exit() const {
    return {1 + (factor - 1) / 2, minShare / 2, sigmas < 1 ? sigmas : 1.0};
  }
};
// The limits Config carries (ATTNSCOPE_CELL_OUTLIER_*).
ATTNSCOPE_API CellOutlierLimits cellOutlierLimits(const Config& config);

struct CellComparison {
  Attribution attribution;
  CellOutlierCell outlier;  // the outlier cell with the largest excess
};

// `mine`: this rank's window; `others`: the same window summed over the other ranks (same layer
// layout: the all-reduced sum less this rank's). Each cell's typical time per step on this rank is
// compared with the others' (from their merged histogram); the positive differences are the
// excess the attribution shares out. A cell within all of `limits` is an outlier. The outlier
// named is the one with the largest excess, unless `keep` (the cell named last window, or the
// one the detector holds: CellHold::keep) is still one: several slow cells of similar size then
// do not take turns, which would restart the detector's count of windows naming the same cell.
// A `held` keep needs only limits.exit().
ATTNSCOPE_API CellComparison compareCells(const StatsTable& mine, uint64_t mySampledSteps,
                                          const StatsTable& others, uint64_t othersSampledSteps,
                                          const CellOutlierLimits& limits,
                                          const CellOutlierCell& keep = {}, bool held = false,
                                          Typical statistic = Typical::kFastHalfMean);

}  // namespace attnscope
