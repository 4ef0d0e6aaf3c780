#pragma once

#include <string>

#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// The short human-readable per-layer table printed on stderr at stop (log level info).
class SummaryTable {
 public:
  static std::string render(const RunInfo& run, const StatsTable& stats);
};

}  // namespace attnscope
