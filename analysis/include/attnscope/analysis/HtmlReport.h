#pragma once

#include <string>

#include "attnscope/analysis/RunAnalysis.h"

namespace attnscope {
namespace analysis {

// One self-contained HTML page (no script, no network): the finding first (the straggler rank,
// layer, phase and op kind, or that there is none; skipped and missing ranks), then inline SVG
// plots (rank × time heatmap of attention time, straggler score timeline, forward vs backward per
// layer per rank, peak memory per layer per rank) and the tables behind them.
class HtmlReport {
 public:
  static std::string render(const Analysis& analysis);
};

}  // namespace analysis
}  // namespace attnscope
