#pragma once

#include <string>

#include "attnscope/core/RunInfo.h"
#include "attnscope/core/StatsTable.h"

namespace attnscope {

// The per-rank JSON summary (schema "attnscope.summary/1", documented in docs/SUMMARY_JSON.md).
class SummaryJson {
 public:
  static std::string render(const RunInfo& run, const StatsTable& stats);
  // Writes atomically (temporary file, then rename). Returns false and fills `error` on failure.
  static bool write(const std::string& path, const RunInfo& run, const StatsTable& stats,
                    std::string* error);
};

}  // namespace attnscope
