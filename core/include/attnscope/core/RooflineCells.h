#pragma once

#include <cstdint>
#include <vector>

#include "attnscope/core/Export.h"
#include "attnscope/core/OpKind.h"
#include "attnscope/core/Roofline.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// One (layer, phase, op kind) cell of a StatsTable on the roofline.
struct RooflineCell {
  int32_t layer = -1;  // index into the table's layers()
  Phase phase = Phase::kForward;
  OpKind kind = OpKind::kOther;
  uint64_t ops = 0;
  double seconds = 0;          // all ops of the cell
  double modelledSeconds = 0;  // the ops with a formula: the rates divide by this
  double flops = 0, bytes = 0, wideFlops = 0;
  RooflinePoint point;
};

// Every op-kind cell of `stats` that ran, placed against `ceilings`. With `device` (GPU timing),
// a cell's seconds are its device seconds and the modelled seconds the same share of them as on
// the host: a GPU op's host time is its launch, not its work.
ATTNSCOPE_API std::vector<RooflineCell> rooflineCells(const StatsTable& stats,
                                                      const StatsTable* device,
                                                      const Ceilings& ceilings);

}  // namespace attnscope
