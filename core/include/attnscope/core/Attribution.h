#pragma once

#include <cstdint>

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

// A cell's typical time per sampled step: its median per-call time × calls per step. The median
// ignores the calls a preemption, a page fault or a collector pause happened to hit (on a
// crowded host those multiply single calls by 10–30x and dominate a mean); a rank that is slow
// in every call, the kind that holds back synchronous training, moves it.
ATTNSCOPE_API double typicalSecondsPerStep(const CellStats& cell, uint64_t sampledSteps);

// A cell far above the same cell on the other ranks: its factor and its excess as a share of
// the rank's time per step in the cell's layer and phase.
struct CellOutlierCell {
  int32_t layer = -1;  // -1: none
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  double factor = 0;
  double share = 0;
};

struct CellComparison {
  Attribution attribution;
  CellOutlierCell outlier;  // the outlier cell with the largest excess
};

// `mine`: this rank's window; `others`: the same window summed over the other ranks (same layer
// layout: the all-reduced sum less this rank's). Each cell's typical time per step on this rank is
// compared with the others' (from their merged histogram); the positive differences are the
// excess the attribution shares out. A cell at or above `outlierFactor` × the others' typical time
// whose excess is at least `outlierMinShare` of this rank's time per step in that layer and phase
// is an outlier. The outlier named is the one with the largest excess, unless `keep` (the cell
// named last window) is still one: several slow cells of similar size then do not take turns,
// which would restart the detector's count of windows naming the same cell.
ATTNSCOPE_API CellComparison compareCells(const StatsTable& mine, uint64_t mySampledSteps,
                                          const StatsTable& others, uint64_t othersSampledSteps,
                                          double outlierFactor, double outlierMinShare,
                                          const CellOutlierCell& keep = {});

}  // namespace attnscope
