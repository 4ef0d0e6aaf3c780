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
  double share = 0;    // of the summed positive excess over all cells
};

// `mine`: this rank's window; `cluster`: the same window summed over all ranks (same layer
// layout). Each cell's time per sampled step on this rank is compared with the cluster's mean
// per sampled step (cluster sum / cluster sampled steps); the positive differences are the excess.
ATTNSCOPE_API Attribution attributeExcess(const StatsTable& mine, uint64_t mySampledSteps,
                                          const StatsTable& cluster,
                                          uint64_t clusterSampledSteps);

}  // namespace attnscope
