#pragma once

#include <map>

#include "attnscope/analysis/RunAnalysis.h"

namespace attnscope {
namespace analysis {
namespace detail {

// Fills a->roofline from the ranks' roofline cells and metadata: the hardware and ceilings, the
// merged (layer, phase, kind) points and the recommendations. a->ranks and a->layerNames must be
// set (their order indexes the per-rank figures and the cells).
void analyzeRoofline(const std::map<int, const RankTrace*>& byRank, const AnalysisOptions& options,
                     Analysis* a);

}  // namespace detail
}  // namespace analysis
}  // namespace attnscope
