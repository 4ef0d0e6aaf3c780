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

// `mine`: this rank's window; `cluster`: the same window summed over all ranks (same layer
// layout). Each cell's typical time per step on this rank is compared with the cluster's (from
// the merged histogram); the positive differences are the excess.
ATTNSCOPE_API Attribution attributeExcess(const StatsTable& mine, uint64_t mySampledSteps,
                                          const StatsTable& cluster, uint64_t clusterSampledSteps);

}  // namespace attnscope
